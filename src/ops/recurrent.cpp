#include "attnkit/ops/recurrent.h"

#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "checks.h"
#include "feature_attention.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace attnkit::ops {

namespace {

void check_step(const char* op, const RecurrentState& state, const at::Tensor& q,
                const at::Tensor& k, const at::Tensor& v) {
  detail::check_qkv(op, q, k, v);
  if (q.size(2) != 1 || k.size(2) != 1)
    detail::fail(op, fmt::format("a step takes one token: q has shape {} and k has shape {}",
                                 detail::shape_str(q), detail::shape_str(k)));
  if (state.sums.defined() &&
      (state.sums.size(0) != q.size(0) || state.sums.size(1) != q.size(1) ||
       state.sums.size(3) != v.size(3) + 1))
    detail::fail(op, fmt::format("state has shape {} which does not fit v of shape {}",
                                 detail::shape_str(state.sums), detail::shape_str(v)));
}

// Adds φ(k)[v, 1]ᵀ to the state and reads φ(q)·S out with the given denominator rule.
at::Tensor step(RecurrentState& state, const at::Tensor& phi_q, const at::Tensor& phi_k,
                const at::Tensor& v, detail::Denominator rule) {
  auto v1 = at::cat({v, at::ones_like(v.narrow(3, 0, 1))}, 3);           // [B, H, 1, dv+1]
  auto update = at::matmul(phi_k.transpose(-2, -1), v1);                 // [B, H, m, dv+1]
  state.sums = state.sums.defined() ? state.sums + update : update;
  state.position += 1;
  auto read = at::matmul(phi_q, state.sums);                             // [B, H, 1, dv+1]
  const int64_t dv = v.size(3);
  auto den = read.narrow(3, dv, 1);
  den = rule == detail::Denominator::AddEpsilon ? den + detail::kFeatureAttentionEpsilon
                                                : den.clamp_min(detail::kFeatureAttentionEpsilon);
  return read.narrow(3, 0, dv) / den;
}

}  // namespace

at::Tensor linear_attention_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const FeatureMap& feature_map) {
  check_step("linear_attention_step", state, q, k, v);
  return step(state, feature_map.apply(q), feature_map.apply(k), v,
              detail::Denominator::AddEpsilon);
}

at::Tensor cosformer_attention_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, int64_t horizon) {
  constexpr const char* op = "cosformer_attention_step";
  check_step(op, state, q, k, v);
  if (state.position + 1 > horizon)
    detail::fail(op, fmt::format("token {} is beyond the horizon M = {}; choose M >= the final "
                                 "length",
                                 state.position + 1, horizon));
  auto angle = cosformer_angles(1, state.position, horizon, q.scalar_type());
  return step(state, cosformer_features(q, angle), cosformer_features(k, angle), v,
              detail::Denominator::ClampEpsilon);
}

}  // namespace attnkit::ops
