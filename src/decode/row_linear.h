#pragma once
// Dense layers for decoding, private to src/decode/.
//
// Decoding one sequence feeds one row per step. at::linear on one row calls BLAS sgemm, and the
// OpenBLAS Debian 12 ships (0.3.21) packs the whole weight matrix into a buffer before it
// multiplies: the weights are read twice and written once per call (measured: 3.4 ms for a
// 3072 × 768 layer against 0.18 ms for the matrix-vector product on the same machine). One row
// therefore goes through gemv (at::addmv), which streams the weights once; more rows keep
// at::linear (sgemm amortises the packing over the rows).
#include "attnkit/layers/feed_forward.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

namespace attnkit::decode {

// x [..., in] · weightᵀ + bias (bias may be undefined) -> [..., out].
inline at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& bias) {
  const int64_t in = weight.size(1);
  if (x.dim() >= 1 && x.numel() == in && x.size(-1) == in &&
      x.scalar_type() == weight.scalar_type()) {
    at::Tensor row = x.reshape({in});
    at::Tensor y = bias.defined() ? at::addmv(bias, weight, row) : at::mv(weight, row);
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = weight.size(0);
    return y.view(sizes);
  }
  return at::linear(x, weight, bias);
}

inline at::Tensor linear_rows(const torch::nn::Linear& layer, const at::Tensor& x) {
  return linear_rows(x, layer->weight, layer->bias);
}

// FeedForwardImpl::forward with linear_rows.
inline at::Tensor feed_forward_rows(layers::FeedForwardImpl& ffn, const at::Tensor& x) {
  at::Tensor h = layers::apply_activation(linear_rows(ffn.fc_in, x), ffn.options().activation());
  return linear_rows(ffn.fc_out, h);
}

}  // namespace attnkit::decode
