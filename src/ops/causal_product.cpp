#include "causal_product.h"

#include "cpu/causal_product_kernel.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <vector>

namespace attnkit::ops::detail {

namespace {

// The kernel on contiguous [B, H, n, ·] tensors, parallel over batch·heads.
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
    at::parallel_for(0, bh, 1, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> workspace(cpu::causal_product_workspace(m, e));
      for (int64_t i = begin; i < end; ++i)
        cpu::causal_product(qp + i * n * m, kp + i * n * m, vp + i * n * e, yp + i * n * e, n, m,
                            e, reverse, workspace.data());
    });
  });
  return y;
}

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

}  // namespace

at::Tensor causal_product(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          bool reverse) {
  return CausalProduct::apply(q, k, v, reverse);
}

}  // namespace attnkit::ops::detail
