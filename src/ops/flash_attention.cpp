#include "flash_attention.h"

#include "cpu/flash_attention_kernel.h"

#include <torch/torch.h>

namespace attnkit::ops::detail {

namespace {

// The kernel reads a [B, H, n, d] operand through its batch, head and row strides as long as its
// feature dimension is contiguous and its rows do not overlap (a row stride of at least d, a BLAS
// leading dimension); anything else (rare: a view with a strided last dimension, expanded rows) is
// copied. Strides of size-1 dimensions are never stepped, so they do not count.
bool kernel_readable(const at::Tensor& t) {
  return (t.size(3) <= 1 || t.stride(3) == 1) && (t.size(2) <= 1 || t.stride(2) >= t.size(3));
}

at::Tensor kernel_operand(const at::Tensor& t) {
  return kernel_readable(t) ? t : t.contiguous();
}

cpu::FlashRows rows_of(const at::Tensor& t) {
  // A size-1 position dimension's stride is arbitrary; d keeps it a valid leading dimension.
  const int64_t n = t.size(2) <= 1 ? t.size(3) : t.stride(2);
  return {t.stride(0), t.stride(1), std::max<int64_t>(n, 1)};
}

}  // namespace

bool position_major(const at::Tensor& t) {
  return t.size(1) > 1 && t.size(2) > 1 && t.stride(1) < t.stride(2);
}

at::Tensor empty_attention_layout(const at::Tensor& like, int64_t d) {
  const int64_t B = like.size(0), H = like.size(1), n = like.size(2);
  if (position_major(like)) return at::empty({B, n, H, d}, like.options()).transpose(1, 2);
  return at::empty({B, H, n, d}, like.options());
}

namespace {

// Problem description and (expanded, strided) mask view; `mask_view` keeps the view alive. The
// layouts of the operands (FlashRows) are set by the callers.
cpu::FlashProblem describe(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask, bool causal, double scale, double dropout,
                           uint64_t dropout_seed, int64_t window, double logit_softcap,
                           at::Tensor& mask_view) {
  cpu::FlashProblem p;
  p.B = q.size(0);
  p.H = q.size(1);
  p.Hkv = k.size(1);
  p.window = window;
  p.logit_softcap = logit_softcap;
  p.L = q.size(2);
  p.S = k.size(2);
  p.dk = q.size(3);
  p.dv = v.size(3);
  p.scale = scale;
  p.causal = causal;
  p.dropout = dropout;
  p.dropout_seed = dropout_seed;
  if (mask.defined()) {
    mask_view = mask.expand({p.B, p.H, p.L, p.S});
    p.mask.stride_b = mask_view.stride(0);
    p.mask.stride_h = mask_view.stride(1);
    p.mask.stride_l = mask_view.stride(2);
    p.mask.stride_s = mask_view.stride(3);
    if (mask_view.scalar_type() == at::kBool)
      p.mask.bool_data = mask_view.data_ptr<bool>();
    else
      p.mask.additive_data = mask_view.data_ptr();
  }
  return p;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> flash_attention_forward(
    const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& mask,
    bool causal, double scale, double dropout, int64_t dropout_seed, int64_t window,
    double logit_softcap) {
  const auto q = kernel_operand(q_in), k = kernel_operand(k_in), v = kernel_operand(v_in);
  at::Tensor mask_view;
  auto p = describe(q, k, v, mask, causal, scale, dropout, static_cast<uint64_t>(dropout_seed),
                    window, logit_softcap, mask_view);
  // Output layouts follow the given operands (a copied one included), as the fake kernels do.
  auto out = empty_attention_layout(q_in, p.dv);
  auto lse = at::empty({p.B, p.H, p.L}, q.options());
  p.q_rows = rows_of(q);
  p.k_rows = rows_of(k);
  p.v_rows = rows_of(v);
  p.out_rows = rows_of(out);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "flash_attention_forward", [&] {
    cpu::flash_attention_forward(p, q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(),
                                 v.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                 lse.data_ptr<scalar_t>());
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q_in, const at::Tensor& k_in,
    const at::Tensor& v_in, const at::Tensor& out_in, const at::Tensor& lse_in,
    const at::Tensor& mask, bool causal, double scale, double dropout, int64_t dropout_seed,
    int64_t window, double logit_softcap) {
  const auto q = kernel_operand(q_in), k = kernel_operand(k_in), v = kernel_operand(v_in);
  const auto out = kernel_operand(out_in), dout = kernel_operand(grad_out);
  const auto lse = lse_in.contiguous();
  at::Tensor mask_view;
  auto p = describe(q, k, v, mask, causal, scale, dropout, static_cast<uint64_t>(dropout_seed),
                    window, logit_softcap, mask_view);
  auto dq = empty_attention_layout(q_in, p.dk), dk = empty_attention_layout(k_in, p.dk),
       dv = empty_attention_layout(v_in, p.dv);
  p.q_rows = rows_of(q);
  p.k_rows = rows_of(k);
  p.v_rows = rows_of(v);
  p.out_rows = rows_of(out);
  p.dout_rows = rows_of(dout);
  p.dq_rows = rows_of(dq);
  p.dk_rows = rows_of(dk);
  p.dv_rows = rows_of(dv);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "flash_attention_backward", [&] {
    cpu::flash_attention_backward(p, q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(),
                                  v.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                  lse.data_ptr<scalar_t>(), dout.data_ptr<scalar_t>(),
                                  dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(),
                                  dv.data_ptr<scalar_t>());
  });
  return {dq, dk, dv};
}

namespace {

class FlashAttention : public torch::autograd::Function<FlashAttention> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in,
                            const at::Tensor& k_in, const at::Tensor& v_in,
                            const c10::optional<at::Tensor>& mask_arg, bool causal, double scale,
                            double dropout, int64_t dropout_seed, int64_t window,
                            double logit_softcap) {
    // The mask takes no gradient (flash_attention_supports), so it travels as plain data.
    const at::Tensor mask = mask_arg.has_value() ? *mask_arg : at::Tensor();
    // q, k, v as given (views included, grouped k/v heads unrepeated): the kernels read them
    // through their strides.
    auto [out, lse] = flash_attention_forward(q_in, k_in, v_in, mask, causal, scale, dropout,
                                              dropout_seed, window, logit_softcap);
    ctx->save_for_backward({q_in, k_in, v_in, out, lse});
    if (mask.defined()) ctx->saved_data["mask"] = mask;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dropout"] = dropout;
    ctx->saved_data["dropout_seed"] = dropout_seed;
    ctx->saved_data["window"] = window;
    ctx->saved_data["logit_softcap"] = logit_softcap;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor mask =
        ctx->saved_data.count("mask") ? ctx->saved_data["mask"].toTensor() : at::Tensor();
    auto [dq, dk, dv] = flash_attention_backward(
        grads[0], saved[0], saved[1], saved[2], saved[3], saved[4], mask,
        ctx->saved_data["causal"].toBool(), ctx->saved_data["scale"].toDouble(),
        ctx->saved_data["dropout"].toDouble(), ctx->saved_data["dropout_seed"].toInt(),
        ctx->saved_data["window"].toInt(), ctx->saved_data["logit_softcap"].toDouble());
    return {dq,           dk,           dv,           at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool flash_attention_supports(const at::Tensor& q, const c10::optional<at::Tensor>& mask) {
  const auto t = q.scalar_type();
  if (t != at::kFloat && t != at::kDouble) return false;
  return !(mask.has_value() && mask->defined() && mask->requires_grad());
}

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const c10::optional<at::Tensor>& mask, bool causal, double scale,
                           const AttentionDropout& dropout, int64_t window,
                           double logit_softcap) {
  c10::optional<at::Tensor> defined_mask;
  if (mask.has_value() && mask->defined()) defined_mask = *mask;
  return FlashAttention::apply(q, k, v, defined_mask, causal, scale, dropout.rate,
                               static_cast<int64_t>(dropout.seed), window, logit_softcap);
}

}  // namespace attnkit::ops::detail
