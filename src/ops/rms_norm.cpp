#include "attnkit/ops/rms_norm.h"

#include "checks.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

namespace attnkit::ops {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, RmsNormKind kind) {
  constexpr const char* op = "rms_norm";
  detail::check_defined(op, "x", x);
  detail::check_defined(op, "weight", weight);
  detail::check_floating(op, "x", x);
  detail::check_floating(op, "weight", weight);
  if (x.dim() < 1 || x.size(-1) < 1)
    detail::fail(op, fmt::format("x must be [..., d] with d >= 1, got shape {}",
                                 detail::shape_str(x)));
  if (weight.dim() != 1 || weight.size(0) != x.size(-1))
    detail::fail(op, fmt::format("weight must be [{}] (the last axis of x, shape {}), got shape {}",
                                 x.size(-1), detail::shape_str(x), detail::shape_str(weight)));
  if (!std::isfinite(eps) || eps < 0)
    detail::fail(op, fmt::format("eps must be finite and >= 0, got {}", eps));
  // transformers: hidden_states.to(torch.float32); float64 stays float64 (see the header).
  const auto compute = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto h = x.to(compute);
  auto variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + eps);
  if (kind == RmsNormKind::Llama) return weight * h.to(x.scalar_type());
  return (h * (weight.to(compute) + 1.0)).to(x.scalar_type());
}

}  // namespace attnkit::ops
