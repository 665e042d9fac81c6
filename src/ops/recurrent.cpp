#include "attnkit/ops/recurrent.h"

#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "checks.h"
#include "feature_attention.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

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

// Columns per block when a chunk is long (bounds the [c, c] scores).
constexpr int64_t kRecurrenceBlock = 128;

}  // namespace

at::Tensor feature_recurrence(at::Tensor& sums, const at::Tensor& phi_q, const at::Tensor& phi_k,
                              const at::Tensor& v, bool causal, bool clamp) {
  const int64_t n = v.size(2), dv = v.size(3);
  at::Tensor v1 = at::cat({v, at::ones_like(v.narrow(3, 0, 1))}, 3);  // [B, H, n, dv + 1]
  if (!sums.defined())
    sums = at::zeros({v.size(0), v.size(1), phi_k.size(3), dv + 1}, v1.options());
  at::Tensor read;
  if (!causal) {
    // Every new column sees all of them and everything before; the sums then hold the prefix
    // summary that the causal columns after it start from.
    sums = sums + at::matmul(phi_k.transpose(-2, -1), v1);
    read = at::matmul(phi_q, sums);
  } else {
    std::vector<at::Tensor> reads;
    for (int64_t start = 0; start < n; start += kRecurrenceBlock) {
      const int64_t c = std::min(kRecurrenceBlock, n - start);
      at::Tensor fq = phi_q.narrow(2, start, c), fk = phi_k.narrow(2, start, c);
      at::Tensor vb = v1.narrow(2, start, c);
      at::Tensor block = at::matmul(fq, sums);  // the columns before this block
      if (c == 1) {
        block = block + at::matmul(fq, fk.transpose(-2, -1)) * vb;
      } else {
        at::Tensor scores = at::matmul(fq, fk.transpose(-2, -1)).tril();  // key j <= query i
        block = block + at::matmul(scores, vb);
      }
      sums = sums + at::matmul(fk.transpose(-2, -1), vb);
      reads.push_back(block);
    }
    read = reads.size() == 1 ? reads[0] : at::cat(reads, 2);
  }
  at::Tensor den = read.narrow(3, dv, 1);
  den = clamp ? den.clamp_min(detail::kFeatureAttentionEpsilon)
              : den + detail::kFeatureAttentionEpsilon;
  return read.narrow(3, 0, dv) / den;
}

at::Tensor linear_attention_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const FeatureMap& feature_map) {
  check_step("linear_attention_step", state, q, k, v);
  at::Tensor out = feature_recurrence(state.sums, feature_map.apply(q), feature_map.apply(k), v,
                                      /*causal=*/true, /*clamp=*/false);
  state.position += 1;
  return out;
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
  at::Tensor out = feature_recurrence(state.sums, cosformer_features(q, angle),
                                      cosformer_features(k, angle), v, /*causal=*/true,
                                      /*clamp=*/true);
  state.position += 1;
  return out;
}

}  // namespace attnkit::ops
