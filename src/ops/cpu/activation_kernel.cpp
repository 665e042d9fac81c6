#include "activation_kernel.h"

#include "kernel_isa.h"
#include "vector_math.h"

namespace attnkit::ops::cpu {
namespace {

ATTNKIT_INLINE void gelu_tanh_impl(float* __restrict x, int64_t n) {
  constexpr float kMinusTwoBeta = -2.0f * 0.7978845608028654f, kKappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = v / (1.0f + exp_vectorizable(kMinusTwoBeta * (v + kKappa * v * v * v)));
  }
}

ATTNKIT_INLINE void silu_impl(float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + exp_vectorizable(-x[i]));
}

}  // namespace

ATTNKIT_KERNEL_ENTRY(gelu_tanh_in_place, gelu_tanh_impl, (float* x, int64_t n), (x, n))
ATTNKIT_KERNEL_ENTRY(silu_in_place, silu_impl, (float* x, int64_t n), (x, n))

}  // namespace attnkit::ops::cpu
