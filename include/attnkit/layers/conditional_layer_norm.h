#pragma once
// Layer normalisation, optionally conditional (the bert4keras Conditional LayerNorm): a condition
// vector c [batch, condition_size] shifts the gain and bias through two bias-free dense layers
// that start at zero, y = (γ + W_γ c) ⊙ norm(x) + (β + W_β c), so at initialisation it is exactly
// the plain LayerNorm. condition_size = 0 gives a plain LayerNorm (parameters "weight", "bias").
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <c10/util/Optional.h>

namespace attnkit::layers {

struct ConditionalLayerNormOptions {
  explicit ConditionalLayerNormOptions(int64_t size) : size_(size) {}
  TORCH_ARG(int64_t, size);
  TORCH_ARG(double, eps) = 1e-12;
  TORCH_ARG(int64_t, condition_size) = 0;
};

class ConditionalLayerNormImpl : public torch::nn::Module {
 public:
  explicit ConditionalLayerNormImpl(const ConditionalLayerNormOptions& options);
  // x [batch, n, size]; condition [batch, condition_size] (required iff condition_size > 0).
  at::Tensor forward(const at::Tensor& x, const c10::optional<at::Tensor>& condition = c10::nullopt);
  const ConditionalLayerNormOptions& options() const { return options_; }

  at::Tensor weight, bias;
  torch::nn::Linear condition_to_weight{nullptr}, condition_to_bias{nullptr};

 private:
  ConditionalLayerNormOptions options_;
};
TORCH_MODULE(ConditionalLayerNorm);

}  // namespace attnkit::layers
