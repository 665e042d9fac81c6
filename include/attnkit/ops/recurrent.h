#pragma once
// Recurrent (RNN-mode) form of causal linear attention and causal cosFormer, one token at a time,
// for decoding: the state is S = Σ_j φ(k_j) [v_j, 1]ᵀ ([batch, heads, m, dv+1]: numerator and
// denominator sums together), so each step costs O(m·dv) whatever the position.
// Stepping through a sequence gives the same outputs as the parallel causal op.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnkit::ops {

class FeatureMap;

struct RecurrentState {
  at::Tensor sums;       // [batch, heads, m, dv + 1]; undefined before the first step
  int64_t position = 0;  // tokens consumed so far
};

// q, k, v [batch, heads, 1, d]: adds the token to the state and returns its output
// [batch, heads, 1, dv] (φ(q)·S_num / (φ(q)·S_den + 1e-6)).
at::Tensor linear_attention_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const FeatureMap& feature_map);

// The one feature-map recurrence every cached path uses (these steps, the decoding states of
// decode/incremental.h, the Python package's attnkit::recurrent_step): `sums` [batch, heads, m,
// dv + 1] (undefined = zeros) takes the n new columns' φ(k) [batch, heads, n, m] (padding already
// zeroed) and v [batch, heads, n, dv]; returns their outputs [batch, heads, n, dv] with the
// denominator φ(q)·S_den + 1e-6 (clamp false: linear attention) or max(φ(q)·S_den, 1e-6) (clamp
// true: cosFormer). causal: column i reads the sums before the chunk and the chunk's columns j <=
// i; false: the whole chunk (a bidirectional prefix). Long chunks go in blocks of 128 columns, so
// the [c, c] scores stay bounded.
at::Tensor feature_recurrence(at::Tensor& sums, const at::Tensor& phi_q, const at::Tensor& phi_k,
                              const at::Tensor& v, bool causal, bool clamp);
// cosFormer's re-weighting needs the horizon M fixed in advance (M >= the final length; the
// parallel op uses M = max(L, S)). Token t (1-based) gets features ReLU(x)·[cos, sin](π/2·t/M).
at::Tensor cosformer_attention_step(RecurrentState& state, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, int64_t horizon);

}  // namespace attnkit::ops
// Kernel: src/ops/recurrent.cpp (ATen ops, one token per call). Tests: tests/ops/recurrent_test.cpp (Recurrent.*), tests/ops/variant_oracle_test.cpp (VariantTraits.*).
