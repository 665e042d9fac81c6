#pragma once
// Row-major GEMM on top of the Fortran BLAS that LibTorch itself links (Debian: OpenBLAS through
// the libblas.so.3 alternative), plus a guard that makes OpenBLAS single-threaded while our own
// parallel loop runs, so the two thread pools do not oversubscribe the cores. No LibTorch here.
#include <cstdint>

namespace attnkit::ops::cpu {

// C[M×N] = alpha · op(A) · op(B) + beta · C, all row-major. op(A) is [M×K]: A is stored [M×K]
// (lda) or, with trans_a, [K×M]; likewise op(B) [K×N].
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
          const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc);

// While alive, OpenBLAS (if that is the BLAS in use) runs each call on the calling thread only.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace attnkit::ops::cpu
