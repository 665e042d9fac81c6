#pragma once
// Softmax (dot-product) attention. Layout: q [batch, heads, L, dk], k [batch, heads, S, dk],
// v [batch, heads, S, dv] -> [batch, heads, L, dv]. dk and dv may differ; L and S may differ.
//
// mask: bool (true = attend) or additive floating, broadcastable to [batch, heads, L, S].
// causal: query i may attend key j iff j <= i + (S - L) (see ops/masks.h causal_mask).
// A query whose keys are all masked gets zero weights and a zero output (never NaN).
//
// Grouped-query attention (Llama 2 70B, Mistral, SmolLM2, ...): k and v may have fewer heads than
// q, Hkv dividing Hq; query head h reads key/value head h / (Hq / Hkv) (transformers' repeat_kv).
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>

namespace attnkit::ops {

// Dropout on the attention probabilities: weight (b, h, i, j) is kept iff a counter-based hash of
// (seed, position) says so (the same decision in forward and backward, on any thread), and kept
// weights are scaled by 1 / (1 − rate). rate 0 = off. Callers draw a fresh seed per call in
// training (MultiHeadAttention draws it from the default CPU generator).
struct AttentionDropout {
  double rate = 0.0;  // in [0, 1)
  uint64_t seed = 0;
};

// The keep mask [batch, heads, L, S] (bool) of `dropout`, written out (for oracles and for the
// unfused path).
at::Tensor attention_dropout_keep(int64_t batch, int64_t heads, int64_t L, int64_t S,
                                  const AttentionDropout& dropout);
// weights [batch, heads, L, S] ∘ keep / (1 − rate); weights unchanged when rate is 0.
at::Tensor apply_attention_dropout(const at::Tensor& weights, const AttentionDropout& dropout);

// The Llama-family extras of softmax attention.
struct SoftmaxExtras {
  // > 0: a sliding window (Mistral, Gemma 2/3 local layers), with causal only: query i (column
  // c = i + S − L) sees key j iff 0 <= c − j < window (transformers' sliding-window mask).
  int64_t window = 0;
  // > 0: logits -> cap · tanh(logits / cap) after the scale, before the mask (Gemma 2's
  // attn_logit_softcapping).
  double logit_softcap = 0.0;
};

// softmax(q kᵀ · scale + mask) v, scale defaults to 1/sqrt(dk); with dropout, the probabilities
// are dropped as AttentionDropout says before they multiply v.
at::Tensor softmax_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const c10::optional<at::Tensor>& mask = c10::nullopt,
                             bool causal = false, c10::optional<double> scale = c10::nullopt,
                             const AttentionDropout& dropout = {},
                             const SoftmaxExtras& extras = {});

// The attention weights softmax(q kᵀ · scale + mask) [batch, heads, L, S], for analysis.
at::Tensor softmax_attention_weights(const at::Tensor& q, const at::Tensor& k,
                                     const c10::optional<at::Tensor>& mask = c10::nullopt,
                                     bool causal = false,
                                     c10::optional<double> scale = c10::nullopt,
                                     const SoftmaxExtras& extras = {});

// Row softmax of logits [batch, heads, L, S] under a mask; fully masked rows give zeros.
at::Tensor masked_softmax(const at::Tensor& logits,
                          const c10::optional<at::Tensor>& mask = c10::nullopt,
                          bool causal = false);

// masked_softmax(logits) v: the back half of attention, shared by every logit producer
// (dot product, Synthesizer, talking-heads). logits [batch, heads, L, S], v [batch, heads, S, dv].
at::Tensor attention_from_logits(const at::Tensor& logits, const at::Tensor& v,
                                 const c10::optional<at::Tensor>& mask = c10::nullopt,
                                 bool causal = false, const AttentionDropout& dropout = {});

}  // namespace attnkit::ops
// Kernel: src/ops/cpu/flash_attention_kernel.cpp (through src/ops/flash_attention.cpp). Tests: tests/ops/attention_ops_test.cpp (SoftmaxAttention.*), tests/ops/fused_kernels_test.cpp (FusedKernels.*).
