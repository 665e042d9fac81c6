#pragma once
// Softmax (dot-product) attention. Layout: q [batch, heads, L, dk], k [batch, heads, S, dk],
// v [batch, heads, S, dv] -> [batch, heads, L, dv]. dk and dv may differ; L and S may differ.
//
// mask: bool (true = attend) or additive floating, broadcastable to [batch, heads, L, S].
// causal: query i may attend key j iff j <= i + (S - L) (see ops/masks.h causal_mask).
// A query whose keys are all masked gets zero weights and a zero output (never NaN).
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace attnkit::ops {

// softmax(q kᵀ · scale + mask) v, scale defaults to 1/sqrt(dk).
at::Tensor softmax_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const c10::optional<at::Tensor>& mask = c10::nullopt,
                             bool causal = false, c10::optional<double> scale = c10::nullopt);

// The attention weights softmax(q kᵀ · scale + mask) [batch, heads, L, S], for analysis.
at::Tensor softmax_attention_weights(const at::Tensor& q, const at::Tensor& k,
                                     const c10::optional<at::Tensor>& mask = c10::nullopt,
                                     bool causal = false,
                                     c10::optional<double> scale = c10::nullopt);

// Row softmax of logits [batch, heads, L, S] under a mask; fully masked rows give zeros.
at::Tensor masked_softmax(const at::Tensor& logits,
                          const c10::optional<at::Tensor>& mask = c10::nullopt,
                          bool causal = false);

// masked_softmax(logits) v: the back half of attention, shared by every logit producer
// (dot product, Synthesizer, talking-heads). logits [batch, heads, L, S], v [batch, heads, S, dv].
at::Tensor attention_from_logits(const at::Tensor& logits, const at::Tensor& v,
                                 const c10::optional<at::Tensor>& mask = c10::nullopt,
                                 bool causal = false);

}  // namespace attnkit::ops
