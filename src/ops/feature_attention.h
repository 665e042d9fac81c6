#pragma once
// Feature-map attention on explicit features, the unfused core of linear attention and cosFormer:
//   out_i = φq_i · Σ_j φk_j v_jᵀ / den(φq_i · Σ_j φk_j)
// with the sum over all keys (non-causal) or over j <= i + S − L (causal), from φ(q) and φ(k)
// given as tensors and ATen ops (the causal sums through a chunked causal-product kernel,
// ops/cpu/causal_product_kernel.h). Differentiable to any order. It serves what the fused op
// (fused_feature_attention.h, features computed inside the kernels) does not: FAVOR, dtypes other
// than float32/float64, causal with L < S or key padding, and create_graph backwards.
// Private to src/.
#include <ATen/core/Tensor.h>

namespace attnkit::ops::detail {

enum class Denominator {
  AddEpsilon,    // den + 1e-6 (linear attention)
  ClampEpsilon,  // max(den, 1e-6) (cosFormer)
};

constexpr double kFeatureAttentionEpsilon = 1e-6;

// phi_q [B, H, L, m], phi_k [B, H, S, m] (padded keys already zeroed), v [B, H, S, dv].
at::Tensor feature_attention(const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& v,
                             bool causal, Denominator denominator);

// The same over an explicit bool mask `allowed` broadcastable to [B, H, L, S] (true = may
// attend), written out as an L×S matrix: the unfused path of prefix-LM / UniLM feature attention
// (FAVOR, other dtypes, create_graph backwards).
at::Tensor masked_feature_attention(const at::Tensor& phi_q, const at::Tensor& phi_k,
                                    const at::Tensor& v, const at::Tensor& allowed,
                                    Denominator denominator);

// The causal-product kernel without autograd: Y = tril(Q Kᵀ) V over float32/float64 CPU tensors
// [B, H, n, ·] (reverse: s >= t), parallel over batch·heads (the Python package's
// attnkit::causal_product op calls it too).
at::Tensor causal_product_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  bool reverse);

// Checks of the prefix-LM entry points: self attention (L = S = n) and prefix_lengths a [B]
// integer tensor with values in [0, n]. Returns prefix_lengths as contiguous int64.
at::Tensor check_prefix_lengths(const char* op, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& prefix_lengths);

// Checks shared by linear_attention and cosformer_attention (qkv, causal L <= S, padding mask).
void check_feature_attention_inputs(const char* op, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, bool causal,
                                    const c10::optional<at::Tensor>& key_padding_mask);

// phi_k with padded keys zeroed (returns phi_k unchanged when there is no mask).
at::Tensor zero_padded_keys(const at::Tensor& phi_k,
                            const c10::optional<at::Tensor>& key_padding_mask);

}  // namespace attnkit::ops::detail
