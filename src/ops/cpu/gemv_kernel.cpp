#include "gemv_kernel.h"

#include "kernel_isa.h"
#include "vector_math.h"

#include <cstring>

// The helpers below pass 64-byte vectors by value; they are always inlined into each
// instruction-set copy, so the ABI note GCC gives for the baseline copy does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnkit::ops::cpu {
namespace {

typedef float Vec16 __attribute__((vector_size(64)));
typedef float Vec8 __attribute__((vector_size(32)));
typedef float Vec4 __attribute__((vector_size(16)));

template <typename V>
ATTNKIT_INLINE V load_vec(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ---- One row of x (gemv_rows) ----

// Each W row advances by 16 floats a step: K accumulators of the copy's native vector V (K × lanes
// = 16: one AVX-512 register, two AVX2 ones, four SSE ones), so the sums, and their order, are
// the same in every copy. An array of 64-byte vectors is not kept in registers by GCC when the
// target has 32-byte ones (it went through the stack, a few GB/s), hence native vectors here.
constexpr int64_t kStep = 16;

// Σ of the 16 lanes held as K vectors of V, as a tree of halves (16 -> 8 -> 4, then
// (s0 + s2) + (s1 + s3)), the same in every copy.
ATTNKIT_INLINE float sum_lanes(const Vec16 (&a)[1]) {
  const Vec16 v = a[0];
  const Vec8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const Vec4 b = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}
ATTNKIT_INLINE float sum_lanes(const Vec8 (&a)[2]) {
  const Vec8 h = a[0] + a[1];
  const Vec4 b = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}
ATTNKIT_INLINE float sum_lanes(const Vec4 (&a)[4]) {
  const Vec4 b = (a[0] + a[2]) + (a[1] + a[3]);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// out[r] = W[r, :] · x for R consecutive rows; with `next` (the following block of R rows), each
// step also prefetches the same columns of those rows, so that a weight larger than the caches
// (an LM head, every layer of a model of hundreds of MB) streams in while this block is multiplied.
// The prefetches go to L1 (locality 3): on the Zen 5 of 2026-11-29, SmolLM2-135M's 538 MB of
// float32 layers took 15.0-15.6 ms a pass at one thread against 16.6 ms with L2 prefetches
// (locality 2), the AVX2 copy 15.3-15.5 against 15.8, the few-row kernel at 4 rows 19.4 against
// 21.5 ms (a harness of these kernels over the model's shapes, best of 20 passes, 3 runs each).
template <typename V, int R>
ATTNKIT_INLINE void dot_rows(const float* __restrict W, int64_t ldw, const float* __restrict x,
                             int64_t in, float* out, const float* next) {
  constexpr int K = kStep / (sizeof(V) / sizeof(float));
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  V acc[R][K];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) acc[r][k] = V{};
  int64_t i = 0;
  for (; i + kStep <= in; i += kStep) {
    if (next != nullptr) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) __builtin_prefetch(next + r * ldw + i, 0, 3);
    }
    V xv[K];
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) xv[k] = load_vec<V>(x + i + k * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int k = 0; k < K; ++k) acc[r][k] += load_vec<V>(W + r * ldw + i + k * kLanes) * xv[k];
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float s = sum_lanes(acc[r]);
    for (int64_t j = i; j < in; ++j) s += W[r * ldw + j] * x[j];
    out[r] = s;
  }
}

// Rows in blocks of R: R × K accumulators and R streams of W in flight. The block's R rows of W
// are read once from memory; the prefetch of the next block keeps the stream going.
template <typename V, int R>
ATTNKIT_INLINE void gemv_rows_impl(const float* W, int64_t ldw, const float* x, int64_t in,
                                   const float* bias, float* y, int64_t row_begin,
                                   int64_t row_end) {
  int64_t r = row_begin;
  for (; r + R <= row_end; r += R)
    dot_rows<V, R>(W + r * ldw, ldw, x, in, y + r, r + 2 * R <= row_end ? W + (r + R) * ldw : nullptr);
  for (; r < row_end; ++r) dot_rows<V, 1>(W + r * ldw, ldw, x, in, y + r, nullptr);
  if (bias != nullptr)
    for (r = row_begin; r < row_end; ++r) y[r] += bias[r];
}

#define ATTNKIT_GEMV_PARAMS                                                                     \
  (const float* W, int64_t ldw, const float* x, int64_t in, const float* bias, float* y,       \
   int64_t row_begin, int64_t row_end)
#define ATTNKIT_GEMV_ARGS (W, ldw, x, in, bias, y, row_begin, row_end)

// The three copies by hand rather than through ATTNKIT_KERNEL_ENTRY: AVX-512 has the 32
// registers for 8-row blocks (8 accumulators); AVX2 takes 4 rows (8 of its 16 registers), SSE 2
// (8 of 16).
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))) void gemv_rows_avx512
    ATTNKIT_GEMV_PARAMS {
  gemv_rows_impl<Vec16, 8> ATTNKIT_GEMV_ARGS;
}
__attribute__((target("avx2,fma"))) void gemv_rows_avx2 ATTNKIT_GEMV_PARAMS {
  gemv_rows_impl<Vec8, 4> ATTNKIT_GEMV_ARGS;
}
void gemv_rows_baseline ATTNKIT_GEMV_PARAMS { gemv_rows_impl<Vec4, 2> ATTNKIT_GEMV_ARGS; }

// ---- A few rows of x (gemm_few_rows) ----

// The lane sums of four accumulators a, b, c, d as one Vec4 {Σa, Σb, Σc, Σd}: pairs of vectors
// are halved together (one shuffle pair and one add per two accumulators and level), so the
// reduction costs a few operations per output rather than a tree per accumulator.
ATTNKIT_INLINE Vec4 reduce4(Vec4 a, Vec4 b, Vec4 c, Vec4 d) {
  const Vec4 ab = __builtin_shufflevector(a, b, 0, 4, 1, 5) + __builtin_shufflevector(a, b, 2, 6, 3, 7);
  const Vec4 cd = __builtin_shufflevector(c, d, 0, 4, 1, 5) + __builtin_shufflevector(c, d, 2, 6, 3, 7);
  // ab = {a0+a2, b0+b2, a1+a3, b1+b3}
  return __builtin_shufflevector(ab, cd, 0, 1, 4, 5) + __builtin_shufflevector(ab, cd, 2, 3, 6, 7);
}
ATTNKIT_INLINE Vec4 reduce4(Vec8 a, Vec8 b, Vec8 c, Vec8 d) {
  // {a's 4 | b's 4} and {c's 4 | d's 4}
  const Vec8 ab = __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11) +
                  __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
  const Vec8 cd = __builtin_shufflevector(c, d, 0, 1, 2, 3, 8, 9, 10, 11) +
                  __builtin_shufflevector(c, d, 4, 5, 6, 7, 12, 13, 14, 15);
  // {a2 | b2 | c2 | d2}
  const Vec8 abcd = __builtin_shufflevector(ab, cd, 0, 1, 4, 5, 8, 9, 12, 13) +
                    __builtin_shufflevector(ab, cd, 2, 3, 6, 7, 10, 11, 14, 15);
  return __builtin_shufflevector(abcd, abcd, 0, 2, 4, 6) +
         __builtin_shufflevector(abcd, abcd, 1, 3, 5, 7);
}
ATTNKIT_INLINE Vec4 reduce4(Vec16 a, Vec16 b, Vec16 c, Vec16 d) {
  // {a's 8 | b's 8} and {c's 8 | d's 8}
  const Vec16 ab =
      __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
      __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const Vec16 cd =
      __builtin_shufflevector(c, d, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
      __builtin_shufflevector(c, d, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  // {a4 | b4 | c4 | d4}
  const Vec16 abcd =
      __builtin_shufflevector(ab, cd, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
      __builtin_shufflevector(ab, cd, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  // {a2 | b2 | c2 | d2}
  const Vec8 two = __builtin_shufflevector(abcd, abcd, 0, 1, 4, 5, 8, 9, 12, 13) +
                   __builtin_shufflevector(abcd, abcd, 2, 3, 6, 7, 10, 11, 14, 15);
  return __builtin_shufflevector(two, two, 0, 2, 4, 6) + __builtin_shufflevector(two, two, 1, 3, 5, 7);
}

// acc[r][m] += W[r, i : i + lanes] * X[m, i : i + lanes] for the RB × MB products.
template <typename V, int RB, int MB>
ATTNKIT_INLINE void few_rows_step(const float* __restrict W, int64_t ldw, const float* __restrict X,
                                  int64_t ldx, int64_t i, V (&acc)[RB][4]) {
  V xv[MB];
#pragma GCC unroll 4
  for (int m = 0; m < MB; ++m) xv[m] = load_vec<V>(X + m * ldx + i);
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
    const V wv = load_vec<V>(W + r * ldw + i);
#pragma GCC unroll 4
    for (int m = 0; m < MB; ++m) acc[r][m] += wv * xv[m];
  }
}

// Y[m, r] for RB consecutive rows of W and MB (≤ 4) consecutive rows of X: RB × MB vector
// accumulators over the length, then per W row one reduce4 of its MB accumulators (zeros for the
// missing ones), the scalar tail of the length, and the bias. With `next` (the following block of
// W rows), each step also prefetches the same columns of those rows, so that the next block
// streams in from memory while this one is multiplied (a weight larger than the caches, such as
// an LM head, ran at half the speed without).
template <typename V, int RB, int MB>
ATTNKIT_INLINE void few_rows_block(const float* __restrict W, int64_t ldw, const float* __restrict X,
                                   int64_t ldx, int64_t in, const float* bias, float* Y,
                                   int64_t ldy, const float* next) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  V acc[RB][4];
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) acc[r][m] = V{};
  int64_t i = 0;
  if (next != nullptr) {
    for (; i + kLanes <= in; i += kLanes) {
#pragma GCC unroll 8
      for (int r = 0; r < RB; ++r) __builtin_prefetch(next + r * ldw + i, 0, 3);
      few_rows_step<V, RB, MB>(W, ldw, X, ldx, i, acc);
    }
  }
  for (; i + kLanes <= in; i += kLanes) few_rows_step<V, RB, MB>(W, ldw, X, ldx, i, acc);
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) {
    const Vec4 sums = reduce4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    for (int m = 0; m < MB; ++m) {
      float s = sums[m];
      for (int64_t j = i; j < in; ++j) s += W[r * ldw + j] * X[m * ldx + j];
      Y[m * ldy + r] = bias != nullptr ? s + bias[r] : s;
    }
  }
}

// RB rows of W (at W, their bias at bias, their outputs at column 0 of Y) against all M rows of X,
// 4 at a time, so that the block of W is read from memory once and from L1 M / 4 times; the first
// group of X rows prefetches `next` (or nothing when null).
template <typename V, int RB>
ATTNKIT_INLINE void few_rows_rows(const float* W, int64_t ldw, const float* X, int64_t ldx,
                                  int64_t M, int64_t in, const float* bias, float* Y, int64_t ldy,
                                  const float* next) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4, next = nullptr)
    few_rows_block<V, RB, 4>(W, ldw, X + m * ldx, ldx, in, bias, Y + m * ldy, ldy, next);
  switch (M - m) {
    case 3: few_rows_block<V, RB, 3>(W, ldw, X + m * ldx, ldx, in, bias, Y + m * ldy, ldy, next); break;
    case 2: few_rows_block<V, RB, 2>(W, ldw, X + m * ldx, ldx, in, bias, Y + m * ldy, ldy, next); break;
    case 1: few_rows_block<V, RB, 1>(W, ldw, X + m * ldx, ldx, in, bias, Y + m * ldy, ldy, next); break;
    default: break;
  }
}

template <typename V, int RB>
ATTNKIT_INLINE void gemm_few_rows_impl(const float* W, int64_t ldw, const float* X, int64_t ldx,
                                       int64_t M, int64_t in, const float* bias, float* Y,
                                       int64_t ldy, int64_t row_begin, int64_t row_end) {
  const auto at = [&](int64_t r) { return bias != nullptr ? bias + r : nullptr; };
  int64_t r = row_begin;
  for (; r + RB <= row_end; r += RB)
    few_rows_rows<V, RB>(W + r * ldw, ldw, X, ldx, M, in, at(r), Y + r, ldy,
                         r + 2 * RB <= row_end ? W + (r + RB) * ldw : nullptr);
  for (; r < row_end; ++r) few_rows_rows<V, 1>(W + r * ldw, ldw, X, ldx, M, in, at(r), Y + r, ldy, nullptr);
}

#define ATTNKIT_FEW_ROWS_PARAMS                                                                  \
  (const float* W, int64_t ldw, const float* X, int64_t ldx, int64_t M, int64_t in,              \
   const float* bias, float* Y, int64_t ldy, int64_t row_begin, int64_t row_end)
#define ATTNKIT_FEW_ROWS_ARGS (W, ldw, X, ldx, M, in, bias, Y, ldy, row_begin, row_end)

// AVX-512: 4 × 4 accumulators of 16 floats (16 of the 32 registers; 5 or 6 W rows measured the
// same); AVX2: 3 × 4 of 8 floats (12 of 16 registers: the compiler keeps a few values on the
// stack, and still the Marian float32 cells of 4-64 rows a step ran 9-16% faster than with
// 2 × 4, AVX2 copies on a Zen 5, docs/decoding.md); SSE: 2 × 4 of 4 floats.
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))) void gemm_few_rows_avx512
    ATTNKIT_FEW_ROWS_PARAMS {
  gemm_few_rows_impl<Vec16, 4> ATTNKIT_FEW_ROWS_ARGS;
}
__attribute__((target("avx2,fma"))) void gemm_few_rows_avx2 ATTNKIT_FEW_ROWS_PARAMS {
  gemm_few_rows_impl<Vec8, 3> ATTNKIT_FEW_ROWS_ARGS;
}
void gemm_few_rows_baseline ATTNKIT_FEW_ROWS_PARAMS { gemm_few_rows_impl<Vec4, 2> ATTNKIT_FEW_ROWS_ARGS; }

}  // namespace

void gemm_few_rows ATTNKIT_FEW_ROWS_PARAMS {
  switch (kernel_isa()) {
    case KernelIsa::Avx512: return gemm_few_rows_avx512 ATTNKIT_FEW_ROWS_ARGS;
    case KernelIsa::Avx2: return gemm_few_rows_avx2 ATTNKIT_FEW_ROWS_ARGS;
    default: return gemm_few_rows_baseline ATTNKIT_FEW_ROWS_ARGS;
  }
}

void gemv_rows ATTNKIT_GEMV_PARAMS {
  switch (kernel_isa()) {
    case KernelIsa::Avx512: return gemv_rows_avx512 ATTNKIT_GEMV_ARGS;
    case KernelIsa::Avx2: return gemv_rows_avx2 ATTNKIT_GEMV_ARGS;
    default: return gemv_rows_baseline ATTNKIT_GEMV_ARGS;
  }
}

}  // namespace attnkit::ops::cpu
