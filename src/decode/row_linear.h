#pragma once
// Dense layers for decoding, private to src/decode/.
//
// Decoding one sequence feeds one row per step. at::linear on one row calls BLAS sgemm, and the
// OpenBLAS Debian 12 ships (0.3.21) packs the whole weight matrix into a buffer before it
// multiplies: the weights are read twice and written once per call (measured: 3.4 ms for a
// 3072 × 768 layer against 0.18 ms for the matrix-vector product on the same machine). One float
// row therefore goes through attnkit's gemv kernel (ops/cpu/gemv_kernel.h), its output rows split
// over LibTorch's threads (ops/cpu/parallel.h), so a decode step wakes one thread pool rather
// than LibTorch's and OpenBLAS's both; other dtypes take at::addmv; more rows keep at::linear
// (sgemm amortises the packing over the rows).
#include "../ops/cpu/gemv_kernel.h"
#include "../ops/cpu/parallel.h"
#include "attnkit/layers/feed_forward.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <vector>

namespace attnkit::decode {

// Output rows per task of the parallel gemv: a few tens of KiB of weights at hidden sizes of
// hundreds, so a 768 × 768 layer still splits over two threads.
constexpr int64_t kGemvGrain = 64;

struct DenseLayer {
  at::Tensor weight, bias;  // [out, in], [out] or undefined
};

// Whether `x` is one row that the gemv kernel takes for every layer: float32 weights and bias,
// nothing to differentiate.
inline bool gemv_applies(const at::Tensor& x, const std::vector<DenseLayer>& layers) {
  if (x.dim() < 1 || x.scalar_type() != at::kFloat) return false;
  const bool grad_mode = at::GradMode::is_enabled();
  if (grad_mode && x.requires_grad()) return false;
  for (const auto& l : layers) {
    const int64_t in = l.weight.size(1);
    if (x.numel() != in || x.size(-1) != in || l.weight.scalar_type() != at::kFloat) return false;
    if (l.bias.defined() && l.bias.scalar_type() != at::kFloat) return false;
    if (grad_mode && (l.weight.requires_grad() || (l.bias.defined() && l.bias.requires_grad())))
      return false;
  }
  return true;
}

// weight_i [out_i, in] · row [in] + bias_i for every layer, in one parallel region whose tasks
// split the layers' output rows (q, k and v of one attention wake the threads once).
inline std::vector<at::Tensor> gemv_float(const std::vector<DenseLayer>& layers, const at::Tensor& row) {
  struct Segment {
    at::Tensor w, b, y;
    const float* wp;
    const float* bp;
    float* yp;
    int64_t ldw, first;  // first: the segment's first row in the concatenated numbering
  };
  const at::Tensor x = row.contiguous();
  const int64_t in = x.numel();
  std::vector<Segment> segments;
  int64_t total = 0;
  for (const auto& l : layers) {
    Segment s;
    s.w = l.weight.stride(1) == 1 ? l.weight : l.weight.contiguous();
    s.b = l.bias.defined() ? l.bias.contiguous() : l.bias;
    s.y = at::empty({l.weight.size(0)}, x.options());
    s.wp = s.w.data_ptr<float>();
    s.bp = s.b.defined() ? s.b.data_ptr<float>() : nullptr;
    s.yp = s.y.data_ptr<float>();
    s.ldw = s.w.stride(0);
    s.first = total;
    total += l.weight.size(0);
    segments.push_back(std::move(s));
  }
  const float* xp = x.data_ptr<float>();
  ops::cpu::parallel_for(0, total, kGemvGrain, [&](int64_t begin, int64_t end) {
    for (const auto& s : segments) {
      const int64_t lo = std::max(begin, s.first) - s.first;
      const int64_t hi = std::min(end, s.first + s.y.numel()) - s.first;
      if (lo < hi) ops::cpu::gemv_rows(s.wp, s.ldw, xp, in, s.bp, s.yp, lo, hi);
    }
  });
  std::vector<at::Tensor> out;
  for (auto& s : segments) out.push_back(std::move(s.y));
  return out;
}

// x [..., in] · weight_iᵀ + bias_i for each layer -> [..., out_i].
inline std::vector<at::Tensor> linear_rows(const at::Tensor& x, const std::vector<DenseLayer>& layers) {
  std::vector<at::Tensor> out;
  const auto shaped = [&](const at::Tensor& y, int64_t size) {
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = size;
    return y.view(sizes);
  };
  if (gemv_applies(x, layers)) {
    auto ys = gemv_float(layers, x.reshape({x.numel()}));
    for (size_t i = 0; i < ys.size(); ++i) out.push_back(shaped(ys[i], layers[i].weight.size(0)));
    return out;
  }
  for (const auto& l : layers) {
    const int64_t in = l.weight.size(1);
    if (x.dim() >= 1 && x.numel() == in && x.size(-1) == in &&
        x.scalar_type() == l.weight.scalar_type()) {
      at::Tensor r = x.reshape({in});
      at::Tensor y = l.bias.defined() ? at::addmv(l.bias, l.weight, r) : at::mv(l.weight, r);
      out.push_back(shaped(y, l.weight.size(0)));
    } else {
      out.push_back(at::linear(x, l.weight, l.bias));
    }
  }
  return out;
}

// x [..., in] · weightᵀ + bias (bias may be undefined) -> [..., out].
inline at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& bias) {
  return linear_rows(x, std::vector<DenseLayer>{{weight, bias}})[0];
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
