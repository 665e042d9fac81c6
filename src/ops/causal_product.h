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

}  // namespace attnkit::ops::detail
