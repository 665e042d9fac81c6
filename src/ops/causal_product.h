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

// Linear attention / cosFormer in one fused, differentiable op: the feature map (elu+1, relu or
// cosFormer's [relu·cos, relu·sin]) is applied inside chunked kernels
// (ops/cpu/causal_product_kernel.h), so no feature tensor exists. q [B, H, L, d], k [B, H, S, d],
// v [B, H, S, e] -> [B, H, L, e]. Causal needs L = S and no padding; non-causal takes any L, S
// and an optional key_padding_mask [B, S] (true = real key). angle_step: cosFormer's π / (2M);
// clamp: D = max(den, eps) (cosFormer) rather than den + eps (linear). Saves the inputs, the
// output and L denominators; a backward that must itself be differentiable (create_graph) is
// taken through the unfused composition instead.
enum class CausalFeature { Elu, Relu, CosRelu };

// Whether the fused op covers a call: float32/float64 on the CPU; causal also needs L = S and no
// key padding mask.
bool fused_feature_applies(const at::Tensor& q, const at::Tensor& k, bool causal,
                           const c10::optional<at::Tensor>& key_padding_mask);

at::Tensor fused_feature_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const c10::optional<at::Tensor>& key_padding_mask,
                                   CausalFeature feature, double angle_step, bool clamp,
                                   bool causal);

}  // namespace attnkit::ops::detail
