#pragma once
// Row-major GEMM: float32 through oneDNN's sgemm where the build has it (ATTNKIT_WITH_ONEDNN: the
// CMake build on Debian's libdnnl, which LibTorch links too) and the kernels run their AVX-512
// copy (gemm_library below); else, and always for float64, through the Fortran BLAS that LibTorch
// itself links (Debian: OpenBLAS through the libblas.so.3 alternative). oneDNN compiles its
// kernels for the CPU at hand; Debian 12's OpenBLAS 0.3.21 runs its Haswell (AVX2) kernels on
// CPUs it does not know, such as Zen 4/5, and wherever OPENBLAS_CORETYPE says so: 1.4-1.9x slower
// there (docs/benchmarks.md, "Float32 GEMM library"). Plus a guard that makes OpenBLAS
// single-threaded while our own parallel loop runs, so the two thread pools do not oversubscribe
// the cores. No LibTorch here.
#include <cstdint>

namespace attnkit::ops::cpu {

// C[M×N] = alpha · op(A) · op(B) + beta · C, all row-major (beta = 0 ignores C's contents).
// With oneDNN as the library, products of fewer than 2^17 multiply-adds (M·N·K) take the BLAS
// (blas.cpp: oneDNN compiles each kernel kind on its first use). op(A) is [M×K]: A is stored [M×K]
// (lda) or, with trans_a, [K×M]; likewise op(B) [K×N].
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
          const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc);

// The library the float32 gemm() runs on: "onednn" or "blas". By default oneDNN where attnkit's
// kernels run their AVX-512 copy (so does oneDNN there), else the BLAS; ATTNKIT_GEMM=onednn or
// blas (auto: the default) chooses, read once; another value throws attnkit::Error. oneDNN chosen
// where ATTNKIT_KERNEL_ISA holds the kernels to a lower copy is held to the same instruction set
// (unless ONEDNN_MAX_CPU_ISA says otherwise).
const char* gemm_library();

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
