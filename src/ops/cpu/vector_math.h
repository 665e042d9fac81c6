#pragma once
// Elementwise math the fused kernels use inside loops GCC should vectorise (no libm calls in the
// loop body). Header-only: each instruction-set copy of a kernel entry point (kernel_isa.h)
// inlines its own vector width. No LibTorch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace attnkit::ops::cpu {

// For helpers called from kernel entry points: forced inline, so each ISA copy compiles them
// with its own vector width (an out-of-line helper is compiled for the baseline ISA only).
#define ATTNKIT_INLINE __attribute__((always_inline)) inline

// Reductions in independent lanes: without -ffast-math GCC does not reorder a float sum or max
// into vector lanes itself, so a plain `acc += x[i]` loop runs at one add per FP latency.
constexpr int64_t kReductionLanes = 16;

// exp for float in a form GCC vectorises (AVX2 / AVX-512 clones; check with -fopt-info-vec):
// 2^n · e^y with |y| <= ln2/2 and a degree-7 Taylor
// polynomial (relative error ~1e-7). Inputs are clamped to [-87, 88]; callers map masked (-inf)
// scores to exactly 0 themselves.
inline float exp_vectorizable(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // n = round(x / ln 2) by the 1.5·2^23 trick (exact for |x / ln 2| < 2^22): floorf would keep
  // GCC from vectorising the loop.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float y = x - n * 0.693147180559945309f;
  float p = 1.0f / 5040.0f;
  p = p * y + 1.0f / 720.0f;
  p = p * y + 1.0f / 120.0f;
  p = p * y + 1.0f / 24.0f;
  p = p * y + 1.0f / 6.0f;
  p = p * y + 0.5f;
  p = p * y + 1.0f;
  p = p * y + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}
inline double exp_vectorizable(double x) { return std::exp(x); }

// max(init, x[0..n)).
template <typename T>
ATTNKIT_INLINE T max_reduce(const T* __restrict x, int64_t n, T init) {
  T lanes[kReductionLanes];
  for (int64_t j = 0; j < kReductionLanes; ++j) lanes[j] = init;
  int64_t i = 0;
  for (; i + kReductionLanes <= n; i += kReductionLanes)
    for (int64_t j = 0; j < kReductionLanes; ++j) lanes[j] = std::max(lanes[j], x[i + j]);
  T r = init;
  for (int64_t j = 0; j < kReductionLanes; ++j) r = std::max(r, lanes[j]);
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}

// x[i] = f(x[i]) for i in [0, n), returning Σ f(x[i]).
template <typename T, typename F>
ATTNKIT_INLINE T map_sum(T* __restrict x, int64_t n, F f) {
  T lanes[kReductionLanes] = {};
  int64_t i = 0;
  for (; i + kReductionLanes <= n; i += kReductionLanes)
    for (int64_t j = 0; j < kReductionLanes; ++j) {
      const T y = f(x[i + j]);
      x[i + j] = y;
      lanes[j] += y;
    }
  T r = 0;
  for (int64_t j = 0; j < kReductionLanes; ++j) r += lanes[j];
  for (; i < n; ++i) {
    x[i] = f(x[i]);
    r += x[i];
  }
  return r;
}

// Σ a[i]·b[i].
template <typename T>
ATTNKIT_INLINE T dot(const T* __restrict a, const T* __restrict b, int64_t n) {
  T lanes[kReductionLanes] = {};
  int64_t i = 0;
  for (; i + kReductionLanes <= n; i += kReductionLanes)
    for (int64_t j = 0; j < kReductionLanes; ++j) lanes[j] += a[i + j] * b[i + j];
  T r = 0;
  for (int64_t j = 0; j < kReductionLanes; ++j) r += lanes[j];
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

}  // namespace attnkit::ops::cpu
