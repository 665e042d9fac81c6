#include "int8_gemm_kernel.h"

#include "kernel_isa.h"
#include "vector_math.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace attnkit::ops::cpu {
namespace {

// float(Σ) · (sw · sx) + b, rounded after the product and after the sum in every copy (so the
// AVX-512, AVX2 and baseline copies give the same bits), though the kernels build with
// -ffp-contract=fast: the empty asm makes the product a value the compiler cannot fuse into an FMA
// with the add (GCC's `optimize` attribute is not clang's, and clang's fp-contract pragma yields to
// -ffp-contract=fast).
ATTNKIT_INLINE float scaled_sum(int32_t sum, float wscale, float xscale, const float* bias) {
  float v = static_cast<float>(sum) * (wscale * xscale);
  asm("" : "+x"(v));
  return bias != nullptr ? v + *bias : v;
}

ATTNKIT_INLINE void quantize_rows_impl(const float* X, int64_t ldx, int64_t rows, int64_t in,
                                       int8_t* Q, float* scale) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* x = X + m * ldx;
    int8_t* q = Q + m * in;
    // max |x_i| on the bit patterns: |x|'s bits order as unsigned integers the way the values do,
    // above every finite value come +inf (0x7f800000) and the NaNs, and an integer max
    // vectorizes (std::fmax was a libm call per value: 7% of an int8 decoding profile).
    uint32_t top = 0;
    for (int64_t i = 0; i < in; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, sizeof bits);
      bits &= 0x7fffffffu;
      top = bits > top ? bits : top;
    }
    if (top == 0 || top >= 0x7f800000u) {
      // Zeros quantize to zeros with scale 0; a row with a NaN or an infinity (no finite scale
      // represents it) to zeros with a NaN scale, so that the NaN reaches the output.
      scale[m] = top == 0 ? 0.0f : std::nanf("");
      for (int64_t i = 0; i < in; ++i) q[i] = 0;
      continue;
    }
    float amax;
    std::memcpy(&amax, &top, sizeof amax);
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
        y[r] = scaled_sum(sums[j], wscale[r], xscale[m], bias != nullptr ? bias + r : nullptr);
      }
    }
  }
}

// AVX2 (also the AVX-512 copy on a CPU without VNNI: 256-bit code): X widened to int16 once per call, then
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
      Y[m * ldy + r] = scaled_sum(s, wscale[r], xscale[m], bias != nullptr ? bias + r : nullptr);
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

// AVX-512 VNNI: vpdpbusd multiplies unsigned by signed bytes, four per int32 lane, with no
// intermediate saturation (vpmaddubsw's int16 pairs would saturate). W's bytes are made unsigned
// by flipping their sign bit (w ^ 0x80 = w + 128 as an unsigned byte) and each sum corrected by
// 128 · Σx of its X row, so the int32 sums are exact (|Σ| ≤ in · 255 · 127 before the
// correction: in ≤ kVnniMaxIn). Blocks of 4 W rows × MB ≤ 4 X rows share every 64-byte load (up
// to 16 accumulators); the W block stays in L1 while every X block passes; a row's tail is a
// masked load (zeros of X there).
constexpr int64_t kVnniMaxIn = (int64_t(1) << 31) / (255 * 127) - 64;

// GCC 12's AVX-512 intrinsics (unpack, shuffle, masked loads) warn of an uninitialised variable of
// their own header when inlined here (a known false positive); silenced for these functions only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// The lane sums of a, b, c, d (16 int32 lanes each) as one vector [Σa, Σb, Σc, Σd]. (Not
// _mm512_reduce_add_epi32 four times: one shuffle tree serves the four, and GCC 12's header of
// that one warns of an uninitialised variable.)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline __m128i sum_lanes4_epi32(
    __m512i a, __m512i b, __m512i c, __m512i d) {
  // Per 128-bit block: [a0+a2, b0+b2, a1+a3, b1+b3], the same of c, d, then [Σa, Σb, Σc, Σd].
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  const __m512i abcd = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  // The four 128-bit blocks added.
  const __m512i halves = _mm512_add_epi32(abcd, _mm512_shuffle_i64x2(abcd, abcd, 0x4E));
  const __m256i q = _mm512_castsi512_si256(halves);
  return _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
}

// For 4 W rows (r0.. r0 + nr, nr ≤ 4; missing rows repeat the first) and MB X rows: the exact
// sums Σ_i w_r[i] · x_m[i], then Y[m, r] = float(Σ) · (sw_r · sx_m) (+ b_r) by scaled_sum.
// `ahead`: W rows r0 + kPrefetchRows.. to prefetch into L1 as this block reads its rows (null: none).
// Reading 4 rows side by side defeats the hardware prefetcher on a matrix beyond L2 (measured on a
// 49152 × 576 head, 1 row of X: 1.15 ms without, 0.57-0.61 ms with 16 rows ahead, 0.88 ms for the
// AVX2 copy's one row at a time).
constexpr int64_t kPrefetchRows = 16;

template <int MB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void block_vnni(
    const int8_t* W, int64_t in, const float* wscale, const int8_t* X, const float* xscale,
    const int32_t* correction, const float* bias, float* Y, int64_t ldy, int64_t r0, int64_t nr,
    const int8_t* ahead) {
  const int8_t* w[4];
  for (int64_t r = 0; r < 4; ++r) w[r] = W + (r0 + (r < nr ? r : 0)) * in;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i acc[MB][4];
  for (int m = 0; m < MB; ++m)
    for (int r = 0; r < 4; ++r) acc[m][r] = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 64 <= in; i += 64) {
    __m512i xv[MB];
    for (int m = 0; m < MB; ++m) xv[m] = _mm512_loadu_si512(X + m * in + i);
    for (int r = 0; r < 4; ++r) {
      if (ahead != nullptr) _mm_prefetch(reinterpret_cast<const char*>(ahead + r * in + i), _MM_HINT_T0);
      const __m512i wv = _mm512_xor_si512(_mm512_loadu_si512(w[r] + i), flip);
      for (int m = 0; m < MB; ++m) acc[m][r] = _mm512_dpbusd_epi32(acc[m][r], wv, xv[m]);
    }
  }
  if (i < in) {
    const __mmask64 mask = ~__mmask64(0) >> (64 - (in - i));
    __m512i xv[MB];
    for (int m = 0; m < MB; ++m) xv[m] = _mm512_maskz_loadu_epi8(mask, X + m * in + i);
    for (int r = 0; r < 4; ++r) {
      const __m512i wv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, w[r] + i), flip);
      for (int m = 0; m < MB; ++m) acc[m][r] = _mm512_dpbusd_epi32(acc[m][r], wv, xv[m]);
    }
  }
  for (int m = 0; m < MB; ++m) {
    alignas(16) int32_t sums[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(sums),
                    sum_lanes4_epi32(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
    float* y = Y + m * ldy + r0;
    for (int64_t r = 0; r < nr; ++r) {
      y[r] = scaled_sum(sums[r] - correction[m], wscale[r0 + r], xscale[m],
                        bias != nullptr ? bias + r0 + r : nullptr);
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void gemm_int8_rows_vnni(
    const int8_t* W, int64_t in, const float* wscale, const int8_t* X, const float* xscale,
    int64_t M, const float* bias, float* Y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  std::vector<int32_t> correction(static_cast<size_t>(M));  // 128 · Σx per X row
  for (int64_t m = 0; m < M; ++m) {
    int32_t sum = 0;
    for (int64_t i = 0; i < in; ++i) sum += X[m * in + i];
    correction[static_cast<size_t>(m)] = sum * 128;
  }
  for (int64_t r0 = row_begin; r0 < row_end; r0 += 4) {
    const int64_t nr = row_end - r0 < 4 ? row_end - r0 : 4;
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int8_t* x = X + m0 * in;
      const int32_t* c = correction.data() + m0;
      float* y = Y + m0 * ldy;
      // The first X block of each W block prefetches (whole blocks of 4 rows inside the range).
      const int8_t* ahead = m0 == 0 && r0 + kPrefetchRows + 4 <= row_end ? W + (r0 + kPrefetchRows) * in : nullptr;
      switch (M - m0 < 4 ? M - m0 : 4) {
        case 1: block_vnni<1>(W, in, wscale, x, xscale + m0, c, bias, y, ldy, r0, nr, ahead); break;
        case 2: block_vnni<2>(W, in, wscale, x, xscale + m0, c, bias, y, ldy, r0, nr, ahead); break;
        case 3: block_vnni<3>(W, in, wscale, x, xscale + m0, c, bias, y, ldy, r0, nr, ahead); break;
        default: block_vnni<4>(W, in, wscale, x, xscale + m0, c, bias, y, ldy, r0, nr, ahead);
      }
    }
  }
}

#pragma GCC diagnostic pop

bool cpu_has_avx512_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  }();
  return has;
}

}  // namespace

ATTNKIT_KERNEL_ENTRY(quantize_rows_int8, quantize_rows_impl,
                     (const float* X, int64_t ldx, int64_t rows, int64_t in, int8_t* Q,
                      float* scale),
                     (X, ldx, rows, in, Q, scale))

// By hand rather than ATTNKIT_KERNEL_ENTRY: the AVX-512 copy is the VNNI kernel where the CPU
// has AVX-512 VNNI (else the AVX2 one), the AVX2 copy is written with intrinsics (vpmaddwd), the
// baseline copy is the plain loop. All three give the same bits: exact int32 sums, then the same
// float arithmetic.
void gemm_int8_rows(const int8_t* W, int64_t in, const float* wscale, const int8_t* X,
                    const float* xscale, int64_t M, const float* bias, float* Y, int64_t ldy,
                    int64_t row_begin, int64_t row_end) {
  if (kernel_isa() == KernelIsa::Avx512 && cpu_has_avx512_vnni() && in <= kVnniMaxIn)
    return gemm_int8_rows_vnni(W, in, wscale, X, xscale, M, bias, Y, ldy, row_begin, row_end);
  if (kernel_isa() != KernelIsa::Baseline)
    return gemm_int8_rows_avx2(W, in, wscale, X, xscale, M, bias, Y, ldy, row_begin, row_end);
  gemm_int8_rows_impl(W, in, wscale, X, xscale, M, bias, Y, ldy, row_begin, row_end);
}

}  // namespace attnkit::ops::cpu
