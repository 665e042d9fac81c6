#pragma once
// Naive float64 oracles: the textbook formula of every attention op, with the explicit L×S weight
// matrix, the explicit mask and explicit sums. They are slow on purpose and share no code with
// the ops they check (ops/*.h); tests and `attnkit demo` compare the ops against them.
// Every function returns float64 tensors; inputs of any floating dtype are promoted.
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <vector>

namespace attnkit::ops {
class FeatureMap;
}

namespace attnkit::reference {

// Explicit boolean "may attend" matrix [B, H, L, S] from an optional bool mask and causality.
at::Tensor allowed_matrix(int64_t B, int64_t H, int64_t L, int64_t S,
                          const c10::optional<at::Tensor>& bool_mask, bool causal,
                          const c10::optional<at::Tensor>& key_padding_mask = c10::nullopt);

// Row-normalised exp weights over allowed entries; rows with no allowed entry are all zero.
at::Tensor softmax_weights(const at::Tensor& logits, const at::Tensor& allowed);

at::Tensor softmax_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const c10::optional<at::Tensor>& mask = c10::nullopt,
                             bool causal = false, c10::optional<double> scale = c10::nullopt);

// φ(x) written out from the definition (elu+1, relu, favor with the map's projection).
at::Tensor feature_map(const ops::FeatureMap& fm, const at::Tensor& x);

// `mask`: an extra bool mask broadcastable to [B, H, L, S] (true = may attend), e.g. the
// prefix-LM or UniLM mask of ops/masks.h.
at::Tensor linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const ops::FeatureMap& fm, bool causal = false,
                            const c10::optional<at::Tensor>& key_padding_mask = c10::nullopt,
                            const c10::optional<at::Tensor>& mask = c10::nullopt);

at::Tensor cosformer_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal = false,
                               const c10::optional<at::Tensor>& key_padding_mask = c10::nullopt,
                               const c10::optional<at::Tensor>& mask = c10::nullopt);

// Synthesizer logits, element by element.
at::Tensor dense_synthesizer_logits(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1,
                                    const at::Tensor& w2, const at::Tensor& b2, int64_t S);
at::Tensor factorized_dense_synthesizer_logits(const at::Tensor& x, const at::Tensor& wa,
                                               const at::Tensor& wb, int64_t S);
at::Tensor factorized_random_synthesizer_logits(const at::Tensor& r1, const at::Tensor& r2,
                                                int64_t L, int64_t S);
at::Tensor mix_logits(const std::vector<at::Tensor>& logits, const at::Tensor& mixing);

// softmax weights of logits under mask/causal, times v.
at::Tensor attention_from_logits(const at::Tensor& logits, const at::Tensor& v,
                                 const c10::optional<at::Tensor>& mask = c10::nullopt,
                                 bool causal = false);

at::Tensor talking_heads_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& pre_mix, const at::Tensor& post_mix,
                                   const c10::optional<at::Tensor>& mask = c10::nullopt,
                                   bool causal = false,
                                   c10::optional<double> scale = c10::nullopt);

}  // namespace attnkit::reference
// Kernel: src/ops/reference.cpp (naive float64 ATen ops, slow on purpose). Tests: tests/ops/variant_oracle_test.cpp (VariantOracle.*, every op against these oracles), tests/ops/fused_kernels_test.cpp (FusedKernels.*).
