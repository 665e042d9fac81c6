#pragma once
// Differentiable fused softmax attention (flash-style CPU kernel, ops/cpu/flash_attention_kernel.h).
// Private to src/: softmax_attention() validates its arguments and dispatches here.
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include "attnkit/ops/softmax_attention.h"

namespace attnkit::ops::detail {

// True when the fused kernel handles these arguments (float32/float64, and any additive mask
// does not itself need a gradient).
bool flash_attention_supports(const at::Tensor& q, const c10::optional<at::Tensor>& mask);

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const c10::optional<at::Tensor>& mask, bool causal, double scale,
                           const AttentionDropout& dropout = {});

}  // namespace attnkit::ops::detail
