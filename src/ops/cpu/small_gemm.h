#pragma once
// Small row-major matrix products for the fused kernels (blocks of at most a few hundred rows),
// written so that GCC vectorises the innermost loop for whichever ISA the calling function was
// compiled for. Header-only and inline on purpose: each instruction-set copy of a kernel entry
// point (kernel_isa.h) inlines its own vector width. No LibTorch.
#include <algorithm>
#include <cstdint>
#include <cstring>

namespace attnkit::ops::cpu {

// C[M×N] (+)= A[M×K] · B[K×N]; leading dimensions lda, ldb, ldc.
template <typename T>
inline void gemm_nn(int64_t M, int64_t N, int64_t K, const T* __restrict A, int64_t lda,
                    const T* __restrict B, int64_t ldb, T* __restrict C, int64_t ldc,
                    bool accumulate) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) {
    T* __restrict c0 = C + (i + 0) * ldc;
    T* __restrict c1 = C + (i + 1) * ldc;
    T* __restrict c2 = C + (i + 2) * ldc;
    T* __restrict c3 = C + (i + 3) * ldc;
    if (!accumulate) {
      std::memset(c0, 0, sizeof(T) * N);
      std::memset(c1, 0, sizeof(T) * N);
      std::memset(c2, 0, sizeof(T) * N);
      std::memset(c3, 0, sizeof(T) * N);
    }
    for (int64_t k = 0; k < K; ++k) {
      const T a0 = A[(i + 0) * lda + k], a1 = A[(i + 1) * lda + k];
      const T a2 = A[(i + 2) * lda + k], a3 = A[(i + 3) * lda + k];
      const T* __restrict b = B + k * ldb;
      for (int64_t j = 0; j < N; ++j) {
        const T bj = b[j];
        c0[j] += a0 * bj;
        c1[j] += a1 * bj;
        c2[j] += a2 * bj;
        c3[j] += a3 * bj;
      }
    }
  }
  for (; i < M; ++i) {
    T* __restrict c = C + i * ldc;
    if (!accumulate) std::memset(c, 0, sizeof(T) * N);
    for (int64_t k = 0; k < K; ++k) {
      const T a = A[i * lda + k];
      const T* __restrict b = B + k * ldb;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

// dst[c×r] = srcᵀ where src is [r×c] with leading dimension lds.
template <typename T>
inline void transpose(int64_t r, int64_t c, const T* __restrict src, int64_t lds, T* __restrict dst) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) dst[j * r + i] = src[i * lds + j];
}

// Keeps the lower (s <= t, upper = false) or upper (s >= t, upper = true) triangle of a c × c
// block, diagonal included; zeroes the rest. Always inlined: it runs inside the ISA copies.
template <typename T>
__attribute__((always_inline)) inline void keep_triangle(T* block, int64_t c, bool upper) {
  for (int64_t i = 0; i < c; ++i) {
    T* row = block + i * c;
    if (upper)
      std::fill(row, row + i, T(0));
    else
      std::fill(row + i + 1, row + c, T(0));
  }
}

}  // namespace attnkit::ops::cpu
