#pragma once
// Head gates ξ (Michel et al. 2019): MHAtt(x) = Σ_h ξ_h Att_h(x). The gate multiplies each
// head's context before the output projection; it is differentiable, so ∂L/∂ξ_h is the head
// importance signal. context [B, H, L, dv]; gates [H] or [B, H].
#include <ATen/core/Tensor.h>

namespace attnkit::ops {

at::Tensor apply_head_gates(const at::Tensor& context, const at::Tensor& gates);

}  // namespace attnkit::ops
// Kernel: src/ops/head_gates.cpp (ATen ops, no fused kernel). Tests: tests/ops/attention_ops_test.cpp (HeadGates.*).
