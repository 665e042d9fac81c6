#include "attnkit/ops/talking_heads.h"

#include "attnkit/ops/softmax_attention.h"
#include "checks.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

namespace attnkit::ops {

using detail::fail;
using detail::shape_str;

at::Tensor mix_heads(const at::Tensor& x, const at::Tensor& mix) {
  // einsum("bhls,hg->bgls")
  return at::matmul(x.movedim(1, -1), mix).movedim(-1, 1);
}

at::Tensor talking_heads_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& pre_mix, const at::Tensor& post_mix,
                                   const c10::optional<at::Tensor>& mask, bool causal,
                                   c10::optional<double> scale) {
  constexpr const char* op = "talking_heads_attention";
  detail::check_rank(op, "q", q, 4, "[batch, heads, L, dk]");
  detail::check_rank(op, "k", k, 4, "[batch, heads, S, dk]");
  detail::check_rank(op, "v", v, 4, "[batch, heads_v, S, dv]");
  detail::check_floating(op, "q", q);
  if (k.size(0) != q.size(0) || k.size(1) != q.size(1) || k.size(3) != q.size(3))
    fail(op, fmt::format("k has shape {} but q has shape {}; batch, heads and dk must match",
                         shape_str(k), shape_str(q)));
  if (v.size(0) != q.size(0) || v.size(2) != k.size(2))
    fail(op, fmt::format("v has shape {} but k has shape {}; batch and S must match",
                         shape_str(v), shape_str(k)));
  detail::check_rank(op, "pre_mix", pre_mix, 2, "[heads, mixed_heads]");
  detail::check_rank(op, "post_mix", post_mix, 2, "[mixed_heads, heads_v]");
  if (pre_mix.size(0) != q.size(1) || post_mix.size(0) != pre_mix.size(1) ||
      post_mix.size(1) != v.size(1))
    fail(op, fmt::format("pre_mix has shape {} and post_mix has shape {}; expected [{}, Hm] and "
                         "[Hm, {}] for q {} and v {}",
                         shape_str(pre_mix), shape_str(post_mix), q.size(1), v.size(1),
                         shape_str(q), shape_str(v)));
  if (mask.has_value() && mask->defined())
    detail::check_attention_mask(op, *mask, q.size(0), pre_mix.size(1), q.size(2), k.size(2), q);
  const double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  auto logits = mix_heads(at::matmul(q, k.transpose(-2, -1)) * s, pre_mix);
  auto weights = mix_heads(masked_softmax(logits, mask, causal), post_mix);
  return at::matmul(weights, v);
}

}  // namespace attnkit::ops
