#include "fused_feature_attention_kernel.h"

#include "blas.h"
#include "kernel_isa.h"
#include "small_gemm.h"
#include "vector_math.h"

#include <algorithm>
#include <cmath>

namespace attnkit::ops::cpu {

size_t feature_attention_workspace(const FeatureProblem& p) {
  const int64_t C = kFeatureChunk, m = p.features();
  // φq, φk and their gradient [C × m] each, one [C × C] block, the output-gradient pair [C × e]
  // and [C], the running state [m × e] and m-vector.
  return static_cast<size_t>(3 * C * m + C * C + C * p.e + C + m * p.e + m);
}

// Everything below runs inside the ISA copies of the entry points (kernel_isa.h), so it is
// ATTNKIT_INLINE.

namespace {

template <typename T>
ATTNKIT_INLINE T denominator(const FeatureProblem& p, T raw) {
  const T eps = static_cast<T>(p.eps);
  return p.clamp ? std::max(raw, eps) : raw + eps;
}

template <typename T>
ATTNKIT_INLINE void elu_plus_one_row(const T* __restrict x, T* __restrict f, int64_t d) {
  for (int64_t j = 0; j < d; ++j) {
    const T xj = x[j];
    const T ex = exp_vectorizable(std::min(xj, T(0)));
    f[j] = xj > T(0) ? xj + T(1) : ex;
  }
}

// f [c × m] = φ of rows [t0, t0 + c) of x [n × d].
template <typename T>
ATTNKIT_INLINE void feature_rows(const FeatureProblem& p, const T* x, int64_t t0, int64_t c, T* f) {
  const int64_t d = p.d, m = p.features();
  switch (p.feature) {
    case FeatureMapKind::Elu:
      for (int64_t i = 0; i < c; ++i) {
        const T* __restrict xr = x + (t0 + i) * d;
        T* __restrict fr = f + i * m;
        elu_plus_one_row(xr, fr, d);
      }
      break;
    case FeatureMapKind::Relu:
      for (int64_t i = 0; i < c; ++i) {
        const T* __restrict xr = x + (t0 + i) * d;
        T* __restrict fr = f + i * m;
        for (int64_t j = 0; j < d; ++j) fr[j] = std::max(xr[j], T(0));
      }
      break;
    case FeatureMapKind::CosRelu:
      for (int64_t i = 0; i < c; ++i) {
        const T* __restrict xr = x + (t0 + i) * d;
        T* __restrict fr = f + i * m;
        const double angle = static_cast<double>(t0 + i + 1) * p.angle_step;
        const T ca = static_cast<T>(std::cos(angle)), sa = static_cast<T>(std::sin(angle));
        for (int64_t j = 0; j < d; ++j) {
          const T r = std::max(xr[j], T(0));
          fr[j] = r * ca;
          fr[d + j] = r * sa;
        }
      }
      break;
    case FeatureMapKind::Favor:  // no fused kernel: fused_feature_applies() keeps it out
    case FeatureMapKind::T2r:    // nor for the trained maps
    case FeatureMapKind::Hedgehog:
      break;
  }
}

// dx rows [t0, t0 + c) from the feature gradient df [c × m]; f holds the same rows' features
// (for elu + 1, φ'(x) = φ(x) where x <= 0).
template <typename T>
ATTNKIT_INLINE void feature_grad_rows(const FeatureProblem& p, const T* x, int64_t t0, int64_t c,
                                      const T* f, const T* df, T* dx) {
  const int64_t d = p.d, m = p.features();
  for (int64_t i = 0; i < c; ++i) {
    const T* __restrict xr = x + (t0 + i) * d;
    const T* __restrict fr = f + i * m;
    const T* __restrict gr = df + i * m;
    T* __restrict out = dx + (t0 + i) * d;
    if (p.feature == FeatureMapKind::Elu) {
      for (int64_t j = 0; j < d; ++j) out[j] = xr[j] > 0 ? gr[j] : gr[j] * fr[j];
    } else if (p.feature == FeatureMapKind::Relu) {
      for (int64_t j = 0; j < d; ++j) out[j] = xr[j] > 0 ? gr[j] : T(0);
    } else {
      const double angle = static_cast<double>(t0 + i + 1) * p.angle_step;
      const T ca = static_cast<T>(std::cos(angle)), sa = static_cast<T>(std::sin(angle));
      for (int64_t j = 0; j < d; ++j) out[j] = xr[j] > 0 ? gr[j] * ca + gr[d + j] * sa : T(0);
    }
  }
}

// Zeroes the rows of f [c × m] whose key (rows [s0, s0 + c)) is padding.
template <typename T>
ATTNKIT_INLINE void drop_padded_rows(const bool* keep, int64_t s0, int64_t c, int64_t m, T* f) {
  if (!keep) return;
  for (int64_t i = 0; i < c; ++i)
    if (!keep[s0 + i]) std::fill(f + i * m, f + (i + 1) * m, T(0));
}

// The causal chunks of rows [t_begin, n): query t sees the keys t_begin..t on top of what
// `state` and `z` already hold (zero for plain causal attention, the prefix summary for prefix
// attention). Keys whose keep entry is false contribute nothing (keep = nullptr keeps all).
template <typename T>
ATTNKIT_INLINE void causal_forward_rows(const FeatureProblem& p, int64_t t_begin, const T* q,
                                        const T* k, const T* v, const bool* keep, T* y, T* den,
                                        T* fq, T* fk, T* block, T* state, T* z) {
  const int64_t n = p.n, e = p.e, m = p.features(), C = kFeatureChunk;
  for (int64_t t0 = t_begin; t0 < n; t0 += C) {
    const int64_t c = std::min(C, n - t0);
    const T* vc = v + t0 * e;
    T* yc = y + t0 * e;
    T* dc = den + t0;
    feature_rows(p, q, t0, c, fq);
    feature_rows(p, k, t0, c, fk);
    drop_padded_rows(keep, t0, c, m, fk);
    // Earlier chunks through the state.
    gemm(false, false, c, e, m, T(1), fq, m, state, e, T(0), yc, e);
    for (int64_t i = 0; i < c; ++i) dc[i] = dot(fq + i * m, z, m);
    // Inside the chunk: the masked block of scores.
    gemm(false, true, c, c, m, T(1), fq, m, fk, m, T(0), block, c);
    keep_triangle(block, c, /*upper=*/false);
    for (int64_t i = 0; i < c; ++i) {
      T acc = 0;  // the row's masked part is already zero
      for (int64_t j = 0; j < c; ++j) acc += block[i * c + j];
      dc[i] += acc;
    }
    gemm(false, false, c, e, c, T(1), block, c, vc, e, T(1), yc, e);
    // Fold the chunk into the state.
    gemm(true, false, m, e, c, T(1), fk, m, vc, e, T(1), state, e);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) z[j] += fk[i * m + j];
    for (int64_t i = 0; i < c; ++i) {
      const T D = denominator(p, dc[i]);
      for (int64_t j = 0; j < e; ++j) yc[i * e + j] /= D;
    }
  }
}

template <typename T>
ATTNKIT_INLINE void feature_forward_impl(const FeatureProblem& p, const T* q, const T* k,
                                         const T* v, T* y, T* den, T* workspace) {
  const int64_t e = p.e, m = p.features(), C = kFeatureChunk;
  T* fq = workspace;        // [C × m]
  T* fk = fq + C * m;       // [C × m]
  T* block = fk + C * m;    // [C × C]
  T* state = block + C * C; // Σ φk_s v_sᵀ over earlier chunks [m × e]
  T* z = state + m * e;     // Σ φk_s over earlier chunks [m]
  std::fill(state, state + m * e + m, T(0));
  causal_forward_rows(p, 0, q, k, v, static_cast<const bool*>(nullptr), y, den, fq, fk, block,
                      state, z);
}

// Rows [t0, t0 + c) of the gradients reaching the numerator, gn = g / D [c × e], and the raw
// denominator, gd = −(g·y) / D [c] (0 where the denominator was clamped).
template <typename T>
ATTNKIT_INLINE void output_gradient_rows(const FeatureProblem& p, const T* y, const T* den,
                                         const T* g, int64_t t0, int64_t c, T* gn, T* gd) {
  const int64_t e = p.e;
  const T eps = static_cast<T>(p.eps);
  for (int64_t i = 0; i < c; ++i) {
    const int64_t t = t0 + i;
    const T D = denominator(p, den[t]);
    for (int64_t j = 0; j < e; ++j) gn[i * e + j] = g[t * e + j] / D;
    gd[i] = p.clamp && den[t] < eps ? T(0) : -dot(g + t * e, y + t * e, e) / D;
  }
}

// Per causal backward chunk: the features of q and k (padded keys zeroed) and the
// output-gradient pair.
template <typename T>
ATTNKIT_INLINE void backward_chunk_inputs(const FeatureProblem& p, const T* q, const T* k,
                                          const bool* keep, const T* y, const T* den, const T* g,
                                          int64_t t0, int64_t c, T* fq, T* fk, T* gn, T* gd) {
  feature_rows(p, q, t0, c, fq);
  feature_rows(p, k, t0, c, fk);
  drop_padded_rows(keep, t0, c, p.features(), fk);
  output_gradient_rows(p, y, den, g, t0, c, gn, gd);
}

// The scratch of one causal backward pass.
template <typename T>
struct CausalBackwardScratch {
  T *fq, *fk, *df, *block, *gn, *gd, *state, *z;
};

template <typename T>
ATTNKIT_INLINE CausalBackwardScratch<T> causal_backward_scratch(const FeatureProblem& p,
                                                                T* workspace) {
  const int64_t e = p.e, m = p.features(), C = kFeatureChunk;
  CausalBackwardScratch<T> w;
  w.fq = workspace;         // [C × m]
  w.fk = w.fq + C * m;      // [C × m]
  w.df = w.fk + C * m;      // feature gradient [C × m]
  w.block = w.df + C * m;   // [C × C]
  w.gn = w.block + C * C;   // ∂L/∂numerator = g / D [C × e]
  w.gd = w.gn + C * e;      // ∂L/∂(raw denominator) = −(g·y) / D, 0 where clamped [C]
  w.state = w.gd + C;       // [m × e]
  w.z = w.state + m * e;    // [m]
  return w;
}

// Forward in time over rows [t_begin, n): ∂L/∂φq_t = Σ_{s<=t} (gn_t·v_s + gd_t) φk_s plus what
// w.state (Σ φk_s v_sᵀ) and w.z (Σ φk_s) hold on entry (zero, or the prefix summary) -> dq rows.
template <typename T>
ATTNKIT_INLINE void causal_query_pass(const FeatureProblem& p, int64_t t_begin, const T* q,
                                      const T* k, const T* v, const bool* keep, const T* y,
                                      const T* den, const T* g, T* dq,
                                      const CausalBackwardScratch<T>& w) {
  const int64_t n = p.n, e = p.e, m = p.features(), C = kFeatureChunk;
  T *fq = w.fq, *fk = w.fk, *df = w.df, *block = w.block, *gn = w.gn, *gd = w.gd,
    *state = w.state, *z = w.z;
  for (int64_t t0 = t_begin; t0 < n; t0 += C) {
    const int64_t c = std::min(C, n - t0);
    const T* vc = v + t0 * e;
    backward_chunk_inputs(p, q, k, keep, y, den, g, t0, c, fq, fk, gn, gd);
    gemm(false, true, c, m, e, T(1), gn, e, state, e, T(0), df, m);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) df[i * m + j] += gd[i] * z[j];
    gemm(false, true, c, c, e, T(1), gn, e, vc, e, T(0), block, c);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j <= i; ++j) block[i * c + j] += gd[i];
    keep_triangle(block, c, /*upper=*/false);
    gemm(false, false, c, m, c, T(1), block, c, fk, m, T(1), df, m);
    gemm(true, false, m, e, c, T(1), fk, m, vc, e, T(1), state, e);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) z[j] += fk[i * m + j];
    feature_grad_rows(p, q, t0, c, fq, df, dq);
  }
}

// Reversed over rows [t_begin, n): ∂L/∂φk_s = Σ_{t>=s} (gn_t·v_s + gd_t) φq_t and
// ∂L/∂v_s = Σ_{t>=s} (φk_s·φq_t) gn_t (zero for padded keys) -> dk, dv rows. w.state and w.z
// start at zero and end as Σ_{t>=t_begin} φq_t gn_tᵀ and Σ_{t>=t_begin} φq_t gd_t.
template <typename T>
ATTNKIT_INLINE void causal_key_pass(const FeatureProblem& p, int64_t t_begin, const T* q,
                                    const T* k, const T* v, const bool* keep, const T* y,
                                    const T* den, const T* g, T* dk, T* dv,
                                    const CausalBackwardScratch<T>& w) {
  const int64_t n = p.n, e = p.e, m = p.features(), C = kFeatureChunk;
  T *fq = w.fq, *fk = w.fk, *df = w.df, *block = w.block, *gn = w.gn, *gd = w.gd,
    *state = w.state, *z = w.z;
  std::fill(state, state + m * e + m, T(0));
  const int64_t chunks = (n - t_begin + C - 1) / C;
  for (int64_t ci = chunks - 1; ci >= 0; --ci) {
    const int64_t t0 = t_begin + ci * C, c = std::min(C, n - t0);
    const T* vc = v + t0 * e;
    T* dvc = dv + t0 * e;
    backward_chunk_inputs(p, q, k, keep, y, den, g, t0, c, fq, fk, gn, gd);
    gemm(false, true, c, m, e, T(1), vc, e, state, e, T(0), df, m);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) df[i * m + j] += z[j];
    gemm(false, false, c, e, m, T(1), fk, m, state, e, T(0), dvc, e);
    // block[s, t] = v_s·gn_t + gd_t for t >= s.
    gemm(false, true, c, c, e, T(1), vc, e, gn, e, T(0), block, c);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = i; j < c; ++j) block[i * c + j] += gd[j];
    keep_triangle(block, c, /*upper=*/true);
    gemm(false, false, c, m, c, T(1), block, c, fq, m, T(1), df, m);
    drop_padded_rows(keep, t0, c, m, df);
    // block[s, t] = φk_s·φq_t for t >= s.
    gemm(false, true, c, c, m, T(1), fk, m, fq, m, T(0), block, c);
    keep_triangle(block, c, /*upper=*/true);
    gemm(false, false, c, e, c, T(1), block, c, gn, e, T(1), dvc, e);
    gemm(true, false, m, e, c, T(1), fq, m, gn, e, T(1), state, e);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) z[j] += fq[i * m + j] * gd[i];
    feature_grad_rows(p, k, t0, c, fk, df, dk);
  }
}

template <typename T>
ATTNKIT_INLINE void feature_backward_impl(const FeatureProblem& p, const T* q, const T* k,
                                          const T* v, const T* y, const T* den, const T* g, T* dq,
                                          T* dk, T* dv, T* workspace) {
  const auto w = causal_backward_scratch(p, workspace);
  const bool* no_padding = nullptr;
  std::fill(w.state, w.state + p.features() * p.e + p.features(), T(0));
  causal_query_pass(p, 0, q, k, v, no_padding, y, den, g, dq, w);
  causal_key_pass(p, 0, q, k, v, no_padding, y, den, g, dk, dv, w);
}

// state [m × e] = Σ_s φk_s v_sᵀ and z [m] = Σ_s φk_s over all (kept) keys, chunk by chunk.
template <typename T>
ATTNKIT_INLINE void key_summary(const FeatureProblem& p, int64_t S, const T* k, const T* v,
                                const bool* keep, T* fk, T* state, T* z) {
  const int64_t e = p.e, m = p.features(), C = kFeatureChunk;
  std::fill(state, state + m * e, T(0));
  std::fill(z, z + m, T(0));
  for (int64_t s0 = 0; s0 < S; s0 += C) {
    const int64_t c = std::min(C, S - s0);
    feature_rows(p, k, s0, c, fk);
    drop_padded_rows(keep, s0, c, m, fk);
    gemm(true, false, m, e, c, T(1), fk, m, v + s0 * e, e, T(1), state, e);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) z[j] += fk[i * m + j];
  }
}

template <typename T>
ATTNKIT_INLINE void non_causal_forward_impl(const FeatureProblem& p, int64_t S, const T* q,
                                            const T* k, const T* v, const bool* keep, T* y,
                                            T* den, T* workspace) {
  const int64_t n = p.n, e = p.e, m = p.features(), C = kFeatureChunk;
  T* f = workspace;        // [C × m]
  T* state = f + C * m;    // [m × e]
  T* z = state + m * e;    // [m]
  key_summary(p, S, k, v, keep, f, state, z);
  for (int64_t t0 = 0; t0 < n; t0 += C) {
    const int64_t c = std::min(C, n - t0);
    T* yc = y + t0 * e;
    feature_rows(p, q, t0, c, f);
    gemm(false, false, c, e, m, T(1), f, m, state, e, T(0), yc, e);
    for (int64_t i = 0; i < c; ++i) {
      den[t0 + i] = dot(f + i * m, z, m);
      const T D = denominator(p, den[t0 + i]);
      for (int64_t j = 0; j < e; ++j) yc[i * e + j] /= D;
    }
  }
}

template <typename T>
ATTNKIT_INLINE void non_causal_backward_impl(const FeatureProblem& p, int64_t S, const T* q,
                                             const T* k, const T* v, const bool* keep, const T* y,
                                             const T* den, const T* g, T* dq, T* dk, T* dv,
                                             T* workspace) {
  const int64_t n = p.n, e = p.e, m = p.features(), C = kFeatureChunk;
  T* f = workspace;         // [C × m]
  T* df = f + C * m;        // [C × m]
  T* gn = df + C * m;       // [C × e]
  T* gd = gn + C * e;       // [C]
  T* state = gd + C;        // Σ φk vᵀ [m × e]
  T* z = state + m * e;     // Σ φk [m]
  T* dstate = z + m;        // Σ_t φq_t gn_tᵀ [m × e]
  T* dz = dstate + m * e;   // Σ_t φq_t gd_t [m]
  key_summary(p, S, k, v, keep, f, state, z);
  std::fill(dstate, dstate + m * e + m, T(0));
  // Queries: ∂L/∂φq_t = state gn_t + z gd_t; accumulate the state gradients.
  for (int64_t t0 = 0; t0 < n; t0 += C) {
    const int64_t c = std::min(C, n - t0);
    feature_rows(p, q, t0, c, f);
    output_gradient_rows(p, y, den, g, t0, c, gn, gd);
    gemm(false, true, c, m, e, T(1), gn, e, state, e, T(0), df, m);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) df[i * m + j] += gd[i] * z[j];
    gemm(true, false, m, e, c, T(1), f, m, gn, e, T(1), dstate, e);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) dz[j] += f[i * m + j] * gd[i];
    feature_grad_rows(p, q, t0, c, f, df, dq);
  }
  // Keys: ∂L/∂φk_s = dstate v_s + dz, ∂L/∂v_s = dstateᵀ φk_s (zero for padded keys).
  for (int64_t s0 = 0; s0 < S; s0 += C) {
    const int64_t c = std::min(C, S - s0);
    feature_rows(p, k, s0, c, f);
    drop_padded_rows(keep, s0, c, m, f);
    gemm(false, true, c, m, e, T(1), v + s0 * e, e, dstate, e, T(0), df, m);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) df[i * m + j] += dz[j];
    drop_padded_rows(keep, s0, c, m, df);
    gemm(false, false, c, e, m, T(1), f, m, dstate, e, T(0), dv + s0 * e, e);
    feature_grad_rows(p, k, s0, c, f, df, dk);
  }
}

// Prefix attention (one sequence, L = S = n, prefix length P in [0, n]): query t < P sees the
// keys s < P, query t >= P the keys s < P and P..t; padded keys (keep false) are never seen.
// The forward runs the prefix summary (Σ_{s<P} φk_s v_sᵀ, Σ_{s<P} φk_s), the prefix queries
// against it, and the causal chunks of rows P..n-1 started from it.
template <typename T>
ATTNKIT_INLINE void prefix_forward_impl(const FeatureProblem& p, int64_t P, const T* q, const T* k,
                                        const T* v, const bool* keep, T* y, T* den, T* workspace) {
  const int64_t e = p.e, m = p.features(), C = kFeatureChunk;
  T* fq = workspace;        // [C × m]
  T* fk = fq + C * m;       // [C × m]
  T* block = fk + C * m;    // [C × C]
  T* state = block + C * C; // [m × e]
  T* z = state + m * e;     // [m]
  key_summary(p, P, k, v, keep, fk, state, z);
  for (int64_t t0 = 0; t0 < P; t0 += C) {
    const int64_t c = std::min(C, P - t0);
    T* yc = y + t0 * e;
    feature_rows(p, q, t0, c, fq);
    gemm(false, false, c, e, m, T(1), fq, m, state, e, T(0), yc, e);
    for (int64_t i = 0; i < c; ++i) {
      den[t0 + i] = dot(fq + i * m, z, m);
      const T D = denominator(p, den[t0 + i]);
      for (int64_t j = 0; j < e; ++j) yc[i * e + j] /= D;
    }
  }
  causal_forward_rows(p, P, q, k, v, keep, y, den, fq, fk, block, state, z);
}

// The backward of prefix_forward_impl: (1) the prefix summary and the prefix queries' dq, while
// summing what they ask of the prefix keys (Σ φq_t gn_tᵀ, Σ φq_t gd_t); (2) the causal query
// pass over rows P..n-1 from the prefix summary; (3) the reversed causal key pass over rows
// P..n-1, which ends holding what the causal queries ask of the prefix keys; (4) the prefix keys'
// dk and dv from both sums.
template <typename T>
ATTNKIT_INLINE void prefix_backward_impl(const FeatureProblem& p, int64_t P, const T* q,
                                         const T* k, const T* v, const bool* keep, const T* y,
                                         const T* den, const T* g, T* dq, T* dk, T* dv,
                                         T* workspace) {
  const int64_t e = p.e, m = p.features(), C = kFeatureChunk;
  const auto w = causal_backward_scratch(p, workspace);
  T* dstate = workspace + feature_attention_workspace(p);  // Σ_t φq_t gn_tᵀ [m × e]
  T* dz = dstate + m * e;                                  // Σ_t φq_t gd_t [m]
  key_summary(p, P, k, v, keep, w.fk, w.state, w.z);
  std::fill(dstate, dstate + m * e + m, T(0));
  for (int64_t t0 = 0; t0 < P; t0 += C) {
    const int64_t c = std::min(C, P - t0);
    feature_rows(p, q, t0, c, w.fq);
    output_gradient_rows(p, y, den, g, t0, c, w.gn, w.gd);
    gemm(false, true, c, m, e, T(1), w.gn, e, w.state, e, T(0), w.df, m);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) w.df[i * m + j] += w.gd[i] * w.z[j];
    gemm(true, false, m, e, c, T(1), w.fq, m, w.gn, e, T(1), dstate, e);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) dz[j] += w.fq[i * m + j] * w.gd[i];
    feature_grad_rows(p, q, t0, c, w.fq, w.df, dq);
  }
  causal_query_pass(p, P, q, k, v, keep, y, den, g, dq, w);
  causal_key_pass(p, P, q, k, v, keep, y, den, g, dk, dv, w);
  for (int64_t j = 0; j < m * e + m; ++j) dstate[j] += w.state[j];  // dz follows dstate
  // Prefix keys: ∂L/∂φk_s = dstate v_s + dz, ∂L/∂v_s = dstateᵀ φk_s (zero for padded keys).
  for (int64_t s0 = 0; s0 < P; s0 += C) {
    const int64_t c = std::min(C, P - s0);
    feature_rows(p, k, s0, c, w.fk);
    drop_padded_rows(keep, s0, c, m, w.fk);
    gemm(false, true, c, m, e, T(1), v + s0 * e, e, dstate, e, T(0), w.df, m);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < m; ++j) w.df[i * m + j] += dz[j];
    drop_padded_rows(keep, s0, c, m, w.df);
    gemm(false, false, c, e, m, T(1), w.fk, m, dstate, e, T(0), dv + s0 * e, e);
    feature_grad_rows(p, k, s0, c, w.fk, w.df, dk);
  }
}

}  // namespace

size_t prefix_workspace(const FeatureProblem& p) {
  const int64_t m = p.features();
  return feature_attention_workspace(p) + static_cast<size_t>(m * p.e + m);
}

size_t non_causal_workspace(const FeatureProblem& p) {
  const int64_t C = kFeatureChunk, m = p.features();
  return static_cast<size_t>(2 * C * m + C * p.e + C + 2 * (m * p.e + m));
}

#define ATTNKIT_FEATURE_ENTRIES(T)                                                                \
  ATTNKIT_KERNEL_ENTRY(prefix_feature_attention_forward, prefix_forward_impl,                     \
                       (const FeatureProblem& p, int64_t P, const T* q, const T* k, const T* v,   \
                        const bool* keep, T* y, T* den, T* workspace),                            \
                       (p, P, q, k, v, keep, y, den, workspace))                                  \
  ATTNKIT_KERNEL_ENTRY(prefix_feature_attention_backward, prefix_backward_impl,                   \
                       (const FeatureProblem& p, int64_t P, const T* q, const T* k, const T* v,   \
                        const bool* keep, const T* y, const T* den, const T* g, T* dq, T* dk,     \
                        T* dv, T* workspace),                                                     \
                       (p, P, q, k, v, keep, y, den, g, dq, dk, dv, workspace))                   \
  ATTNKIT_KERNEL_ENTRY(feature_attention_forward, non_causal_forward_impl,                        \
                       (const FeatureProblem& p, int64_t S, const T* q, const T* k, const T* v,   \
                        const bool* keep, T* y, T* den, T* workspace),                            \
                       (p, S, q, k, v, keep, y, den, workspace))                                  \
  ATTNKIT_KERNEL_ENTRY(feature_attention_backward, non_causal_backward_impl,                      \
                       (const FeatureProblem& p, int64_t S, const T* q, const T* k, const T* v,   \
                        const bool* keep, const T* y, const T* den, const T* g, T* dq, T* dk,     \
                        T* dv, T* workspace),                                                     \
                       (p, S, q, k, v, keep, y, den, g, dq, dk, dv, workspace))                   \
  ATTNKIT_KERNEL_ENTRY(causal_feature_attention_forward, feature_forward_impl,                    \
                       (const FeatureProblem& p, const T* q, const T* k, const T* v, T* y, T* den, \
                        T* workspace),                                                            \
                       (p, q, k, v, y, den, workspace))                                           \
  ATTNKIT_KERNEL_ENTRY(causal_feature_attention_backward, feature_backward_impl,                  \
                       (const FeatureProblem& p, const T* q, const T* k, const T* v, const T* y,  \
                        const T* den, const T* g, T* dq, T* dk, T* dv, T* workspace),             \
                       (p, q, k, v, y, den, g, dq, dk, dv, workspace))

ATTNKIT_FEATURE_ENTRIES(float)
ATTNKIT_FEATURE_ENTRIES(double)
#undef ATTNKIT_FEATURE_ENTRIES

}  // namespace attnkit::ops::cpu
