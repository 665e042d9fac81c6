#pragma once
// cosFormer attention (Qin et al. 2022). Weight(i, j) = ReLU(q_i)·ReLU(k_j) · cos(π/2 · (i − j)/M)
// with 1-based positions and M = max(L, S); output = Σ_j w_ij v_j / max(Σ_j w_ij, 1e-6).
// No 1/sqrt(d) scaling. Computed through cos(a−b) = cos a cos b + sin a sin b as a linear
// attention over features [ReLU(x)·cos, ReLU(x)·sin] — no L×S matrix.
// Non-causal (incl. cross attention, L ≠ S): query i is at position i+1, key j at j+1.
// causal: bottom-right aligned like ops/masks.h causal_mask (query i at position i+1+S−L), L <= S.
// Layout: q [batch, heads, L, dk], k [batch, heads, S, dk], v [batch, heads, S, dv].
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace attnkit::ops {

at::Tensor cosformer_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal = false,
                               const c10::optional<at::Tensor>& key_padding_mask = c10::nullopt);

// Prefix-LM cosFormer, self attention over n tokens (M = n, query and key i at position i+1):
// the weights above restricted to ops/masks.h prefix_lm_mask(prefix_lengths, n) and the optional
// key padding, in O(n) (see prefix_linear_attention in linear_attention.h; cos(a−b) splits over the
// cos/sin feature halves, so the prefix summary and the causal running sum carry over).
// prefix_lengths [batch] integer, each in [0, n].
at::Tensor prefix_cosformer_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& prefix_lengths,
                                      const c10::optional<at::Tensor>& key_padding_mask =
                                          c10::nullopt);

// The re-weighting angles π/2 · position / M for `count` positions starting at 1 + first_offset,
// as a [count] tensor of the given dtype. Shared with the recurrent (decoding) form.
at::Tensor cosformer_angles(int64_t count, int64_t first_offset, int64_t M, at::ScalarType dtype);

// cosFormer's features [ReLU(x)·cos(angle), ReLU(x)·sin(angle)] along the last axis;
// x [B, H, n, d], angles [n] -> [B, H, n, 2d].
at::Tensor cosformer_features(const at::Tensor& x, const at::Tensor& angles);

}  // namespace attnkit::ops
// Kernel: src/ops/cpu/fused_feature_attention_kernel.cpp (through src/ops/fused_feature_attention.cpp; src/ops/feature_attention.cpp where the fused op does not apply). Tests: tests/ops/fused_kernels_test.cpp (FusedKernels.*), tests/ops/prefix_feature_attention_test.cpp (PrefixFeatureAttention.*), tests/ops/attention_ops_test.cpp (Cosformer.*), tests/ops/variant_oracle_test.cpp (VariantOracle.*).
