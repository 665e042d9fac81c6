#pragma once
// Differentiable fused softmax attention (flash-style CPU kernel, ops/cpu/flash_attention_kernel.h).
// Private to src/: softmax_attention() validates its arguments and dispatches here.
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include "attnkit/ops/softmax_attention.h"

#include <tuple>

namespace attnkit::ops::detail {

// True when the fused kernel handles these arguments (float32/float64, and any additive mask
// does not itself need a gradient).
bool flash_attention_supports(const at::Tensor& q, const c10::optional<at::Tensor>& mask);

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const c10::optional<at::Tensor>& mask, bool causal, double scale,
                           const AttentionDropout& dropout = {});

// The kernels without autograd (FlashAttention's forward and backward; the Python package's
// torch.library ops call them too). Float32/float64 CPU tensors, checked by the caller; mask
// undefined or broadcastable to [B, H, L, S]. Forward: (out [B, H, L, dv], logsumexp [B, H, L]);
// backward: (dq, dk, dv) from the forward's inputs, out and logsumexp.
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
    bool causal, double scale, double dropout, int64_t dropout_seed);
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& mask, bool causal,
    double scale, double dropout, int64_t dropout_seed);

}  // namespace attnkit::ops::detail
