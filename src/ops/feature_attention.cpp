#include "feature_attention.h"

#include "causal_product.h"
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
