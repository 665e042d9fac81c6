#pragma once
// Dense layers for the cached decoding steps (MultiHeadAttentionImpl::step, FeedForwardImpl::step,
// the language-model heads of models/decoding.cpp).
//
// Decoding one sequence feeds one row per step, a batch or a beam search a few. at::linear calls
// BLAS sgemm, and the OpenBLAS Debian 12 ships (0.3.21) packs the whole weight matrix into a
// buffer before it multiplies: the weights are read twice and written once per call (measured:
// 3.4 ms for a 3072 × 768 layer against 0.18 ms for the matrix-vector product on the same machine;
// at 16 rows, 26% of a Marian decoding process in the packing against 14% in the product). Up to
// few_rows_max() float rows therefore go through attnkit's kernels (gemv for one row, the few-row
// kernel for more), which read each weight once per call in place, their output rows split over
// LibTorch's threads, so a decode step wakes one thread pool rather than LibTorch's and
// OpenBLAS's both; one row of another dtype takes at::addmv; more rows (a prefill, the encoder's
// memory) take dense_linear: one GEMM of the kernels' library (oneDNN where the build has it,
// ops/cpu/blas.h).
#include "attnkit/layers/int8_linear.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace torch::nn {
class LinearImpl;
}

namespace attnkit::layers {

struct DenseLayer {
  at::Tensor weight, bias;  // [out, in], [out] or undefined
  Int8Weight int8;          // defined for a quantized layer (int8_linear.h): used instead of weight
};

// A torch::nn::Linear as a DenseLayer, its int8 weight included when it is quantized.
DenseLayer dense_layer(const torch::nn::LinearImpl& layer);

// Rows of x up to which the kernels beat at::linear on the weights of a decoder (one thread,
// bench/few_rows_bench.cpp, docs/decoding.md).
constexpr int64_t kFewRowsMax = 64;

// kFewRowsMax, or the environment's ATTNKIT_DECODE_FEW_ROWS_MAX (read once; 0 sends every row
// count to at::linear, 1 only one row to the kernels: bench/decode_ct2_marian.py --few-rows-max
// compares the paths in one binary). Throws attnkit::Error for a value that is not a count.
int64_t few_rows_max();

// x [..., in] · weightᵀ + bias (bias may be undefined) -> [..., out] as one ops::cpu::gemm
// (oneDNN's sgemm where the build has it) when x, weight and bias are float32 on the CPU; where
// they need gradients, through an autograd function whose backward is two GEMMs of the same
// library (ATen's ops when the backward itself records a graph). at::linear for other dtypes.
// Every dense layer's forward takes it (layers::linear, linear_rows' many rows, the LM heads).
at::Tensor dense_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// One float32 layer for kernel_rows_into: weight [out, in] with leading dimension ldw (unit
// column stride), bias [out] or null, y [rows, out] contiguous, written.
struct KernelRows {
  const float* weight;
  int64_t ldw, out;
  const float* bias;
  float* y;
};
// y_i = x · weight_iᵀ + bias_i for `count` layers, x [rows, in] contiguous, 1 <= rows <=
// few_rows_max(): the kernels (gemv for one row, the few-row kernel for more) in one parallel
// region over the layers' output rows; what linear_rows runs for float32 layers, on raw buffers
// (the fused decoding step, layers/fused_step.h). No checks: the caller's shapes are trusted.
void kernel_rows_into(const float* x, int64_t rows, int64_t in, const KernelRows* layers, size_t count);

// x [..., in] · weight_iᵀ + bias_i for each layer -> [..., out_i]; the kernels take every layer
// in one parallel region (q, k and v of one attention wake the threads once). Quantized layers
// (all or none of them) take int8_linear at any number of rows.
std::vector<at::Tensor> linear_rows(const at::Tensor& x, const std::vector<DenseLayer>& layers);

// x [..., in] · weightᵀ + bias (bias may be undefined) -> [..., out].
at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
at::Tensor linear_rows(const torch::nn::LinearImpl& layer, const at::Tensor& x);

}  // namespace attnkit::layers
