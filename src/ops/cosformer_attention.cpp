#include "attnkit/ops/cosformer_attention.h"

#include "checks.h"
#include "feature_attention.h"
#include "fused_feature_attention.h"

#include "attnkit/ops/masks.h"

#include <ATen/ATen.h>

#include <cmath>

namespace attnkit::ops {

at::Tensor cosformer_angles(int64_t count, int64_t first_offset, int64_t M, at::ScalarType dtype) {
  auto pos = at::arange(1 + first_offset, 1 + first_offset + count,
                        at::TensorOptions().dtype(at::kDouble));
  return (pos * (M_PI / 2.0 / static_cast<double>(M))).to(dtype);
}

at::Tensor cosformer_features(const at::Tensor& x, const at::Tensor& angles) {
  auto r = at::relu(x);
  auto a = angles.view({1, 1, -1, 1});
  return at::cat({r * a.cos(), r * a.sin()}, -1);
}

at::Tensor cosformer_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal, const c10::optional<at::Tensor>& key_padding_mask) {
  detail::check_feature_attention_inputs("cosformer_attention", q, k, v, causal, key_padding_mask);
  const int64_t L = q.size(2), S = k.size(2);
  const int64_t M = std::max<int64_t>({L, S, 1});
  if (detail::fused_feature_applies(q, k, causal, key_padding_mask, FeatureMapKind::CosRelu))
    return detail::fused_feature_attention(q, k, v, key_padding_mask, FeatureMapKind::CosRelu,
                                           M_PI / 2.0 / static_cast<double>(M),
                                           /*clamp=*/true, causal);
  const auto dtype = q.scalar_type();
  auto phi_q = cosformer_features(q, cosformer_angles(L, causal ? S - L : 0, M, dtype));
  auto phi_k = detail::zero_padded_keys(cosformer_features(k, cosformer_angles(S, 0, M, dtype)),
                                        key_padding_mask);
  return detail::feature_attention(phi_q, phi_k, v, causal, detail::Denominator::ClampEpsilon);
}

at::Tensor prefix_cosformer_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& prefix_lengths,
                                      const c10::optional<at::Tensor>& key_padding_mask) {
  const char* op = "prefix_cosformer_attention";
  detail::check_feature_attention_inputs(op, q, k, v, /*causal=*/false, key_padding_mask);
  const auto lengths = detail::check_prefix_lengths(op, q, k, prefix_lengths);
  const int64_t n = q.size(2), M = std::max<int64_t>(n, 1);
  if (detail::fused_prefix_feature_applies(q, FeatureMapKind::CosRelu))
    return detail::fused_prefix_feature_attention(q, k, v, lengths, key_padding_mask,
                                                  FeatureMapKind::CosRelu,
                                                  M_PI / 2.0 / static_cast<double>(M),
                                                  /*clamp=*/true);
  const auto angles = cosformer_angles(n, 0, M, q.scalar_type());
  auto phi_k = detail::zero_padded_keys(cosformer_features(k, angles), key_padding_mask);
  return detail::masked_feature_attention(cosformer_features(q, angles), phi_k, v,
                                          prefix_lm_mask(lengths, n).to(q.device()),
                                          detail::Denominator::ClampEpsilon);
}

}  // namespace attnkit::ops
