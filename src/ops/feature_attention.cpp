#include "feature_attention.h"

#include "checks.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace attnkit::ops::detail {

at::Tensor feature_attention(const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& v,
                             bool causal, Denominator denominator) {
  const int64_t L = phi_q.size(2);
  const int64_t S = phi_k.size(2);
  at::Tensor num, den;
  if (causal) {
    // Prefix sums of φ(k_j) v_jᵀ and φ(k_j); query i reads prefix S − L + i.
    auto kv = (phi_k.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(2).narrow(2, S - L, L);
    auto z = phi_k.cumsum(2).narrow(2, S - L, L);
    num = at::matmul(phi_q.unsqueeze(-2), kv).squeeze(-2);
    den = (phi_q * z).sum(-1, /*keepdim=*/true);
  } else {
    num = at::matmul(phi_q, at::matmul(phi_k.transpose(-2, -1), v));
    den = at::matmul(phi_q, phi_k.sum(2).unsqueeze(-1));
  }
  den = denominator == Denominator::AddEpsilon ? den + kFeatureAttentionEpsilon
                                               : den.clamp_min(kFeatureAttentionEpsilon);
  return num / den;
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
