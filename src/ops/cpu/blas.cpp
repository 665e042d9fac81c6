#include "blas.h"

#include "attnkit/runtime.h"

#include <dlfcn.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#ifndef ATTNKIT_GEMM_ATEN
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
            const double* beta, double* c, const int* ldc);
}
#endif

namespace attnkit::ops::cpu {

namespace {

#ifndef ATTNKIT_GEMM_ATEN
// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands, keep the flags.
template <typename T, typename Fn>
void gemm_row_major(Fn fortran_gemm, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    T alpha, const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C,
                    int64_t ldc) {
  if (M == 0 || N == 0) return;
  const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  fortran_gemm(&ta, &tb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
}
#endif

using SetThreads = void (*)(int);
using GetThreads = int (*)();

SetThreads openblas_set() {
  static auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  return fn;
}
GetThreads openblas_get() {
  static auto fn = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn;
}

// OpenBLAS built for OpenMP (openblas_get_parallel() == 2, libopenblas0-openmp) runs on libgomp's
// threads, LibTorch's: inside a parallel region each call already stays on its thread, and its
// openblas_set_num_threads is omp_set_num_threads, which would make the parallel loops of LibTorch
// and attnkit serial as well. Its thread count is therefore left to LibTorch's.
bool openblas_on_openmp() {
  static const bool on_openmp = [] {
    auto fn = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    return fn && fn() == 2;
  }();
  return on_openmp;
}

}  // namespace

// The Python package's build (setup.py) defines ATTNKIT_GEMM_ATEN and takes gemm() from
// src/torch_ops/package_gemm.cpp (through ATen: a wheel's static MKL need not export sgemm_).
#ifndef ATTNKIT_GEMM_ATEN
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  gemm_row_major(sgemm_, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
          const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc) {
  gemm_row_major(dgemm_, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#endif

SingleThreadedBlas::SingleThreadedBlas() {
  if (openblas_set() && openblas_get() && !openblas_on_openmp()) {
    previous_ = openblas_get()();
    openblas_set()(1);
  }
}

SingleThreadedBlas::~SingleThreadedBlas() {
  if (previous_ > 0) openblas_set()(previous_);
}

}  // namespace attnkit::ops::cpu

namespace attnkit {

void set_blas_threads(int threads) {
  if (threads > 0 && ops::cpu::openblas_set() && !ops::cpu::openblas_on_openmp())
    ops::cpu::openblas_set()(threads);
}

void reuse_freed_memory() {
#if defined(__GLIBC__)
  // glibc caps M_MMAP_THRESHOLD at 32 MiB, so blocks above it would still be fresh mmaps: turn
  // mmap-backed allocation off instead (large blocks then come from the brk heap, which a thread
  // arena falls back to as well) and keep up to 1 GiB of freed memory at the heap's top.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace attnkit
