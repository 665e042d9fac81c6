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

// k, v may have grouped heads (Hkv dividing q's H, read in place); window and logit_softcap as
// SoftmaxExtras says, applied inside the kernel (no mask tensor, no logits tensor).
at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const c10::optional<at::Tensor>& mask, bool causal, double scale,
                           const AttentionDropout& dropout = {}, int64_t window = 0,
                           double logit_softcap = 0.0);

// The layout of the kernels' outputs (out like q; dq, dk, dv like q, k, v): [B, H, n, d] in
// position-major storage [B, n, H, d] when `like` is laid out that way (position_major: more than
// one head and position, head stride below position stride; e.g. Hugging Face's transposed
// projections), so that out.transpose(1, 2) is contiguous for free; contiguous [B, H, n, d]
// otherwise. The Python package's fake kernels (python/attnkit/_ops.py) follow the same rule.
bool position_major(const at::Tensor& t);
at::Tensor empty_attention_layout(const at::Tensor& like, int64_t d);

// The kernels without autograd (FlashAttention's forward and backward; the Python package's
// torch.library ops call them too). Float32/float64 CPU tensors, checked by the caller; mask
// undefined or broadcastable to [B, H, L, S]; k, v (and dk, dv) [B, Hkv, S, d] with Hkv dividing
// H. Any strides: an operand whose last dimension is contiguous (and whose rows do not overlap) is
// read in place, any other copied once. Forward:
// (out [B, H, L, dv], logsumexp [B, H, L]); backward: (dq, dk, dv) from the forward's inputs, out
// and logsumexp. out, dq, dk, dv as empty_attention_layout says.
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
    bool causal, double scale, double dropout, int64_t dropout_seed, int64_t window = 0,
    double logit_softcap = 0.0);
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& mask, bool causal,
    double scale, double dropout, int64_t dropout_seed, int64_t window = 0,
    double logit_softcap = 0.0);

}  // namespace attnkit::ops::detail
