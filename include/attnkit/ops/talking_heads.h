#pragma once
// Talking-heads attention (Shazeer et al. 2020): learned mixing across heads of the logits before
// the softmax and of the weights after it.
//   logits_h = Σ_g pre_mix[g, h] · (q_g k_gᵀ · scale)      (g over the Hk heads of q and k)
//   weights_h = masked_softmax(logits_h)                    (h over the Hm mixed heads)
//   out_o = Σ_h post_mix[h, o] · weights_h · v_o            (o over the Hv heads of v)
// q [B, Hk, L, dk], k [B, Hk, S, dk], v [B, Hv, S, dv], pre_mix [Hk, Hm], post_mix [Hm, Hv]
// -> [B, Hv, L, dv]. Masks as in softmax_attention.
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace attnkit::ops {

at::Tensor talking_heads_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& pre_mix, const at::Tensor& post_mix,
                                   const c10::optional<at::Tensor>& mask = c10::nullopt,
                                   bool causal = false,
                                   c10::optional<double> scale = c10::nullopt);

// Mix a [B, H, L, S] tensor across heads with mix [H, H']: -> [B, H', L, S].
at::Tensor mix_heads(const at::Tensor& x, const at::Tensor& mix);

}  // namespace attnkit::ops
// Kernel: src/ops/talking_heads.cpp (ATen ops, no fused kernel). Tests: tests/ops/attention_ops_test.cpp (TalkingHeads.*), tests/ops/variant_oracle_test.cpp (VariantOracle.*).
