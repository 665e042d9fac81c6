#include "blas.h"

#include "kernel_isa.h"
#include "attnkit/error.h"
#include "attnkit/runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#ifdef ATTNKIT_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
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

#ifdef ATTNKIT_WITH_ONEDNN
constexpr bool kHaveOnednn = true;
#else
constexpr bool kHaveOnednn = false;
#endif

// ATTNKIT_GEMM, read once (gemm_library() in blas.h).
bool choose_onednn() {
  const char* text = std::getenv("ATTNKIT_GEMM");
  const std::string value = text == nullptr ? "" : text;
  // auto: oneDNN where its AVX-512 kernels run (1.4-1.9x OpenBLAS 0.3.21's Haswell kernels on Zen
  // 5); held to AVX2 it is within -9%..+8% of OpenBLAS (docs/benchmarks.md), so the BLAS stays.
  const KernelIsa isa = kernel_isa();
  bool onednn = kHaveOnednn && isa == KernelIsa::Avx512;
  if (value == "blas") {
    onednn = false;
  } else if (value == "onednn") {
    if (!kHaveOnednn) throw Error("ATTNKIT_GEMM=onednn: this build has no oneDNN (it runs on BLAS)");
    onednn = true;
  } else if (!value.empty() && value != "auto") {
    throw Error("ATTNKIT_GEMM: unknown value '" + value + "'; use onednn, blas or auto");
  }
#ifdef ATTNKIT_WITH_ONEDNN
  // Held to the kernels' lower copy: before oneDNN's first kernel, and only where neither of its
  // own variables chose already (it reads them itself).
  if (onednn && static_cast<int>(isa) < static_cast<int>(best_kernel_isa()) &&
      std::getenv("ONEDNN_MAX_CPU_ISA") == nullptr && std::getenv("DNNL_MAX_CPU_ISA") == nullptr)
    dnnl_set_max_cpu_isa(isa == KernelIsa::Avx2 ? dnnl_cpu_isa_avx2 : dnnl_cpu_isa_sse41);
#endif
  return onednn;
}

// oneDNN generates each kind of kernel the first time a process needs it (2.5 ms for the first
// N·Tᵀ product here, 19 ms for the first N·N, 1.3 ms for the first of 8 rows: 17-19 ms of a
// 0.2 s Marian sentence). Below this many multiply-adds a product takes the BLAS: its kernels are
// compiled already, and there oneDNN's faster kernels would save microseconds. The linear and
// cosFormer kernels' 64-token chunks (64·64·64 and up) stay above it: oneDNN made them 1.4-1.6x
// faster, and 2^20 here lost that.
constexpr int64_t kOnednnMinWork = int64_t{1} << 17;

bool use_onednn() {
  static const bool onednn = choose_onednn();
  return onednn;
}

// C = alpha·op(A)·op(B) + beta·C when op(A)·op(B) is empty (K = 0): BLAS scales C, and never
// reads it when beta is 0.
template <typename T>
void scale_only(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

}  // namespace

const char* gemm_library() { return use_onednn() ? "onednn" : "blas"; }

// The Python package's build (setup.py) defines ATTNKIT_GEMM_ATEN and takes gemm() from
// src/torch_ops/package_gemm.cpp (through ATen: a wheel's static MKL need not export sgemm_).
#ifndef ATTNKIT_GEMM_ATEN
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_only(M, N, beta, C, ldc);
#ifdef ATTNKIT_WITH_ONEDNN
  if (use_onednn() && M * N * K >= kOnednnMinWork) {
    // Row-major like ours. Inside a parallel region (the kernels' tiles) it runs on the calling
    // thread; outside, on LibTorch's OpenMP threads.
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                                            A, lda, B, ldb, beta, C, ldc);
    if (status != dnnl_success)
      throw Error("oneDNN sgemm failed (status " + std::to_string(static_cast<int>(status)) + ")");
    return;
  }
#endif
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

std::string gemm_library_name() { return ops::cpu::gemm_library(); }

void set_blas_threads(int threads) {
  if (threads > 0 && ops::cpu::openblas_set() && !ops::cpu::openblas_on_openmp())
    ops::cpu::openblas_set()(threads);
}

namespace {
std::mutex large_blocks_mutex;
bool heap_keeps_large_blocks = false;  // reuse_freed_memory ran
int large_blocks_mapped_scopes = 0;
}  // namespace

LargeBlocksMapped::LargeBlocksMapped() {
#if defined(__GLIBC__)
  std::lock_guard<std::mutex> lock(large_blocks_mutex);
  if (heap_keeps_large_blocks && large_blocks_mapped_scopes++ == 0) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_MMAP_MAX, 1 << 16);  // glibc's default count
  }
#endif
}

LargeBlocksMapped::~LargeBlocksMapped() {
#if defined(__GLIBC__)
  std::lock_guard<std::mutex> lock(large_blocks_mutex);
  if (heap_keeps_large_blocks && --large_blocks_mapped_scopes == 0) mallopt(M_MMAP_MAX, 0);
#endif
}

void reuse_freed_memory() {
#if defined(__GLIBC__)
  {
    std::lock_guard<std::mutex> lock(large_blocks_mutex);
    heap_keeps_large_blocks = true;
  }
  // glibc caps M_MMAP_THRESHOLD at 32 MiB, so blocks above it would still be fresh mmaps: turn
  // mmap-backed allocation off instead (large blocks then come from the brk heap, which a thread
  // arena falls back to as well) and keep up to 1 GiB of freed memory at the heap's top.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace attnkit
