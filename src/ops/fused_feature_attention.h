#pragma once
// Fused feature-map attention: linear attention (elu + 1 or relu features) and cosFormer as one
// differentiable op whose feature map runs inside the chunked CPU kernels
// (ops/cpu/fused_feature_attention_kernel.h), so no φ(q), φ(k) or n×n tensor ever exists.
// Its unfused counterpart, feature_attention.h, takes φ(q) and φ(k) as tensors (FAVOR, which has
// no fused kernel, and this op's create_graph backward go through it). Private to src/.
#include "attnkit/attention_kind.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

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

}  // namespace attnkit::ops::detail
