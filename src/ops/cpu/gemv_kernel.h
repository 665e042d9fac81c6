#pragma once
// Matrix-vector product for one-row dense layers (decoding one sequence):
//   y[r] = bias[r] + Σ_i W[r, i] · x[i]        for r in [row_begin, row_end)
// W row-major with leading dimension ldw (a torch::nn::Linear weight [out, in] as stored), bias
// may be null. Each call streams its rows of W once, 8 rows at a time (AVX-512; 4 for AVX2, 2 for
// SSE), prefetching the next block, against one x held in registers and L1; the caller splits
// the rows over threads. No BLAS: a one-row sgemm in Debian's OpenBLAS packs the whole weight
// first, and its gemv runs on OpenBLAS's own pthread pool beside LibTorch's OpenMP pool (two pools
// of spinning workers on the same cores). No LibTorch here; compiled with runtime dispatch to
// AVX-512 / AVX2 / baseline copies (kernel_isa.h).
#include <cstdint>

namespace attnkit::ops::cpu {

void gemv_rows(const float* W, int64_t ldw, const float* x, int64_t in, const float* bias,
               float* y, int64_t row_begin, int64_t row_end);

// The same for a few rows of x (decoding a batch, or the beams of a beam search):
//   Y[m, r] = bias[r] + Σ_i W[r, i] · X[m, i]     for m in [0, M), r in [row_begin, row_end)
// X [M, in] with leading dimension ldx, Y [M, out] with leading dimension ldy. W is read in place,
// never packed (one-step sgemm in OpenBLAS 0.3.21 re-packs the weight at every call): each block of
// 4 W rows (16 KiB at in = 1024) stays in L1 while every row of X (L1 / L2) is multiplied against
// it, 4 W rows × 4 X rows = 16 vector accumulators (AVX-512; 2 × 4 of 8 floats for AVX2, 2 × 4 of
// 4 for SSE) reduced together at the end. M = 1 is gemv_rows' case (faster there: 512 × 512 in 0.016 ms
// against 0.029 ms for M = 2, bench/few_rows_bench.cpp, one thread, AVX2).
void gemm_few_rows(const float* W, int64_t ldw, const float* X, int64_t ldx, int64_t M,
                   int64_t in, const float* bias, float* Y, int64_t ldy, int64_t row_begin,
                   int64_t row_end);

}  // namespace attnkit::ops::cpu
