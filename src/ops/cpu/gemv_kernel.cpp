#include "gemv_kernel.h"

#include "kernel_isa.h"
#include "vector_math.h"

#include <cstring>

// The helpers below pass 64-byte vectors by value; they are always inlined into each
// instruction-set copy, so the ABI note GCC gives for the baseline copy does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnkit::ops::cpu {
namespace {

// Sixteen floats: one AVX-512 register, two AVX2 registers, four SSE registers in the
// instruction-set copies of the entry point (GCC vector extension, so every copy gets its width
// without intrinsics).
typedef float Vec16 __attribute__((vector_size(64)));
constexpr int64_t kWidth = 16;

ATTNKIT_INLINE Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

typedef float Vec8 __attribute__((vector_size(32)));
typedef float Vec4 __attribute__((vector_size(16)));

// Σ of the 16 lanes, as a tree of halves.
ATTNKIT_INLINE float sum16(Vec16 v) {
  const Vec8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const Vec4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// out[r] = W[r, :] · x for R consecutive rows.
template <int R>
ATTNKIT_INLINE void dot_rows(const float* __restrict W, int64_t ldw, const float* __restrict x,
                             int64_t in, float* out) {
  Vec16 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = Vec16{};
  int64_t i = 0;
  for (; i + kWidth <= in; i += kWidth) {
    const Vec16 xv = load16(x + i);
    for (int r = 0; r < R; ++r) acc[r] += load16(W + r * ldw + i) * xv;
  }
  for (int r = 0; r < R; ++r) {
    float s = sum16(acc[r]);
    for (int64_t j = i; j < in; ++j) s += W[r * ldw + j] * x[j];
    out[r] = s;
  }
}

// Rows in blocks of R: R accumulators (R AVX-512 registers, 2R AVX2 ones) and as many streams
// of W in flight. On a 2-core EPYC (Zen 4), 8 rows read 768 × 768 and 50257 × 768 weights at
// 17-19 GB/s against 13-15 GB/s with 4 rows (one thread, loaded machine).
template <int R>
ATTNKIT_INLINE void gemv_rows_impl(const float* W, int64_t ldw, const float* x, int64_t in,
                                   const float* bias, float* y, int64_t row_begin,
                                   int64_t row_end) {
  int64_t r = row_begin;
  for (; r + R <= row_end; r += R) dot_rows<R>(W + r * ldw, ldw, x, in, y + r);
  for (; r < row_end; ++r) dot_rows<1>(W + r * ldw, ldw, x, in, y + r);
  if (bias != nullptr)
    for (r = row_begin; r < row_end; ++r) y[r] += bias[r];
}

#define ATTNKIT_GEMV_PARAMS                                                                     \
  (const float* W, int64_t ldw, const float* x, int64_t in, const float* bias, float* y,       \
   int64_t row_begin, int64_t row_end)
#define ATTNKIT_GEMV_ARGS (W, ldw, x, in, bias, y, row_begin, row_end)

// The three copies by hand rather than through ATTNKIT_KERNEL_ENTRY: AVX-512 has the 32
// registers for 8-row blocks; AVX2 (16 registers, two per accumulator) and SSE take 4 rows.
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))) void gemv_rows_avx512
    ATTNKIT_GEMV_PARAMS {
  gemv_rows_impl<8> ATTNKIT_GEMV_ARGS;
}
__attribute__((target("avx2,fma"))) void gemv_rows_avx2 ATTNKIT_GEMV_PARAMS {
  gemv_rows_impl<4> ATTNKIT_GEMV_ARGS;
}
void gemv_rows_baseline ATTNKIT_GEMV_PARAMS { gemv_rows_impl<4> ATTNKIT_GEMV_ARGS; }

}  // namespace

void gemv_rows ATTNKIT_GEMV_PARAMS {
  switch (kernel_isa()) {
    case KernelIsa::Avx512: return gemv_rows_avx512 ATTNKIT_GEMV_ARGS;
    case KernelIsa::Avx2: return gemv_rows_avx2 ATTNKIT_GEMV_ARGS;
    default: return gemv_rows_baseline ATTNKIT_GEMV_ARGS;
  }
}

}  // namespace attnkit::ops::cpu
