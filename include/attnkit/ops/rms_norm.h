#pragma once
// RMSNorm (Zhang & Sennrich 2019) as transformers' Llama and Gemma compute it, over the last axis:
//   Llama: y = weight · cast(h · rsqrt(mean(h²) + eps))            (LlamaRMSNorm)
//   Gemma: y = cast(h · rsqrt(mean(h²) + eps) · (1 + weight))      (Gemma/Gemma 2/Gemma 3 RMSNorm)
// with h = x in float32 and cast = back to x's dtype. float16/bfloat16/float32 inputs are normalised
// in float32 exactly as transformers does; a float64 input stays in float64 (transformers would
// round it to float32; attnkit uses float64 for oracles and gradient checks).
// Differentiable in x and weight (ATen ops).
#include <ATen/core/Tensor.h>

namespace attnkit::ops {

enum class RmsNormKind {
  Llama,  // weight multiplies (weights initialised to 1)
  Gemma,  // (1 + weight) multiplies (weights initialised to 0)
};

// x [..., d], weight [d] floating. Throws attnkit::Error on a weight of another size, a
// non-floating tensor, or eps < 0 / not finite.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps = 1e-6,
                    RmsNormKind kind = RmsNormKind::Llama);

}  // namespace attnkit::ops
// Kernel: src/ops/rms_norm.cpp (ATen ops). Tests: tests/ops/rms_norm_test.cpp (RmsNorm.*), and tests/python/test_rotary_hf.py against transformers.
