#include "flash_attention_kernel.h"

#include "blas.h"
#include "kernel_isa.h"
#include "parallel.h"
#include "vector_math.h"

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
// point at rows q0 and j0, rows ldq and ldk apart), masks applied as -inf (bool/causal) or added
// (additive). s is [br × bc].
template <typename T>
void score_tile(const FlashProblem& p, int64_t b, int64_t h, const T* q_tile, int64_t ldq,
                const T* k_tile, int64_t ldk, int64_t q0, int64_t br, int64_t j0, int64_t bc,
                T* s) {
  gemm(false, true, br, bc, p.dk, static_cast<T>(p.scale), q_tile, ldq, k_tile, ldk, T(0), s, bc);
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
  }
}

template <typename T>
void forward_impl(const FlashProblem& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int64_t q_tiles = (p.L + kFlashForwardQueryTile - 1) / kFlashForwardQueryTile;
  SingleThreadedBlas single_threaded_blas;
  // Scratch for the largest tile this problem has: a decoding step (one query row) needs one row
  // of scores, not a 256 × 512 tile (a 512 KiB vector is a fresh mmap, page faults and a memset
  // at every call).
  const int64_t tile_rows = std::min(kFlashForwardQueryTile, p.L);
  const int64_t tile_cols = std::min(kFlashForwardKeyTile, p.S);
  parallel_for(0, p.B * p.H * q_tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> s(tile_rows * tile_cols);
    std::vector<T> acc(tile_rows * p.dv);
    std::vector<T> m(tile_rows), l(tile_rows);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / q_tiles, b = bh / p.H, h = bh % p.H;
      const int64_t q0 = (task % q_tiles) * kFlashForwardQueryTile;
      const int64_t br = std::min(kFlashForwardQueryTile, p.L - q0);
      const T* qh = p.q_rows.head(q, b, h);
      const T* kh = p.k_rows.head(k, b, h);
      const T* vh = p.v_rows.head(v, b, h);
      // Strided operands are read in place here (packing their tiles measured no faster).
      const int64_t ldq = p.q_rows.n, ldk = p.k_rows.n, ldv = p.v_rows.n;
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      const int64_t key_end = p.causal ? causal_key_end(p, q0 + br - 1) : p.S;
      for (int64_t j0 = 0; j0 < key_end; j0 += kFlashForwardKeyTile) {
        const int64_t bc = std::min(kFlashForwardKeyTile, key_end - j0);
        score_tile(p, b, h, qh + q0 * ldq, ldq, kh + j0 * ldk, ldk, q0, br, j0, bc, s.data());
        for (int64_t r = 0; r < br; ++r)
          online_softmax_row(s.data() + r * bc, bc, m[r], l[r], acc.data() + r * p.dv, p.dv);
        // Dropout acts on the probabilities after the normaliser l has counted them.
        if (p.dropout > 0) apply_dropout(p, bh, q0, br, j0, bc, s.data());
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

template <typename T>
void backward_impl(const FlashProblem& p, const T* q, const T* k, const T* v, const T* out,
                   const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  SingleThreadedBlas single_threaded_blas;
  const T scale = static_cast<T>(p.scale);
  // One (batch, head) per task: dq accumulates over key tiles and dk, dv over query tiles, so
  // a head is never split between threads.
  parallel_for(0, p.B * p.H, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> s(kFlashQueryTile * kFlashKeyTile), dp(kFlashQueryTile * kFlashKeyTile);
    std::vector<T> dropped(p.dropout > 0 ? kFlashQueryTile * kFlashKeyTile : 0);
    std::vector<T> D(p.L);
    // A strided operand's head, packed (dense_rows), and strided gradients' dense accumulators.
    std::vector<T> q_pack, k_pack, v_pack, dout_pack, dq_acc, dk_acc, dv_acc;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / p.H, h = bh % p.H;
      // The head's operands as dense [rows × d] blocks (leading dimension d from here on).
      const T* qh = dense_rows(p.q_rows.head(q, b, h), p.q_rows.n, p.L, p.dk, q_pack);
      const T* kh = dense_rows(p.k_rows.head(k, b, h), p.k_rows.n, p.S, p.dk, k_pack);
      const T* vh = dense_rows(p.v_rows.head(v, b, h), p.v_rows.n, p.S, p.dv, v_pack);
      const T* doh = dense_rows(p.dout_rows.head(dout, b, h), p.dout_rows.n, p.L, p.dv, dout_pack);
      const T* oh = p.out_rows.head(out, b, h);  // read once, row by row
      const T* lh = lse + bh * p.L;
      T* dq_out = p.dq_rows.head(dq, b, h);
      T* dk_out = p.dk_rows.head(dk, b, h);
      T* dv_out = p.dv_rows.head(dv, b, h);
      T* dqh = dense_accumulator(dq_out, p.dq_rows.n, p.L, p.dk, dq_acc);
      T* dkh = dense_accumulator(dk_out, p.dk_rows.n, p.S, p.dk, dk_acc);
      T* dvh = dense_accumulator(dv_out, p.dv_rows.n, p.S, p.dv, dv_acc);
      for (int64_t i = 0; i < p.L; ++i) {
        T acc = 0;
        for (int64_t c = 0; c < p.dv; ++c) acc += doh[i * p.dv + c] * oh[i * p.out_rows.n + c];
        D[i] = acc;
      }
      for (int64_t j0 = 0; j0 < p.S; j0 += kFlashKeyTile) {
        const int64_t bc = std::min(kFlashKeyTile, p.S - j0);
        // Causal: the first query that sees key j0 is j0 − (S − L).
        const int64_t first_query = p.causal ? std::max<int64_t>(0, j0 - (p.S - p.L)) : 0;
        for (int64_t q0 = (first_query / kFlashQueryTile) * kFlashQueryTile; q0 < p.L;
             q0 += kFlashQueryTile) {
          const int64_t br = std::min(kFlashQueryTile, p.L - q0);
          score_tile(p, b, h, qh + q0 * p.dk, p.dk, kh + j0 * p.dk, p.dk, q0, br, j0, bc,
                     s.data());
          for (int64_t r = 0; r < br; ++r) probabilities_row(s.data() + r * bc, bc, lh[q0 + r]);
          // With dropout the output used P̃ = P ∘ Z / (1 − rate): dV = P̃ᵀ dO and dP = dP̃ ∘ Z /
          // (1 − rate); D = rowsum(dO ∘ O) is still Σ_j P_ij dP_ij.
          const T* used = s.data();
          if (p.dropout > 0) {
            std::copy(s.begin(), s.begin() + br * bc, dropped.begin());
            apply_dropout(p, bh, q0, br, j0, bc, dropped.data());
            used = dropped.data();
          }
          // dV_j += P̃ᵀ dO_i
          gemm(true, false, bc, p.dv, br, T(1), used, bc, doh + q0 * p.dv, p.dv, T(1),
               dvh + j0 * p.dv, p.dv);
          // dP = dO_i V_jᵀ, then dS = P ∘ (dP − D)
          gemm(false, true, br, bc, p.dv, T(1), doh + q0 * p.dv, p.dv, vh + j0 * p.dv, p.dv, T(0),
               dp.data(), bc);
          if (p.dropout > 0) apply_dropout(p, bh, q0, br, j0, bc, dp.data());
          for (int64_t r = 0; r < br; ++r)
            softmax_grad_row(dp.data() + r * bc, s.data() + r * bc, bc, D[q0 + r]);
          // dQ_i += scale · dS K_j;  dK_j += scale · dSᵀ Q_i
          gemm(false, false, br, p.dk, bc, scale, dp.data(), bc, kh + j0 * p.dk, p.dk, T(1),
               dqh + q0 * p.dk, p.dk);
          gemm(true, false, bc, p.dk, br, scale, dp.data(), bc, qh + q0 * p.dk, p.dk, T(1),
               dkh + j0 * p.dk, p.dk);
        }
      }
      write_rows(dqh, dq_out, p.dq_rows.n, p.L, p.dk);
      write_rows(dkh, dk_out, p.dk_rows.n, p.S, p.dk);
      write_rows(dvh, dv_out, p.dv_rows.n, p.S, p.dv);
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

}  // namespace attnkit::ops::cpu
