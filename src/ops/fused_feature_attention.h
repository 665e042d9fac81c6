#pragma once
// Fused feature-map attention: linear attention (elu + 1 or relu features) and cosFormer as one
// differentiable op whose feature map runs inside the chunked CPU kernels
// (ops/cpu/fused_feature_attention_kernel.h), so no φ(q), φ(k) or n×n tensor ever exists.
// Its unfused counterpart, feature_attention.h, takes φ(q) and φ(k) as tensors (FAVOR, which has
// no fused kernel, and this op's create_graph backward go through it). Private to src/.
#include "attnkit/attention_kind.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <tuple>

namespace attnkit::ops::detail {

// Whether the fused op covers a call: an Elu, Relu or CosRelu feature map, float32/float64 on
// the CPU; causal also needs L = S and no key padding mask.
bool fused_feature_applies(const at::Tensor& q, const at::Tensor& k, bool causal,
                           const c10::optional<at::Tensor>& key_padding_mask,
                           FeatureMapKind feature);

// q [B, H, L, d], k [B, H, S, d], v [B, H, S, e] -> [B, H, L, e]. Causal needs L = S and no
// padding; non-causal takes any L, S and an optional key_padding_mask [B, S] (true = real key).
// angle_step: cosFormer's π / (2M) (CosRelu); clamp: D = max(den, eps) (cosFormer) rather than
// den + eps (linear). Saves the inputs, the output and L denominators; a backward that must
// itself be differentiable (create_graph) is taken through the unfused composition instead.
at::Tensor fused_feature_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const c10::optional<at::Tensor>& key_padding_mask,
                                   FeatureMapKind feature, double angle_step, bool clamp,
                                   bool causal);

// Prefix-LM mode (the O(n) form of ops/masks.h prefix_lm_mask and, with key padding, of the
// UniLM mask): q, k [B, H, n, d], v [B, H, n, e], prefix_lengths [B] int64 in [0, n] (checked by
// the caller), optional key_padding_mask [B, n]. Query i < p_b sees the real keys j < p_b, query
// i >= p_b the real keys j < p_b and p_b..i. Same features, kernels' memory and create_graph
// fallback (through the explicit mask) as above.
at::Tensor fused_prefix_feature_attention(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const at::Tensor& prefix_lengths,
                                          const c10::optional<at::Tensor>& key_padding_mask,
                                          FeatureMapKind feature, double angle_step, bool clamp);

// Whether the fused prefix mode covers a call: Elu, Relu or CosRelu, float32/float64 on the CPU.
bool fused_prefix_feature_applies(const at::Tensor& q, FeatureMapKind feature);

// The kernels without autograd (FusedFeatureAttention's forward and backward; the Python
// package's torch.library ops call them too). keep: undefined or bool [B, S]; prefix: undefined
// or int64 [B] (prefix-LM mode), both checked by the caller. Forward: (y [B, H, L, e], den
// [B, H, L]); backward: (dq, dk, dv) from the forward's inputs, y and den.
std::tuple<at::Tensor, at::Tensor> fused_feature_forward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& keep,
    const at::Tensor& prefix, FeatureMapKind feature, double angle_step, bool clamp, bool causal);
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_feature_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& y, const at::Tensor& den, const at::Tensor& keep, const at::Tensor& prefix,
    FeatureMapKind feature, double angle_step, bool clamp, bool causal);

}  // namespace attnkit::ops::detail
