#pragma once
// Differentiable fused causal product Y = tril(Q Kᵀ) V over [batch, heads, n, ·] (private to src/).
// Forward and backward both run the chunked CPU kernel (ops/cpu/causal_product_kernel.h); the
// backward is three more causal products (one forward in time, two reversed), so no n×n or n·m·e
// tensor ever exists.
#include <ATen/core/Tensor.h>

namespace attnkit::ops::detail {

// q, k [B, H, n, m], v [B, H, n, e] (same floating dtype) -> [B, H, n, e]. reverse: s >= t.
at::Tensor causal_product(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          bool reverse = false);

// Causal linear attention / causal cosFormer in one fused, differentiable op for L = S and no
// key padding (ops/cpu/causal_product_kernel.h): q, k [B, H, n, d], v [B, H, n, e] -> [B, H, n, e].
// feature: the φ applied to q and k inside the kernel; angle_step: cosFormer's π / (2M);
// clamp: D = max(den, eps) (cosFormer) rather than den + eps (linear). Saves q, k, v, the output
// and n denominators; a backward that must itself be differentiable (create_graph) is taken
// through the unfused composition instead.
enum class CausalFeature { Elu, Relu, CosRelu };

// Whether the fused op covers a call: causal, L = S, no key padding mask, float32 or float64.
bool fused_causal_applies(const at::Tensor& q, const at::Tensor& k, bool causal,
                          const c10::optional<at::Tensor>& key_padding_mask);
at::Tensor fused_causal_feature_attention(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, CausalFeature feature,
                                          double angle_step, bool clamp);

}  // namespace attnkit::ops::detail
