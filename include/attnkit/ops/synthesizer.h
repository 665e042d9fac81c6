#pragma once
// Synthesizer attention logits (Tay et al. 2020): attention weights that do not come from
// token–token dot products. Each producer returns logits [batch or 1, heads, L, S]; feed them to
// ops::attention_from_logits (masked softmax, then · v) alone or mixed with mix_logits.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace attnkit::ops {

// Dense: a per-token two-layer MLP maps each query token to S logits, per head:
//   logits[b, h, i, :] = (ReLU(x[b, h, i] W1[h] + b1[h]) W2[h] + b2[h])[:S]
// x [B, H, L, d], w1 [H, d, hidden], b1 [H, hidden], w2 [H, hidden, S_max], b2 [H, S_max]; S <= S_max.
at::Tensor dense_synthesizer_logits(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1,
                                    const at::Tensor& w2, const at::Tensor& b2, int64_t S);

// Random: r [H, L_max, S_max] -> [1, H, L, S], the same op for both of Tay et al.'s random
// Synthesizers: trained (`synthesizer-random`, r a parameter) and fixed (`synthesizer-random-fixed`,
// r a seeded buffer of MultiHeadAttention that no optimiser step moves).
at::Tensor random_synthesizer_logits(const at::Tensor& r, int64_t L, int64_t S);

// Factorized random: r1 [H, L_max, k], r2 [H, S_max, k] -> r1[:, :L] r2[:, :S]ᵀ as [1, H, L, S].
at::Tensor factorized_random_synthesizer_logits(const at::Tensor& r1, const at::Tensor& r2,
                                                int64_t L, int64_t S);

// Factorized dense: two narrow per-token projections A = ReLU(x Wa) [.., a], B = ReLU(x Wb) [.., b]
// combined into a·b logits as the flattened outer product (logit t = A[t / b] · B[t % b]),
// truncated to S (requires a·b >= S). x [B, H, L, d], wa [H, d, a], wb [H, d, b].
at::Tensor factorized_dense_synthesizer_logits(const at::Tensor& x, const at::Tensor& wa,
                                               const at::Tensor& wb, int64_t S);

// Mixture: Σ_i softmax(mixing)[i] · logits[i]; every logits[i] broadcastable to a common
// [B, H, L, S]; mixing [n] raw (learned) weights.
at::Tensor mix_logits(const std::vector<at::Tensor>& logits, const at::Tensor& mixing);

}  // namespace attnkit::ops
// Kernel: src/ops/synthesizer.cpp (ATen ops, no fused kernel). Tests: tests/ops/variant_oracle_test.cpp (VariantOracle.*, VariantProperty.*), tests/ops/attention_ops_test.cpp (Errors.*).
