#include "int8_gemm_kernel.h"

#include "kernel_isa.h"
#include "vector_math.h"

#include <immintrin.h>

#include <algorithm>
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

constexpr int64_t kRowChunkBytes = 256 * 1024;

__attribute__((target("avx2,fma"))) void gemm_int8_rows_avx2(
    const int8_t* W, int64_t in, const float* wscale, const int8_t* X, const float* xscale,
    int64_t M, const float* bias, float* Y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  std::vector<int16_t> X16(static_cast<size_t>(M * in));
  for (int64_t k = 0; k < M * in; ++k) X16[static_cast<size_t>(k)] = X[k];
  // W in chunks of about kRowChunkBytes, every X block across a chunk before the next: W is read
  // from memory once per call, not once per 4 X rows (the 58101 × 512 head at 64 rows: 16 passes
  // over its 30 MB otherwise).
  const int64_t chunk = std::max<int64_t>(4, kRowChunkBytes / std::max<int64_t>(in, 1) / 4 * 4);
  for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk) {
    const int64_t c1 = std::min(row_end, c0 + chunk);
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int16_t* x = X16.data() + m0 * in;
      float* y = Y + m0 * ldy;
      switch (M - m0 < 4 ? M - m0 : 4) {
        case 1: block_avx2<1>(W, in, wscale, x, in, xscale + m0, bias, y, ldy, c0, c1); break;
        case 2: block_avx2<2>(W, in, wscale, x, in, xscale + m0, bias, y, ldy, c0, c1); break;
        case 3: block_avx2<3>(W, in, wscale, x, in, xscale + m0, bias, y, ldy, c0, c1); break;
        default: block_avx2<4>(W, in, wscale, x, in, xscale + m0, bias, y, ldy, c0, c1);
      }
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
constexpr int64_t kVnniMaxIn = kInt8PanelMaxIn;

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


// The panel kernel (int8_gemm_kernel.h states the layout): NP ≤ 2 panels (32 output rows) × MB ≤ 8
// X rows, 16 int32 accumulators, per group of 4 inputs NP loads of W and MB broadcasts of X. With
// `ahead`, the first X block prefetches the next pair's panels (the hardware prefetcher misses them
// on a head beyond L2: 58101 × 512, 16 rows, 3.2 ms without, 1.7 ms with).
template <int NP, int MB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void panel_block_vnni(
    const int8_t* P, int64_t groups, const int32_t* sums, int64_t out, const float* wscale,
    const uint8_t* U, int64_t ldu, const float* xscale, const float* bias, float* Y, int64_t ldy,
    int64_t r0, const int8_t* ahead) {
  const int64_t panel_bytes = groups * 64;
  __m512i acc[MB][NP];
  for (int m = 0; m < MB; ++m)
    for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i w[NP];
    for (int p = 0; p < NP; ++p) w[p] = _mm512_loadu_si512(P + p * panel_bytes + g * 64);
    if (ahead != nullptr)
      for (int p = 0; p < NP; ++p)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + p * panel_bytes + g * 64), _MM_HINT_T0);
    for (int m = 0; m < MB; ++m) {
      int32_t four;
      std::memcpy(&four, U + m * ldu + 4 * g, sizeof four);
      const __m512i xb = _mm512_set1_epi32(four);
      for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_dpbusd_epi32(acc[m][p], xb, w[p]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int64_t rb = r0 + p * kInt8PanelRows;
    if (rb >= out) break;
    const int64_t n = out - rb < kInt8PanelRows ? out - rb : kInt8PanelRows;
    const __mmask16 k = static_cast<__mmask16>((1u << n) - 1u);
    const __m512i c = _mm512_maskz_loadu_epi32(k, sums + rb);
    const __m512 ws = _mm512_maskz_loadu_ps(k, wscale + rb);
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(k, bias + rb) : _mm512_setzero_ps();
    for (int m = 0; m < MB; ++m) {
      // scaled_sum's arithmetic, 16 rows at once: (sw · sx), then float(Σ) times it, then + b,
      // each rounded (the asm keeps the compiler from fusing them).
      __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(xscale[m]));
      asm("" : "+v"(scale));
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[m][p], c)), scale);
      asm("" : "+v"(v));
      if (bias != nullptr) v = _mm512_add_ps(v, b);
      _mm512_mask_storeu_ps(Y + m * ldy + rb, k, v);
    }
  }
}

template <int NP>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void panel_block_rows_vnni(
    int mb, const int8_t* P, int64_t groups, const int32_t* sums, int64_t out, const float* wscale,
    const uint8_t* u, int64_t ldu, const float* xs, const float* bias, float* y, int64_t ldy,
    int64_t r0, const int8_t* a) {
  switch (mb) {
    case 1: panel_block_vnni<NP, 1>(P, groups, sums, out, wscale, u, ldu, xs, bias, y, ldy, r0, a); break;
    case 2: panel_block_vnni<NP, 2>(P, groups, sums, out, wscale, u, ldu, xs, bias, y, ldy, r0, a); break;
    case 3: panel_block_vnni<NP, 3>(P, groups, sums, out, wscale, u, ldu, xs, bias, y, ldy, r0, a); break;
    case 4: panel_block_vnni<NP, 4>(P, groups, sums, out, wscale, u, ldu, xs, bias, y, ldy, r0, a); break;
    case 5: panel_block_vnni<NP, 5>(P, groups, sums, out, wscale, u, ldu, xs, bias, y, ldy, r0, a); break;
    case 6: panel_block_vnni<NP, 6>(P, groups, sums, out, wscale, u, ldu, xs, bias, y, ldy, r0, a); break;
    case 7: panel_block_vnni<NP, 7>(P, groups, sums, out, wscale, u, ldu, xs, bias, y, ldy, r0, a); break;
    default: panel_block_vnni<NP, 8>(P, groups, sums, out, wscale, u, ldu, xs, bias, y, ldy, r0, a);
  }
}

// Panels in chunks of about kPanelChunkBytes (L2-resident), and within a chunk every block of 8 X
// rows across the chunk's panel pairs: each X block writes its rows' outputs as runs of the
// chunk's width instead of 32 values on each of M rows per panel pair (the 58101-row head at 64
// rows, whose 15 MB of logits bound it: 8.7 ms with pairs outermost, 6.9 ms in chunks of 64
// panels, a standalone copy of the loop).
constexpr int64_t kPanelChunkBytes = 512 * 1024;

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void gemm_int8_panels_vnni(
    const int8_t* packed, const int32_t* sums, int64_t out, int64_t groups, const float* wscale,
    const uint8_t* U, const float* xscale, int64_t M, const float* bias, float* Y, int64_t ldy,
    int64_t panel_begin, int64_t panel_end) {
  constexpr int kRows = 8;
  const int64_t panel_bytes = groups * 64, ldu = groups * 4;
  const int64_t chunk = std::max<int64_t>(2, kPanelChunkBytes / panel_bytes / 2 * 2);
  for (int64_t c0 = panel_begin; c0 < panel_end; c0 += chunk) {
    const int64_t c1 = std::min(panel_end, c0 + chunk);
    for (int64_t m0 = 0; m0 < M; m0 += kRows) {
      const int mb = static_cast<int>(std::min<int64_t>(kRows, M - m0));
      const uint8_t* u = U + m0 * ldu;
      float* y = Y + m0 * ldy;
      for (int64_t p = c0; p < c1; p += 2) {
        const int8_t* P = packed + p * panel_bytes;
        // The first X block prefetches the next pair's panels.
        const int8_t* ahead = m0 == 0 && p + 4 <= panel_end ? P + 2 * panel_bytes : nullptr;
        const int64_t r0 = p * kInt8PanelRows;
        if (p + 2 <= c1)
          panel_block_rows_vnni<2>(mb, P, groups, sums, out, wscale, u, ldu, xscale + m0, bias, y,
                                   ldy, r0, ahead);
        else
          panel_block_rows_vnni<1>(mb, P, groups, sums, out, wscale, u, ldu, xscale + m0, bias, y,
                                   ldy, r0, ahead);
      }
    }
  }
}

#pragma GCC diagnostic pop

// The AVX2 panel kernel (also the AVX-512 copy's on a CPU without VNNI): the same panels, half a
// panel (8 rows × 4 bytes) per 256-bit vector. Per group and X row: the row's 4 bytes broadcast
// as signed x and as |x|; vpsignb gives w · sign(x) per byte, vpmaddubsw multiplies |x| (unsigned)
// by it and adds pairs into int16 — exact, since |x|, |w| ≤ 127 make a pair at most 2 · 127² =
// 32258 < 2^15 (the quantization never gives -128) — and vpmaddwd by ones adds the two pairs
// into the row's int32 lane: each lane one output row, no reduction at the end, no correction.
// (vpmaddubsw on x + 128 as VNNI's unsigned operand would saturate: 2 · 255 · 127 > 2^15.) Blocks
// of 1 panel × MB ≤ 4 X rows: 8 accumulators.
template <int MB>
__attribute__((target("avx2,fma"))) inline void panel_block_avx2(
    const int8_t* P, int64_t groups, int64_t out, const float* wscale, const int8_t* X8,
    const int8_t* A8, int64_t ldx, const float* xscale, const float* bias, float* Y, int64_t ldy,
    int64_t r0) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[MB][2];
  for (int m = 0; m < MB; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(P + g * 64));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(P + g * 64 + 32));
    for (int m = 0; m < MB; ++m) {
      int32_t x4, a4;
      std::memcpy(&x4, X8 + m * ldx + 4 * g, sizeof x4);
      std::memcpy(&a4, A8 + m * ldx + 4 * g, sizeof a4);
      const __m256i xb = _mm256_set1_epi32(x4), ab = _mm256_set1_epi32(a4);
      const __m256i p0 = _mm256_maddubs_epi16(ab, _mm256_sign_epi8(w0, xb));
      const __m256i p1 = _mm256_maddubs_epi16(ab, _mm256_sign_epi8(w1, xb));
      acc[m][0] = _mm256_add_epi32(acc[m][0], _mm256_madd_epi16(p0, ones));
      acc[m][1] = _mm256_add_epi32(acc[m][1], _mm256_madd_epi16(p1, ones));
    }
  }
  // The sums to memory once (indexing the accumulators by a loop variable below would keep them
  // in memory through the loop above).
  alignas(32) int32_t sums[MB][16];
  for (int m = 0; m < MB; ++m) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums[m]), acc[m][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums[m] + 8), acc[m][1]);
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t rb = r0 + 8 * h;
    if (rb >= out) break;
    const int64_t n = out - rb < 8 ? out - rb : 8;
    alignas(32) float ws[8] = {}, b[8] = {};
    for (int64_t r = 0; r < n; ++r) {
      ws[r] = wscale[rb + r];
      if (bias != nullptr) b[r] = bias[rb + r];
    }
    const __m256 wsv = _mm256_load_ps(ws), bv = _mm256_load_ps(b);
    for (int m = 0; m < MB; ++m) {
      // scaled_sum's arithmetic, 8 rows at once, each step rounded (the asm keeps the compiler
      // from fusing them).
      __m256 scale = _mm256_mul_ps(wsv, _mm256_set1_ps(xscale[m]));
      asm("" : "+x"(scale));
      __m256 v = _mm256_mul_ps(
          _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sums[m] + 8 * h))),
          scale);
      asm("" : "+x"(v));
      if (bias != nullptr) v = _mm256_add_ps(v, bv);
      float* y = Y + m * ldy + rb;
      if (n == 8) {
        _mm256_storeu_ps(y, v);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, v);
        for (int64_t r = 0; r < n; ++r) y[r] = tmp[r];
      }
    }
  }
}

__attribute__((target("avx2,fma"))) void gemm_int8_panels_avx2(
    const int8_t* packed, int64_t out, int64_t groups, const float* wscale, const uint8_t* U,
    const float* xscale, int64_t M, const float* bias, float* Y, int64_t ldy, int64_t panel_begin,
    int64_t panel_end) {
  const int64_t panel_bytes = groups * 64, ldx = groups * 4;
  // x = u - 128 (the padding's 128 gives 0) and |x|, once per call.
  std::vector<int8_t> X8(static_cast<size_t>(M * ldx)), A8(X8.size());
  for (size_t k = 0; k < X8.size(); ++k) {
    const int v = static_cast<int>(U[k]) - 128;
    X8[k] = static_cast<int8_t>(v);
    A8[k] = static_cast<int8_t>(v < 0 ? -v : v);
  }
  // Chunks of panels as the VNNI copy's (L2-resident), every block of 4 X rows across a chunk.
  const int64_t chunk = std::max<int64_t>(1, kPanelChunkBytes / panel_bytes);
  for (int64_t c0 = panel_begin; c0 < panel_end; c0 += chunk) {
    const int64_t c1 = std::min(panel_end, c0 + chunk);
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int8_t* x = X8.data() + m0 * ldx;
      const int8_t* a = A8.data() + m0 * ldx;
      const float* xs = xscale + m0;
      float* y = Y + m0 * ldy;
      for (int64_t p = c0; p < c1; ++p) {
        const int8_t* P = packed + p * panel_bytes;
        const int64_t r0 = p * kInt8PanelRows;
        switch (M - m0 < 4 ? M - m0 : 4) {
          case 1: panel_block_avx2<1>(P, groups, out, wscale, x, a, ldx, xs, bias, y, ldy, r0); break;
          case 2: panel_block_avx2<2>(P, groups, out, wscale, x, a, ldx, xs, bias, y, ldy, r0); break;
          case 3: panel_block_avx2<3>(P, groups, out, wscale, x, a, ldx, xs, bias, y, ldy, r0); break;
          default: panel_block_avx2<4>(P, groups, out, wscale, x, a, ldx, xs, bias, y, ldy, r0);
        }
      }
    }
  }
}

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

bool int8_panels_preferred(int64_t in) {
  return kernel_isa() != KernelIsa::Baseline && int8_panel_groups(in) * 4 <= kInt8PanelMaxIn;
}

void pack_int8_panels(const int8_t* W, int64_t out, int64_t in, int8_t* packed, int32_t* sums,
                      int64_t panel_begin, int64_t panel_end) {
  const int64_t groups = int8_panel_groups(in);
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    int8_t* P = packed + p * groups * 64;
    std::memset(P, 0, static_cast<size_t>(groups * 64));
    for (int64_t r = 0; r < kInt8PanelRows; ++r) {
      const int64_t row = p * kInt8PanelRows + r;
      if (row >= out) break;
      const int8_t* w = W + row * in;
      int32_t total = 0;
      for (int64_t i = 0; i < in; ++i) total += w[i];
      sums[row] = total * 128;
      // Whole groups of 4 bytes as one word each, then the last group's bytes.
      const int64_t whole = in / 4;
      for (int64_t g = 0; g < whole; ++g) std::memcpy(P + g * 64 + r * 4, w + g * 4, 4);
      for (int64_t i = whole * 4; i < in; ++i) P[whole * 64 + r * 4 + i % 4] = w[i];
    }
  }
}

void unpack_int8_panels(const int8_t* packed, int64_t out, int64_t in, int8_t* W) {
  const int64_t groups = int8_panel_groups(in);
  for (int64_t row = 0; row < out; ++row) {
    const int8_t* P = packed + (row / kInt8PanelRows) * groups * 64 + (row % kInt8PanelRows) * 4;
    for (int64_t i = 0; i < in; ++i) W[row * in + i] = P[(i / 4) * 64 + i % 4];
  }
}

void offset_rows_uint8(const int8_t* X, int64_t rows, int64_t in, uint8_t* U) {
  const int64_t ldu = int8_panel_groups(in) * 4;
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t i = 0; i < in; ++i) U[m * ldu + i] = static_cast<uint8_t>(X[m * in + i] + 128);
    for (int64_t i = in; i < ldu; ++i) U[m * ldu + i] = 128;
  }
}

void gemm_int8_panels(const int8_t* packed, const int32_t* sums, int64_t out, int64_t in,
                      const float* wscale, const uint8_t* U, const float* xscale, int64_t M,
                      const float* bias, float* Y, int64_t ldy, int64_t panel_begin,
                      int64_t panel_end) {
  const int64_t groups = int8_panel_groups(in);
  if (kernel_isa() == KernelIsa::Avx512 && cpu_has_avx512_vnni() && groups * 4 <= kInt8PanelMaxIn)
    return gemm_int8_panels_vnni(packed, sums, out, groups, wscale, U, xscale, M, bias, Y, ldy,
                                 panel_begin, panel_end);
  if (kernel_isa() != KernelIsa::Baseline && groups * 4 <= kInt8PanelMaxIn)
    return gemm_int8_panels_avx2(packed, out, groups, wscale, U, xscale, M, bias, Y, ldy,
                                 panel_begin, panel_end);
  // The plain loop: the same exact sums (Σ u · w − 128 · Σ w), the same float step.
  const int64_t ldu = groups * 4;
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const int8_t* P = packed + p * groups * 64;
    for (int64_t r = 0; r < kInt8PanelRows; ++r) {
      const int64_t row = p * kInt8PanelRows + r;
      if (row >= out) break;
      for (int64_t m = 0; m < M; ++m) {
        int64_t total = 0;
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t j = 0; j < 4; ++j)
            total += static_cast<int64_t>(U[m * ldu + 4 * g + j]) * P[g * 64 + r * 4 + j];
        Y[m * ldy + row] = scaled_sum(static_cast<int32_t>(total - sums[row]), wscale[row],
                                      xscale[m], bias != nullptr ? bias + row : nullptr);
      }
    }
  }
}

}  // namespace attnkit::ops::cpu
