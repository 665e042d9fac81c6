// The kernels' row-major GEMM (src/ops/cpu/blas.h) for the Python package's build, which compiles
// src/ops/cpu/blas.cpp with ATTNKIT_GEMM_ATEN (so that file leaves gemm() to this one): through
// ATen's addmm on tensors viewing the caller's buffers, which reaches whatever BLAS the installed
// torch wheel carries. The CMake build calls the Fortran sgemm_/dgemm_ directly instead, which a
// wheel's statically linked MKL need not export.
#include "ops/cpu/blas.h"

#include <ATen/ATen.h>

#include <type_traits>

namespace attnkit::ops::cpu {

namespace {

// C = alpha·op(A)·op(B) + beta·C in place (beta = 0 ignores C's contents, as BLAS does); a
// transposed operand is a transposed view of its row-major storage.
template <typename T>
void aten_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const auto options =
      at::TensorOptions().dtype(std::is_same_v<T, float> ? at::kFloat : at::kDouble);
  auto view = [&](const T* data, int64_t rows, int64_t cols, int64_t ld, bool trans) {
    auto t = at::from_blob(const_cast<T*>(data), {trans ? cols : rows, trans ? rows : cols},
                           {ld, 1}, options);
    return trans ? t.t() : t;
  };
  auto c = at::from_blob(C, {M, N}, {ldc, 1}, options);
  c.addmm_(view(A, M, K, lda, trans_a), view(B, K, N, ldb, trans_b), beta, alpha);
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  aten_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
          const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc) {
  aten_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace attnkit::ops::cpu
