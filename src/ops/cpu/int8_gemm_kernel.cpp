#include "int8_gemm_kernel.h"

#include "kernel_isa.h"
#include "vector_math.h"

#include <immintrin.h>

#include <cmath>
#include <vector>

namespace attnkit::ops::cpu {
namespace {

ATTNKIT_INLINE void quantize_rows_impl(const float* X, int64_t ldx, int64_t rows, int64_t in,
                                       int8_t* Q, float* scale) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* x = X + m * ldx;
    int8_t* q = Q + m * in;
    float amax = 0.0f;
    for (int64_t i = 0; i < in; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    if (!(amax > 0.0f) || !std::isfinite(amax)) {
      // Zeros (or a row with a NaN / infinity: no finite scale represents it) quantize to zeros
      // with scale 0, or NaN scale so that the NaN reaches the output.
      scale[m] = amax > 0.0f || std::isnan(amax) ? std::nanf("") : 0.0f;
      for (int64_t i = 0; i < in; ++i) q[i] = 0;
      continue;
    }
    const float inv = static_cast<float>(kInt8Levels) / amax;
    scale[m] = amax / static_cast<float>(kInt8Levels);
    for (int64_t i = 0; i < in; ++i) {
      // |x · inv| ≤ 127 up to one rounding of the product: the clamp keeps it in range.
      float v = std::nearbyint(x[i] * inv);
      v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
      q[i] = static_cast<int8_t>(v);
    }
  }
}

// Σ_i w_r[i] · x[i] for R consecutive rows of W against one row of X, exact in int32.
template <int R>
ATTNKIT_INLINE void dot_rows_int8(const int8_t* __restrict W, int64_t in,
                                  const int8_t* __restrict x, int32_t* out) {
  int32_t s[R];
  for (int r = 0; r < R; ++r) s[r] = 0;
  for (int r = 0; r < R; ++r) {
    const int8_t* __restrict w = W + r * in;
    int32_t acc = 0;
    for (int64_t i = 0; i < in; ++i) acc += static_cast<int32_t>(w[i]) * static_cast<int32_t>(x[i]);
    s[r] = acc;
  }
  for (int r = 0; r < R; ++r) out[r] = s[r];
}

ATTNKIT_INLINE void gemm_int8_rows_impl(const int8_t* W, int64_t in, const float* wscale,
                                        const int8_t* X, const float* xscale, int64_t M,
                                        const float* bias, float* Y, int64_t ldy,
                                        int64_t row_begin, int64_t row_end) {
  // Blocks of 4 output rows (4 × in bytes, L1-resident) against every row of X.
  constexpr int kBlock = 4;
  int32_t sums[kBlock];
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kBlock) {
    const int64_t n = row_end - r0 < kBlock ? row_end - r0 : kBlock;
    for (int64_t m = 0; m < M; ++m) {
      const int8_t* x = X + m * in;
      if (n == kBlock)
        dot_rows_int8<kBlock>(W + r0 * in, in, x, sums);
      else
        for (int64_t j = 0; j < n; ++j) dot_rows_int8<1>(W + (r0 + j) * in, in, x, sums + j);
      float* y = Y + m * ldy;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t r = r0 + j;
        const float v = static_cast<float>(sums[j]) * (wscale[r] * xscale[m]);
        y[r] = bias != nullptr ? v + bias[r] : v;
      }
    }
  }
}

// AVX2 (also the AVX-512 copy: 256-bit code, no VNNI): X widened to int16 once per call, then
// blocks of up to 4 X rows against one W row at a time: per 16 values one sign extension of W
// and one vpmaddwd per X row into 8 int32 lanes, reduced at the end of the row. A W row (in bytes)
// and 4 widened X rows stay in L1.
__attribute__((target("avx2,fma"))) inline __m128i reduce4_epi32(__m256i a, __m256i b, __m256i c,
                                                                  __m256i d) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

template <int MB>
__attribute__((target("avx2,fma"))) inline void block_avx2(const int8_t* W, int64_t in,
                                                            const float* wscale,
                                                            const int16_t* X16, int64_t ldx16,
                                                            const float* xscale, const float* bias,
                                                            float* Y, int64_t ldy, int64_t row_begin,
                                                            int64_t row_end) {
  const int64_t vec_end = in / 16 * 16;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int8_t* w = W + r * in;
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                      _mm256_setzero_si256()};
    for (int64_t i = 0; i < vec_end; i += 16) {
      const __m256i wv =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
      for (int m = 0; m < MB; ++m) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(X16 + m * ldx16 + i));
        acc[m] = _mm256_add_epi32(acc[m], _mm256_madd_epi16(wv, xv));
      }
    }
    alignas(16) int32_t sums[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(sums), reduce4_epi32(acc[0], acc[1], acc[2], acc[3]));
    for (int m = 0; m < MB; ++m) {
      int32_t s = sums[m];
      const int16_t* x = X16 + m * ldx16;
      for (int64_t i = vec_end; i < in; ++i) s += static_cast<int32_t>(w[i]) * x[i];
      const float v = static_cast<float>(s) * (wscale[r] * xscale[m]);
      Y[m * ldy + r] = bias != nullptr ? v + bias[r] : v;
    }
  }
}

__attribute__((target("avx2,fma"))) void gemm_int8_rows_avx2(
    const int8_t* W, int64_t in, const float* wscale, const int8_t* X, const float* xscale,
    int64_t M, const float* bias, float* Y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  std::vector<int16_t> X16(static_cast<size_t>(M * in));
  for (int64_t k = 0; k < M * in; ++k) X16[static_cast<size_t>(k)] = X[k];
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const int16_t* x = X16.data() + m0 * in;
    float* y = Y + m0 * ldy;
    switch (M - m0 < 4 ? M - m0 : 4) {
      case 1: block_avx2<1>(W, in, wscale, x, in, xscale + m0, bias, y, ldy, row_begin, row_end); break;
      case 2: block_avx2<2>(W, in, wscale, x, in, xscale + m0, bias, y, ldy, row_begin, row_end); break;
      case 3: block_avx2<3>(W, in, wscale, x, in, xscale + m0, bias, y, ldy, row_begin, row_end); break;
      default: block_avx2<4>(W, in, wscale, x, in, xscale + m0, bias, y, ldy, row_begin, row_end);
    }
  }
}

}  // namespace

ATTNKIT_KERNEL_ENTRY(quantize_rows_int8, quantize_rows_impl,
                     (const float* X, int64_t ldx, int64_t rows, int64_t in, int8_t* Q,
                      float* scale),
                     (X, ldx, rows, in, Q, scale))

// By hand rather than ATTNKIT_KERNEL_ENTRY: the AVX2 copy is written with intrinsics (vpmaddwd),
// and the AVX-512 copy runs it too; the baseline copy is the plain loop.
void gemm_int8_rows(const int8_t* W, int64_t in, const float* wscale, const int8_t* X,
                    const float* xscale, int64_t M, const float* bias, float* Y, int64_t ldy,
                    int64_t row_begin, int64_t row_end) {
  if (kernel_isa() != KernelIsa::Baseline)
    return gemm_int8_rows_avx2(W, in, wscale, X, xscale, M, bias, Y, ldy, row_begin, row_end);
  gemm_int8_rows_impl(W, in, wscale, X, xscale, M, bias, Y, ldy, row_begin, row_end);
}

}  // namespace attnkit::ops::cpu
