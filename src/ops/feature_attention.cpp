#include "feature_attention.h"

#include "checks.h"
#include "cpu/parallel.h"
#include "cpu/causal_product_kernel.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <vector>

namespace attnkit::ops::detail {

namespace {

// Differentiable causal product Y = tril(Q Kᵀ) V over [batch, heads, n, ·]; reverse: s >= t.
// Forward and backward both run the chunked CPU kernel (ops/cpu/causal_product_kernel.h); the
// backward is three more causal products (one forward in time, two reversed), so no n×n or
// n·m·e tensor ever exists.
at::Tensor causal_product(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          bool reverse = false);

}  // namespace

at::Tensor causal_product_forward(const at::Tensor& q_in, const at::Tensor& k_in,
                                  const at::Tensor& v_in, bool reverse) {
  auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const int64_t B = q.size(0), H = q.size(1), n = q.size(2), m = q.size(3), e = v.size(3);
  auto y = at::empty({B, H, n, e}, v.options());
  if (y.numel() == 0) return y.zero_();
  const int64_t bh = B * H;
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "causal_product", [&] {
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* kp = k.data_ptr<scalar_t>();
    const scalar_t* vp = v.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    cpu::parallel_for(0, bh, 1, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> workspace(cpu::causal_product_workspace(m, e));
      for (int64_t i = begin; i < end; ++i)
        cpu::causal_product(qp + i * n * m, kp + i * n * m, vp + i * n * e, yp + i * n * e, n, m,
                            e, reverse, workspace.data());
    });
  });
  return y;
}

namespace {

class CausalProduct : public torch::autograd::Function<CausalProduct> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool reverse) {
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["reverse"] = reverse;
    return causal_product_forward(q, k, v, reverse);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2];
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const auto& g = grads[0];
    // With Y_t = Σ_{s ≼ t} (q_t·k_s) v_s:
    //   dq_t = Σ_{s ≼ t} (g_t·v_s) k_s   (same direction)
    //   dk_s = Σ_{t ≽ s} (v_s·g_t) q_t   (opposite direction)
    //   dv_s = Σ_{t ≽ s} (k_s·q_t) g_t   (opposite direction)
    at::Tensor dq, dk, dv;
    if (ctx->needs_input_grad(0)) dq = causal_product(g, v, k, reverse);
    if (ctx->needs_input_grad(1)) dk = causal_product(v, g, q, !reverse);
    if (ctx->needs_input_grad(2)) dv = causal_product(k, q, g, !reverse);
    return {dq, dk, dv, at::Tensor()};
  }
};

at::Tensor causal_product(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          bool reverse) {
  return CausalProduct::apply(q, k, v, reverse);
}

}  // namespace

at::Tensor feature_attention(const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& v,
                             bool causal, Denominator denominator) {
  const int64_t L = phi_q.size(2);
  const int64_t S = phi_k.size(2);
  at::Tensor num, den;
  if (causal) {
    // Numerator and denominator in one fused causal product over values augmented with a
    // column of ones: tril(φq φkᵀ) [v, 1] = [num, den]. Query i sees key S − L + i and before;
    // the first S − L keys (all visible to every query) enter as a plain product.
    const int64_t dv = v.size(3);
    auto v1 = at::cat({v, at::ones_like(v.narrow(3, 0, 1))}, 3);
    auto aligned = causal_product(phi_q, phi_k.narrow(2, S - L, L), v1.narrow(2, S - L, L));
    if (S > L) {
      auto prefix_k = phi_k.narrow(2, 0, S - L);
      aligned = aligned + at::matmul(phi_q, at::matmul(prefix_k.transpose(-2, -1),
                                                       v1.narrow(2, 0, S - L)));
    }
    num = aligned.narrow(3, 0, dv);
    den = aligned.narrow(3, dv, 1);
  } else {
    num = at::matmul(phi_q, at::matmul(phi_k.transpose(-2, -1), v));
    den = at::matmul(phi_q, phi_k.sum(2).unsqueeze(-1));
  }
  den = denominator == Denominator::AddEpsilon ? den + kFeatureAttentionEpsilon
                                               : den.clamp_min(kFeatureAttentionEpsilon);
  return num / den;
}

at::Tensor masked_feature_attention(const at::Tensor& phi_q, const at::Tensor& phi_k,
                                    const at::Tensor& v, const at::Tensor& allowed,
                                    Denominator denominator) {
  auto scores = at::matmul(phi_q, phi_k.transpose(-2, -1)) * allowed.to(phi_q.scalar_type());
  auto den = scores.sum(-1, /*keepdim=*/true);
  den = denominator == Denominator::AddEpsilon ? den + kFeatureAttentionEpsilon
                                               : den.clamp_min(kFeatureAttentionEpsilon);
  return at::matmul(scores, v) / den;
}

at::Tensor check_prefix_lengths(const char* op, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& prefix_lengths) {
  if (q.size(2) != k.size(2))
    fail(op, fmt::format("prefix-LM attention is self attention (L = S), but q has shape {} and k "
                         "has shape {}",
                         shape_str(q), shape_str(k)));
  check_defined(op, "prefix_lengths", prefix_lengths);
  if (prefix_lengths.dim() != 1 || prefix_lengths.size(0) != q.size(0) ||
      at::isFloatingType(prefix_lengths.scalar_type()) ||
      prefix_lengths.scalar_type() == at::kBool)
    fail(op, fmt::format("prefix_lengths must be an integer tensor of shape [{}] (one length per "
                         "batch row), got {} of dtype {}",
                         q.size(0), shape_str(prefix_lengths),
                         c10::toString(prefix_lengths.scalar_type())));
  auto lengths = prefix_lengths.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t n = q.size(2);
  if (lengths.numel() > 0 &&
      (lengths.min().item<int64_t>() < 0 || lengths.max().item<int64_t>() > n))
    fail(op, fmt::format("prefix_lengths must lie in [0, {}] (the sequence length), got values "
                         "from {} to {}",
                         n, lengths.min().item<int64_t>(), lengths.max().item<int64_t>()));
  return lengths;
}

void check_feature_attention_inputs(const char* op, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, bool causal,
                                    const c10::optional<at::Tensor>& key_padding_mask) {
  check_qkv(op, q, k, v);
  if (causal && q.size(2) > k.size(2))
    fail(op, fmt::format("causal attention needs L <= S (queries are the last L of the S keys), "
                         "but q has shape {} and k has shape {}",
                         shape_str(q), shape_str(k)));
  if (key_padding_mask.has_value() && key_padding_mask->defined())
    check_key_padding_mask(op, *key_padding_mask, q.size(0), k.size(2));
}

at::Tensor zero_padded_keys(const at::Tensor& phi_k,
                            const c10::optional<at::Tensor>& key_padding_mask) {
  if (!key_padding_mask.has_value() || !key_padding_mask->defined()) return phi_k;
  auto keep = key_padding_mask->to(phi_k.scalar_type());
  return phi_k * keep.view({keep.size(0), 1, keep.size(1), 1});
}

}  // namespace attnkit::ops::detail
