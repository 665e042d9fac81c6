#include "causal_product_kernel.h"

#include "kernel_isa.h"
#include "small_gemm.h"
#include "vector_math.h"

#include <algorithm>

namespace attnkit::ops::cpu {

size_t causal_product_workspace(int64_t m, int64_t e) {
  // Kᵀ of one chunk [m × C], the masked chunk scores [C × C], the running state [m × e].
  return static_cast<size_t>(m * kCausalChunk + kCausalChunk * kCausalChunk + m * e);
}

namespace {

template <typename T>
inline void causal_product_impl(const T* Q, const T* K, const T* V, T* Y, int64_t n, int64_t m,
                                int64_t e, bool reverse, T* workspace) {
  constexpr int64_t C = kCausalChunk;
  T* kt = workspace;              // [m × c]
  T* scores = kt + m * C;         // [c × c]
  T* state = scores + C * C;      // [m × e]
  std::fill(state, state + m * e, T(0));
  const int64_t chunks = (n + C - 1) / C;
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t chunk = reverse ? chunks - 1 - ci : ci;
    const int64_t t0 = chunk * C;
    const int64_t c = std::min(C, n - t0);
    const T* q = Q + t0 * m;
    const T* k = K + t0 * m;
    const T* v = V + t0 * e;
    T* y = Y + t0 * e;
    // Contribution of every earlier chunk: y = q · state.
    gemm_nn(c, e, m, q, m, state, e, y, e, /*accumulate=*/false);
    // Inside the chunk: y += mask(q kᵀ) v.
    transpose(c, m, k, m, kt);
    gemm_nn(c, c, m, q, m, kt, c, scores, c, /*accumulate=*/false);
    keep_triangle(scores, c, /*upper=*/reverse);
    gemm_nn(c, e, c, scores, c, v, e, y, e, /*accumulate=*/true);
    // Fold the chunk into the state: state += kᵀ v.
    gemm_nn(m, e, c, kt, c, v, e, state, e, /*accumulate=*/true);
  }
}

}  // namespace

ATTNKIT_KERNEL_ENTRY(causal_product, causal_product_impl,
                     (const float* Q, const float* K, const float* V, float* Y, int64_t n,
                      int64_t m, int64_t e, bool reverse, float* workspace),
                     (Q, K, V, Y, n, m, e, reverse, workspace))
ATTNKIT_KERNEL_ENTRY(causal_product, causal_product_impl,
                     (const double* Q, const double* K, const double* V, double* Y, int64_t n,
                      int64_t m, int64_t e, bool reverse, double* workspace),
                     (Q, K, V, Y, n, m, e, reverse, workspace))

}  // namespace attnkit::ops::cpu
