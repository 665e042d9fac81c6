#include "flash_attention_kernel.h"

#include "blas.h"
#include "kernel_isa.h"
#include "parallel.h"
#include "vector_math.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace attnkit::ops::cpu {

namespace {

// One score row folded into the running softmax: s (masked entries -inf) becomes the
// unnormalised probabilities exp(s − m_new); o (dv values) and l are rescaled to the new max.
template <typename T>
ATTNKIT_INLINE void online_softmax_row_impl(T* __restrict s, int64_t n, T& m, T& l,
                                            T* __restrict o, int64_t dv) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T m_new = std::max(m, max_reduce(s, n, neg_inf));
  if (m_new == neg_inf) {  // nothing visible yet
    std::fill(s, s + n, T(0));
    return;
  }
  const T alpha = m == neg_inf ? T(0) : exp_vectorizable(m - m_new);
  const T sum = map_sum(s, n, [m_new, neg_inf](T x) {
    return x == neg_inf ? T(0) : exp_vectorizable(x - m_new);
  });
  for (int64_t c = 0; c < dv; ++c) o[c] *= alpha;
  l = l * alpha + sum;
  m = m_new;
}

// s (masked -inf) -> exp(s − lse); all zero when lse = -inf (row without visible keys).
template <typename T>
ATTNKIT_INLINE void probabilities_row_impl(T* __restrict s, int64_t n, T lse) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (lse == neg_inf) {
    std::fill(s, s + n, T(0));
    return;
  }
  for (int64_t c = 0; c < n; ++c) s[c] = s[c] == neg_inf ? T(0) : exp_vectorizable(s[c] - lse);
}

// dp -> p ∘ (dp − D): the softmax backward for one row.
template <typename T>
ATTNKIT_INLINE void softmax_grad_row_impl(T* __restrict dp, const T* __restrict p, int64_t n, T D) {
  for (int64_t c = 0; c < n; ++c) dp[c] = p[c] * (dp[c] - D);
}

// s -> cap · tanh(s / cap) (Gemma 2's logit soft-cap), with tanh(x) = 1 − 2 / (e^{2x} + 1) on the
// vectorisable exp (saturating to ±1); `tanh_out`, if given, receives tanh(s / cap).
template <typename T>
ATTNKIT_INLINE void softcap_impl(T* __restrict s, int64_t n, T cap, T* __restrict tanh_out) {
  const T two_over_cap = T(2) / cap;
  for (int64_t c = 0; c < n; ++c) s[c] = T(1) - T(2) / (exp_vectorizable(s[c] * two_over_cap) + T(1));
  if (tanh_out) std::copy(s, s + n, tanh_out);
  for (int64_t c = 0; c < n; ++c) s[c] *= cap;
}

ATTNKIT_KERNEL_ENTRY(softcap, softcap_impl, (float* s, int64_t n, float cap, float* tanh_out),
                     (s, n, cap, tanh_out))
ATTNKIT_KERNEL_ENTRY(softcap, softcap_impl, (double* s, int64_t n, double cap, double* tanh_out),
                     (s, n, cap, tanh_out))
ATTNKIT_KERNEL_ENTRY(online_softmax_row, online_softmax_row_impl,
                     (float* s, int64_t n, float& m, float& l, float* o, int64_t dv),
                     (s, n, m, l, o, dv))
ATTNKIT_KERNEL_ENTRY(online_softmax_row, online_softmax_row_impl,
                     (double* s, int64_t n, double& m, double& l, double* o, int64_t dv),
                     (s, n, m, l, o, dv))
ATTNKIT_KERNEL_ENTRY(probabilities_row, probabilities_row_impl, (float* s, int64_t n, float lse),
                     (s, n, lse))
ATTNKIT_KERNEL_ENTRY(probabilities_row, probabilities_row_impl, (double* s, int64_t n, double lse),
                     (s, n, lse))
ATTNKIT_KERNEL_ENTRY(softmax_grad_row, softmax_grad_row_impl,
                     (float* dp, const float* p, int64_t n, float D), (dp, p, n, D))
ATTNKIT_KERNEL_ENTRY(softmax_grad_row, softmax_grad_row_impl,
                     (double* dp, const double* p, int64_t n, double D), (dp, p, n, D))

// Tiles of at most kRowTileRows query rows (a decoding step: one row; the beams of one source
// against its cross-attention keys: 4), row by row. BLAS's sgemm packs both operands at every
// call, which for a few rows of scores or of outputs costs more than the products (the packing
// was 22% of a tiny model's decoding profile, 7% of a Marian beam-search one); these read the
// keys and values in place (a head's tile stays in L1 across its rows).
constexpr int64_t kRowTileRows = 8;
// s[c] = scale · Σ_d q[d]·k[c·ldk + d], c < n: each dot product in 16 partial sums, added
// pairwise (8 + 8, 4 + 4, 2 + 2, 1 + 1: a shuffle tree, not 16 dependent adds per key) in a fixed
// order, so every instruction-set copy vectorises it the same way.
template <typename T>
ATTNKIT_INLINE void row_scores_impl(const T* __restrict q, const T* __restrict k, int64_t ldk,
                                    int64_t n, int64_t d, T scale, T* __restrict s) {
  constexpr int kParts = 16;
  const int64_t whole = d / kParts * kParts;
  for (int64_t c = 0; c < n; ++c) {
    const T* __restrict kc = k + c * ldk;
    T part[kParts] = {};
    for (int64_t i = 0; i < whole; i += kParts)
      for (int j = 0; j < kParts; ++j) part[j] += q[i + j] * kc[i + j];
    for (int w = kParts / 2; w >= 1; w /= 2)
      for (int j = 0; j < w; ++j) part[j] += part[j + w];
    T sum = part[0];
    for (int64_t i = whole; i < d; ++i) sum += q[i] * kc[i];
    s[c] = scale * sum;
  }
}

// acc[j] += Σ_c s[c] · v[c·ldv + j], j < d, keys in order for every j. Blocks of 64 values of acc
// stay in registers across the keys (not a load and a store of acc per key).
template <typename T>
ATTNKIT_INLINE void row_accumulate_impl(const T* __restrict s, const T* __restrict v, int64_t ldv,
                                        int64_t n, int64_t d, T* __restrict acc) {
  constexpr int64_t kBlock = 64;
  int64_t j0 = 0;
  for (; j0 + kBlock <= d; j0 += kBlock) {
    T a[kBlock];
    for (int64_t j = 0; j < kBlock; ++j) a[j] = acc[j0 + j];
    for (int64_t c = 0; c < n; ++c) {
      const T sc = s[c];
      const T* __restrict vc = v + c * ldv + j0;
      for (int64_t j = 0; j < kBlock; ++j) a[j] += sc * vc[j];
    }
    for (int64_t j = 0; j < kBlock; ++j) acc[j0 + j] = a[j];
  }
  for (int64_t c = 0; c < n && j0 < d; ++c) {
    const T sc = s[c];
    const T* __restrict vc = v + c * ldv;
    for (int64_t j = j0; j < d; ++j) acc[j] += sc * vc[j];
  }
}

ATTNKIT_KERNEL_ENTRY(row_scores_generic, row_scores_impl,
                     (const float* q, const float* k, int64_t ldk, int64_t n, int64_t d, float scale, float* s),
                     (q, k, ldk, n, d, scale, s))

// The AVX-512 float copy, 16 keys at a time where d is a multiple of 16: the same FMA chains per
// key and the same pairwise tree (lanes j + j+8, then j + j+4, j + j+2, j + j+1) as
// row_scores_impl, but done for 16 keys together by shuffles across their 16 vectors (4 levels,
// 15 additions of whole vectors) instead of a shuffle tree per key, so the scores are the same
// bits as the AVX2 copy's. A last 1-3 keys and other d: row_scores_impl.
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))) void row_scores_avx512_blocks(
    const float* q, const float* k, int64_t ldk, int64_t n, int64_t d, float scale, float* s) {
  int64_t c0 = 0;
  if (d % 16 == 0 && d > 0) {
    // Lane 4t + u of the last level holds key 4u + t: this puts key c at lane c.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512 scale_v = _mm512_set1_ps(scale);
    // A last block of 4..15 keys repeats its last key in the missing lanes and stores the real
    // ones (fewer go through row_scores_impl's tree per key).
    for (; n - c0 >= 4; c0 += 16) {
      const int64_t real = n - c0 < 16 ? n - c0 : 16;
      const float* kc[16];
      for (int c = 0; c < 16; ++c) kc[c] = k + (c0 + (c < real ? c : real - 1)) * ldk;
      __m512 p[16];
      for (int c = 0; c < 16; ++c) p[c] = _mm512_setzero_ps();
      for (int64_t i = 0; i < d; i += 16) {
        const __m512 qv = _mm512_loadu_ps(q + i);
        for (int c = 0; c < 16; ++c) p[c] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kc[c] + i), p[c]);
      }
      // a_j = p_j + p_{j+8}: keys 2m, 2m+1 in one vector, [a_0..7 of 2m | a_0..7 of 2m+1].
      __m512 a[8];
      for (int m = 0; m < 8; ++m)
        a[m] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * m], p[2 * m + 1], 0x44),
                             _mm512_shuffle_f32x4(p[2 * m], p[2 * m + 1], 0xEE));
      // b_j = a_j + a_{j+4}: keys 4m..4m+3, one 128-bit block each.
      __m512 b[4];
      for (int m = 0; m < 4; ++m)
        b[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xDD));
      // c_j = b_j + b_{j+2}: block t of c[m] = [c_0, c_1 of key 8m + t, c_0, c_1 of key 8m + 4 + t].
      __m512 c[2];
      for (int m = 0; m < 2; ++m) {
        const __m512d x = _mm512_castps_pd(b[2 * m]), y = _mm512_castps_pd(b[2 * m + 1]);
        c[m] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
      }
      // c_0 + c_1: block t = keys t, 4 + t, 8 + t, 12 + t.
      const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
      const __mmask16 keep = static_cast<__mmask16>((1u << real) - 1u);
      _mm512_mask_storeu_ps(s + c0, keep, _mm512_mul_ps(scale_v, _mm512_permutexvar_ps(order, sums)));
    }
  }
  if (c0 < n) row_scores_generic_avx512(q, k + c0 * ldk, ldk, n - c0, d, scale, s + c0);
}

// The AVX2 copy's blocks: 4 keys together where d is a multiple of 16, each key's 16 partial
// sums in two vectors (parts 0-7 and 8-15: the same FMA chains as row_scores_impl's), then the same
// tree across the 4 keys: j + j+8 as whole vectors, j + j+4 by 128-bit halves, j + j+2 by 64-bit
// pairs, j + j+1 in lanes; so the same bits as the AVX2 copy of row_scores_impl (a decoding step's
// cross attention spent 11% of an int8 Marian cell held to AVX2 in that copy's tree per key).
// A last 1-3 keys and other d: row_scores_impl.
__attribute__((target("avx2,fma"))) void row_scores_avx2_blocks(const float* q, const float* k,
                                                              int64_t ldk, int64_t n, int64_t d,
                                                              float scale, float* s) {
  int64_t c0 = 0;
  if (d % 16 == 0 && d > 0) {
    const __m256 scale_v = _mm256_set1_ps(scale);
    for (; n - c0 >= 4; c0 += 4) {
      const float* kc[4] = {k + c0 * ldk, k + (c0 + 1) * ldk, k + (c0 + 2) * ldk, k + (c0 + 3) * ldk};
      __m256 lo[4], hi[4];
      for (int c = 0; c < 4; ++c) lo[c] = hi[c] = _mm256_setzero_ps();
      for (int64_t i = 0; i < d; i += 16) {
        const __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
        for (int c = 0; c < 4; ++c) {
          lo[c] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kc[c] + i), lo[c]);
          hi[c] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kc[c] + i + 8), hi[c]);
        }
      }
      __m256 a[4];  // a_j = part_j + part_{j+8}
      for (int c = 0; c < 4; ++c) a[c] = _mm256_add_ps(lo[c], hi[c]);
      // b_j = a_j + a_{j+4}: [b of key 0 | b of key 1], [b of key 2 | b of key 3].
      const __m256 b01 = _mm256_add_ps(_mm256_permute2f128_ps(a[0], a[1], 0x20),
                                       _mm256_permute2f128_ps(a[0], a[1], 0x31));
      const __m256 b23 = _mm256_add_ps(_mm256_permute2f128_ps(a[2], a[3], 0x20),
                                       _mm256_permute2f128_ps(a[2], a[3], 0x31));
      // c_j = b_j + b_{j+2}: [c_0, c_1 of keys 0, 2 | c_0, c_1 of keys 1, 3].
      const __m256d x = _mm256_castps_pd(b01), y = _mm256_castps_pd(b23);
      const __m256 cc = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)),
                                      _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
      // c_0 + c_1: [keys 0, 2, 0, 2 | keys 1, 3, 1, 3].
      const __m256 sums = _mm256_add_ps(_mm256_shuffle_ps(cc, cc, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm256_shuffle_ps(cc, cc, _MM_SHUFFLE(3, 1, 3, 1)));
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_mul_ps(scale_v, sums));
      s[c0] = out[0];
      s[c0 + 1] = out[4];
      s[c0 + 2] = out[1];
      s[c0 + 3] = out[5];
    }
  }
  if (c0 < n) row_scores_generic_avx2(q, k + c0 * ldk, ldk, n - c0, d, scale, s + c0);
}

void row_scores(const float* q, const float* k, int64_t ldk, int64_t n, int64_t d, float scale,
                float* s) {
  switch (kernel_isa()) {
    case KernelIsa::Avx512: return row_scores_avx512_blocks(q, k, ldk, n, d, scale, s);
    case KernelIsa::Avx2: return row_scores_avx2_blocks(q, k, ldk, n, d, scale, s);
    default: return row_scores_generic(q, k, ldk, n, d, scale, s);
  }
}
ATTNKIT_KERNEL_ENTRY(row_scores, row_scores_impl,
                     (const double* q, const double* k, int64_t ldk, int64_t n, int64_t d, double scale, double* s),
                     (q, k, ldk, n, d, scale, s))
ATTNKIT_KERNEL_ENTRY(row_accumulate, row_accumulate_impl,
                     (const float* s, const float* v, int64_t ldv, int64_t n, int64_t d, float* acc),
                     (s, v, ldv, n, d, acc))
ATTNKIT_KERNEL_ENTRY(row_accumulate, row_accumulate_impl,
                     (const double* s, const double* v, int64_t ldv, int64_t n, int64_t d, double* acc),
                     (s, v, ldv, n, d, acc))

// Multiplies tile t [br × bc] (rows q0.., keys j0..) by the dropout keep mask / (1 − rate).
template <typename T>
void apply_dropout(const FlashProblem& p, int64_t bh, int64_t q0, int64_t br, int64_t j0,
                   int64_t bc, T* t) {
  const uint32_t threshold = dropout_threshold(p.dropout);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout));
  for (int64_t r = 0; r < br; ++r)
    for (int64_t c = 0; c < bc; ++c) {
      T& x = t[r * bc + c];
      x = dropout_keep(p.dropout_seed, bh, q0 + r, j0 + c, p.L, p.S, threshold) ? x * keep_scale
                                                                                : T(0);
    }
}

// Last key index (exclusive) visible to query row i under causality.
inline int64_t causal_key_end(const FlashProblem& p, int64_t i) {
  return std::clamp<int64_t>(i + 1 + p.S - p.L, 0, p.S);
}

// First key index visible to query row i under the sliding window (0 without one).
inline int64_t window_key_begin(const FlashProblem& p, int64_t i) {
  return p.window > 0 ? std::clamp<int64_t>(i + p.S - p.L - p.window + 1, 0, p.S) : 0;
}

// Query rows that see some key of [j0, j0 + bc): [first, end) under causality and the window.
inline int64_t first_query_of_keys(const FlashProblem& p, int64_t j0) {
  return p.causal ? std::clamp<int64_t>(j0 - (p.S - p.L), 0, p.L) : 0;
}
inline int64_t query_end_of_keys(const FlashProblem& p, int64_t j0, int64_t bc) {
  return p.window > 0 ? std::clamp<int64_t>(j0 + bc - 1 + p.window - (p.S - p.L), 0, p.L) : p.L;
}

// n rows of d values, `ld` apart, as one dense [n × d] block: the rows themselves when they are
// adjacent (contiguous operands: no copy), else gathered into `buf`. The backward packs a strided
// operand's head (e.g. of the [B, n, H, d] storage of transposed projections) inside the worker
// that owns the head, and accumulates strided gradients densely: one pass over the head's rows
// into per-thread scratch (O(n·d) against its O(n·n·d) products), no extra parallel region. Its
// many small accumulating GEMMs were clearly slower on strided rows (docs/python.md, "Strided
// inputs").
template <typename T>
const T* dense_rows(const T* src, int64_t ld, int64_t n, int64_t d, std::vector<T>& buf) {
  if (ld == d) return src;
  buf.resize(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i) std::copy(src + i * ld, src + i * ld + d, buf.data() + i * d);
  return buf.data();
}

// A dense, zeroed [n × d] accumulator for n rows `ld` apart at dst: dst itself when its rows are
// adjacent, else `buf` (write_rows copies it back).
template <typename T>
T* dense_accumulator(T* dst, int64_t ld, int64_t n, int64_t d, std::vector<T>& buf) {
  T* acc = dst;
  if (ld != d) {
    buf.resize(static_cast<size_t>(n * d));
    acc = buf.data();
  }
  std::fill(acc, acc + n * d, T(0));
  return acc;
}

template <typename T>
void write_rows(const T* acc, T* dst, int64_t ld, int64_t n, int64_t d) {
  if (acc == dst) return;
  for (int64_t i = 0; i < n; ++i) std::copy(acc + i * d, acc + i * d + d, dst + i * ld);
}

// Scores of query rows [q0, q0+br) against keys [j0, j0+bc) for head (b, h) (q_tile and k_tile
// point at rows q0 and j0, rows ldq and ldk apart), soft-capped, masks applied as -inf
// (bool/causal/window) or added (additive). s is [br × bc]; `tanh_out` (when soft-capping), if
// given, receives tanh(scores / cap) for the backward.
template <typename T>
void score_tile(const FlashProblem& p, int64_t b, int64_t h, const T* q_tile, int64_t ldq,
                const T* k_tile, int64_t ldk, int64_t q0, int64_t br, int64_t j0, int64_t bc,
                T* s, T* tanh_out = nullptr) {
  if (br <= kRowTileRows)
    for (int64_t r = 0; r < br; ++r)
      row_scores(q_tile + r * ldq, k_tile, ldk, bc, p.dk, static_cast<T>(p.scale), s + r * bc);
  else
    gemm(false, true, br, bc, p.dk, static_cast<T>(p.scale), q_tile, ldq, k_tile, ldk, T(0), s, bc);
  if (p.logit_softcap > 0) softcap(s, br * bc, static_cast<T>(p.logit_softcap), tanh_out);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const auto& mk = p.mask;
  const bool has_mask = mk.bool_data || mk.additive_data;
  for (int64_t r = 0; r < br; ++r) {
    T* row = s + r * bc;
    if (has_mask) {
      const int64_t base = b * mk.stride_b + h * mk.stride_h + (q0 + r) * mk.stride_l;
      if (mk.bool_data) {
        for (int64_t c = 0; c < bc; ++c)
          if (!mk.bool_data[base + (j0 + c) * mk.stride_s]) row[c] = neg_inf;
      } else {
        const T* add = static_cast<const T*>(mk.additive_data);
        for (int64_t c = 0; c < bc; ++c) row[c] += add[base + (j0 + c) * mk.stride_s];
      }
    }
    if (p.causal) {
      const int64_t visible = causal_key_end(p, q0 + r) - j0;
      if (visible < bc) std::fill(row + std::max<int64_t>(visible, 0), row + bc, neg_inf);
    }
    if (p.window > 0) {
      const int64_t hidden = window_key_begin(p, q0 + r) - j0;
      if (hidden > 0) std::fill(row, row + std::min(hidden, bc), neg_inf);
    }
  }
}

// The forward's query tile: kFlashForwardQueryTile, or under a window w the smallest power of two
// in [32, kFlashForwardQueryTile] that is at least w / 4: a tile of br rows visits br + w − 1 keys
// where each row sees w, so smaller tiles waste less of a narrow band.
inline int64_t window_tile(const FlashProblem& p, int64_t largest) {
  int64_t tile = 32;
  while (tile < largest && tile * 4 < p.window) tile *= 2;
  return tile;
}
inline int64_t forward_query_tile(const FlashProblem& p) {
  return p.window > 0 ? window_tile(p, kFlashForwardQueryTile) : kFlashForwardQueryTile;
}

template <typename T>
void forward_impl(const FlashProblem& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int64_t query_tile = forward_query_tile(p);
  const int64_t q_tiles = (p.L + query_tile - 1) / query_tile;
  SingleThreadedBlas single_threaded_blas;
  // Scratch for the largest tile this problem has: a decoding step (one query row) needs one row
  // of scores, not a 256 × 512 tile (a 512 KiB vector is a fresh mmap, page faults and a memset
  // at every call).
  const int64_t tile_rows = std::min(query_tile, p.L);
  const int64_t tile_cols = std::min(kFlashForwardKeyTile, p.S);
  const int64_t group = p.group();
  parallel_for(0, p.B * p.H * q_tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> s(tile_rows * tile_cols);
    std::vector<T> acc(tile_rows * p.dv);
    std::vector<T> m(tile_rows), l(tile_rows);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / q_tiles, b = bh / p.H, h = bh % p.H;
      const int64_t q0 = (task % q_tiles) * query_tile;
      const int64_t br = std::min(query_tile, p.L - q0);
      const T* qh = p.q_rows.head(q, b, h);
      // The key/value head of h's group, read in place by each of the group's query heads.
      const T* kh = p.k_rows.head(k, b, h / group);
      const T* vh = p.v_rows.head(v, b, h / group);
      // Strided operands are read in place here (packing their tiles measured no faster).
      const int64_t ldq = p.q_rows.n, ldk = p.k_rows.n, ldv = p.v_rows.n;
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      // Keys no row of the tile sees (after the causal diagonal, before the window) are skipped.
      const int64_t key_end = p.causal ? causal_key_end(p, q0 + br - 1) : p.S;
      for (int64_t j0 = window_key_begin(p, q0); j0 < key_end; j0 += kFlashForwardKeyTile) {
        const int64_t bc = std::min(kFlashForwardKeyTile, key_end - j0);
        score_tile(p, b, h, qh + q0 * ldq, ldq, kh + j0 * ldk, ldk, q0, br, j0, bc, s.data());
        for (int64_t r = 0; r < br; ++r)
          online_softmax_row(s.data() + r * bc, bc, m[r], l[r], acc.data() + r * p.dv, p.dv);
        // Dropout acts on the probabilities after the normaliser l has counted them.
        if (p.dropout > 0) apply_dropout(p, bh, q0, br, j0, bc, s.data());
        if (br <= kRowTileRows)
          for (int64_t r = 0; r < br; ++r)
            row_accumulate(s.data() + r * bc, vh + j0 * ldv, ldv, bc, p.dv, acc.data() + r * p.dv);
        else
          gemm(false, false, br, p.dv, bc, T(1), s.data(), bc, vh + j0 * ldv, ldv, T(1),
               acc.data(), p.dv);
      }
      T* oh = p.out_rows.head(out, b, h) + q0 * p.out_rows.n;
      T* lh = lse + bh * p.L + q0;
      for (int64_t r = 0; r < br; ++r) {
        const T inv = l[r] > 0 ? T(1) / l[r] : T(0);
        T* orow = oh + r * p.out_rows.n;
        for (int64_t c = 0; c < p.dv; ++c) orow[c] = acc[r * p.dv + c] * inv;
        lh[r] = l[r] > 0 ? m[r] + std::log(l[r]) : -std::numeric_limits<T>::infinity();
      }
    }
  });
}

// The backward's tiles: kFlashQueryTile × kFlashKeyTile, or under a window square tiles of the
// forward's rule (at most kFlashQueryTile): a key tile of bc columns is seen by bc + w − 1 rows.
struct BackwardTiles {
  int64_t rows, cols;
};
inline BackwardTiles backward_tiles(const FlashProblem& p) {
  if (p.window <= 0) return {kFlashQueryTile, kFlashKeyTile};
  const int64_t tile = window_tile(p, kFlashQueryTile);
  return {tile, tile};
}

// One worker's scratch for backward_head.
template <typename T>
struct BackwardScratch {
  BackwardTiles tiles;
  std::vector<T> s, dp, dropped, tanh, D, q_pack, dout_pack, dq_acc;
};

// The backward of one query head h of batch b (its key/value head's rows kh, vh dense, leading
// dimension d): dq written to its place, dk and dv added to the dense accumulators dkh, dvh.
template <typename T>
void backward_head(const FlashProblem& p, int64_t b, int64_t h, const T* q, const T* kh,
                   const T* vh, const T* out, const T* lse, const T* dout, T* dq, T* dkh, T* dvh,
                   BackwardScratch<T>& w) {
  const T scale = static_cast<T>(p.scale);
  const int64_t bh = b * p.H + h;
  // The head's operands as dense [rows × d] blocks (leading dimension d from here on).
  const T* qh = dense_rows(p.q_rows.head(q, b, h), p.q_rows.n, p.L, p.dk, w.q_pack);
  const T* doh = dense_rows(p.dout_rows.head(dout, b, h), p.dout_rows.n, p.L, p.dv, w.dout_pack);
  const T* oh = p.out_rows.head(out, b, h);  // read once, row by row
  const T* lh = lse + bh * p.L;
  T* dq_out = p.dq_rows.head(dq, b, h);
  T* dqh = dense_accumulator(dq_out, p.dq_rows.n, p.L, p.dk, w.dq_acc);
  T* D = w.D.data();
  for (int64_t i = 0; i < p.L; ++i) {
    T acc = 0;
    for (int64_t c = 0; c < p.dv; ++c) acc += doh[i * p.dv + c] * oh[i * p.out_rows.n + c];
    D[i] = acc;
  }
  T* s = w.s.data();
  T* dp = w.dp.data();
  const int64_t query_tile = w.tiles.rows, key_tile = w.tiles.cols;
  for (int64_t j0 = 0; j0 < p.S; j0 += key_tile) {
    const int64_t bc = std::min(key_tile, p.S - j0);
    // Only the query tiles that see a key of this tile: causal from j0 − (S − L) on, the window
    // up to the last row whose band still reaches the tile.
    const int64_t first_query = first_query_of_keys(p, j0);
    const int64_t query_end = query_end_of_keys(p, j0, bc);
    for (int64_t q0 = (first_query / query_tile) * query_tile; q0 < query_end; q0 += query_tile) {
      const int64_t br = std::min(query_tile, p.L - q0);
      score_tile(p, b, h, qh + q0 * p.dk, p.dk, kh + j0 * p.dk, p.dk, q0, br, j0, bc, s,
                 p.logit_softcap > 0 ? w.tanh.data() : nullptr);
      for (int64_t r = 0; r < br; ++r) probabilities_row(s + r * bc, bc, lh[q0 + r]);
      // With dropout the output used P̃ = P ∘ Z / (1 − rate): dV = P̃ᵀ dO and dP = dP̃ ∘ Z /
      // (1 − rate); D = rowsum(dO ∘ O) is still Σ_j P_ij dP_ij.
      const T* used = s;
      if (p.dropout > 0) {
        std::copy(s, s + br * bc, w.dropped.begin());
        apply_dropout(p, bh, q0, br, j0, bc, w.dropped.data());
        used = w.dropped.data();
      }
      // dV_j += P̃ᵀ dO_i
      gemm(true, false, bc, p.dv, br, T(1), used, bc, doh + q0 * p.dv, p.dv, T(1),
           dvh + j0 * p.dv, p.dv);
      // dP = dO_i V_jᵀ, then dS = P ∘ (dP − D)
      gemm(false, true, br, bc, p.dv, T(1), doh + q0 * p.dv, p.dv, vh + j0 * p.dv, p.dv, T(0), dp,
           bc);
      if (p.dropout > 0) apply_dropout(p, bh, q0, br, j0, bc, dp);
      for (int64_t r = 0; r < br; ++r) softmax_grad_row(dp + r * bc, s + r * bc, bc, D[q0 + r]);
      // Through the soft-cap: d(cap · tanh(x / cap)) / dx = 1 − tanh².
      if (p.logit_softcap > 0)
        for (int64_t e = 0; e < br * bc; ++e) dp[e] *= T(1) - w.tanh[e] * w.tanh[e];
      // dQ_i += scale · dS K_j;  dK_j += scale · dSᵀ Q_i
      gemm(false, false, br, p.dk, bc, scale, dp, bc, kh + j0 * p.dk, p.dk, T(1), dqh + q0 * p.dk,
           p.dk);
      gemm(true, false, bc, p.dk, br, scale, dp, bc, qh + q0 * p.dk, p.dk, T(1), dkh + j0 * p.dk,
           p.dk);
    }
  }
  write_rows(dqh, dq_out, p.dq_rows.n, p.L, p.dk);
}

// Parts per group in the backward (FlashProblem::group_split): one task per key/value head when
// there are enough of them to keep the threads evenly busy, else the groups split further.
inline int64_t backward_group_split(const FlashProblem& p) {
  const int64_t group = p.group();
  if (p.group_split > 0) return std::min(p.group_split, group);
  const int64_t threads = parallel_threads(), kv_tasks = p.B * p.kv_heads();
  if (group == 1 || kv_tasks % threads == 0 || kv_tasks >= 4 * threads) return 1;
  return group;
}

template <typename T>
void backward_impl(const FlashProblem& p, const T* q, const T* k, const T* v, const T* out,
                   const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  SingleThreadedBlas single_threaded_blas;
  const int64_t group = p.group(), Hkv = p.kv_heads(), split = backward_group_split(p);
  // One task per (batch, key/value head, part of its group): dq of a query head accumulates over
  // key tiles, dk and dv over query tiles and the part's query heads, so no row is written by two
  // threads. With split > 1 each part sums into its own dense partial dk, dv, added up below.
  std::vector<T> partial_k, partial_v;
  if (split > 1) {
    partial_k.resize(static_cast<size_t>(p.B * Hkv * split * p.S * p.dk));
    partial_v.resize(static_cast<size_t>(p.B * Hkv * split * p.S * p.dv));
  }
  parallel_for(0, p.B * Hkv * split, 1, [&](int64_t begin, int64_t end) {
    BackwardScratch<T> w;
    w.tiles = backward_tiles(p);
    const int64_t tile_size = w.tiles.rows * w.tiles.cols;
    w.s.resize(tile_size);
    w.dp.resize(tile_size);
    w.dropped.resize(p.dropout > 0 ? tile_size : 0);
    w.tanh.resize(p.logit_softcap > 0 ? tile_size : 0);
    w.D.resize(p.L);
    // A strided key/value head, packed (dense_rows), and strided gradients' dense accumulators.
    std::vector<T> k_pack, v_pack, dk_acc, dv_acc;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t part = task % split, bg = task / split, b = bg / Hkv, g = bg % Hkv;
      const T* kh = dense_rows(p.k_rows.head(k, b, g), p.k_rows.n, p.S, p.dk, k_pack);
      const T* vh = dense_rows(p.v_rows.head(v, b, g), p.v_rows.n, p.S, p.dv, v_pack);
      T* dk_out = p.dk_rows.head(dk, b, g);
      T* dv_out = p.dv_rows.head(dv, b, g);
      T* dkh = split > 1 ? partial_k.data() + task * p.S * p.dk
                         : dense_accumulator(dk_out, p.dk_rows.n, p.S, p.dk, dk_acc);
      T* dvh = split > 1 ? partial_v.data() + task * p.S * p.dv
                         : dense_accumulator(dv_out, p.dv_rows.n, p.S, p.dv, dv_acc);
      if (split > 1) {  // partial sums start at zero (dense_accumulator zeroes its own)
        std::fill(dkh, dkh + p.S * p.dk, T(0));
        std::fill(dvh, dvh + p.S * p.dv, T(0));
      }
      for (int64_t h = g * group + part * group / split; h < g * group + (part + 1) * group / split;
           ++h)
        backward_head(p, b, h, q, kh, vh, out, lse, dout, dq, dkh, dvh, w);
      if (split == 1) {
        write_rows(dkh, dk_out, p.dk_rows.n, p.S, p.dk);
        write_rows(dvh, dv_out, p.dv_rows.n, p.S, p.dv);
      }
    }
  });
  if (split == 1) return;
  // dk, dv of each key/value head: the sum of its parts, written to their rows.
  parallel_for(0, p.B * Hkv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bg = begin; bg < end; ++bg) {
      const int64_t b = bg / Hkv, g = bg % Hkv;
      const auto sum_parts = [&](const std::vector<T>& partial, int64_t d, const FlashRows& rows,
                                 T* grad) {
        T* dst = rows.head(grad, b, g);
        const T* first = partial.data() + bg * split * p.S * d;
        for (int64_t i = 0; i < p.S; ++i) {
          T* row = dst + i * rows.n;
          for (int64_t c = 0; c < d; ++c) {
            T acc = first[i * d + c];
            for (int64_t part = 1; part < split; ++part) acc += first[(part * p.S + i) * d + c];
            row[c] = acc;
          }
        }
      };
      sum_parts(partial_k, p.dk, p.dk_rows, dk);
      sum_parts(partial_v, p.dv, p.dv_rows, dv);
    }
  });
}

}  // namespace

void flash_attention_forward(const FlashProblem& p, const float* q, const float* k, const float* v,
                             float* out, float* lse) {
  forward_impl(p, q, k, v, out, lse);
}
void flash_attention_forward(const FlashProblem& p, const double* q, const double* k,
                             const double* v, double* out, double* lse) {
  forward_impl(p, q, k, v, out, lse);
}
void flash_attention_backward(const FlashProblem& p, const float* q, const float* k,
                              const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv) {
  backward_impl(p, q, k, v, out, lse, dout, dq, dk, dv);
}
void flash_attention_backward(const FlashProblem& p, const double* q, const double* k,
                              const double* v, const double* out, const double* lse,
                              const double* dout, double* dq, double* dk, double* dv) {
  backward_impl(p, q, k, v, out, lse, dout, dq, dk, dv);
}

void attention_row_scores(const float* q, const float* k, int64_t ldk, int64_t n, int64_t d,
                          float scale, float* s) {
  row_scores(q, k, ldk, n, d, scale, s);
}

void attention_row_scores_per_key(const float* q, const float* k, int64_t ldk, int64_t n, int64_t d,
                                  float scale, float* s) {
  row_scores_generic(q, k, ldk, n, d, scale, s);
}

}  // namespace attnkit::ops::cpu
