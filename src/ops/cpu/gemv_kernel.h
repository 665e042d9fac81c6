#pragma once
// Matrix-vector product for one-row dense layers (decoding one sequence):
//   y[r] = bias[r] + Σ_i W[r, i] · x[i]        for r in [row_begin, row_end)
// W row-major with leading dimension ldw (a torch::nn::Linear weight [out, in] as stored), bias
// may be null. Each call streams its rows of W once, 8 rows at a time (AVX-512; 4 for AVX2 and
// SSE) against one x held in registers and L1; the caller splits the rows over threads. No BLAS:
// a one-row sgemm in Debian's OpenBLAS packs the whole weight first, and its gemv runs on
// OpenBLAS's own pthread pool beside LibTorch's OpenMP pool (two pools of spinning workers on the
// same cores). No LibTorch here; compiled with runtime dispatch to AVX-512 / AVX2 / baseline
// copies (kernel_isa.h).
#include <cstdint>

namespace attnkit::ops::cpu {

void gemv_rows(const float* W, int64_t ldw, const float* x, int64_t in, const float* bias,
               float* y, int64_t row_begin, int64_t row_end);

}  // namespace attnkit::ops::cpu
