#pragma once
// Layer normalisation, optionally conditional (the bert4keras Conditional LayerNorm): a condition
// vector c [batch, condition_size] shifts the gain and bias through two bias-free dense layers
// that start at zero, y = (γ + W_γ c) ⊙ norm(x) + (β + W_β c), so at initialisation it is exactly
// the plain LayerNorm. condition_size = 0 gives a plain LayerNorm (parameters "weight", "bias").
// The Llama families normalise with RMSNorm instead (ops/rms_norm.h; a "weight", no bias, never
// conditional): NormKind says which one a model's norm sites use.
#include "attnkit/ops/rms_norm.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <c10/util/Optional.h>

namespace attnkit::layers {

enum class NormKind {
  LayerNorm,     // weight and bias, optionally conditional
  RmsNorm,       // Llama: weight · x / rms(x), weight initialised to 1
  GemmaRmsNorm,  // Gemma: (1 + weight) · x / rms(x), weight initialised to 0
};
// "layer_norm", "rms_norm", "gemma_rms_norm"; parse throws attnkit::Error listing them.
const char* norm_kind_name(NormKind kind);
NormKind parse_norm_kind(const std::string& name);

struct ConditionalLayerNormOptions {
  explicit ConditionalLayerNormOptions(int64_t size) : size_(size) {}
  TORCH_ARG(int64_t, size);
  TORCH_ARG(double, eps) = 1e-12;
  TORCH_ARG(int64_t, condition_size) = 0;
  TORCH_ARG(NormKind, kind) = NormKind::LayerNorm;  // RMS kinds: condition_size must be 0
};

class ConditionalLayerNormImpl : public torch::nn::Module {
 public:
  explicit ConditionalLayerNormImpl(const ConditionalLayerNormOptions& options);
  // x [batch, n, size]; condition [batch, condition_size] (required iff condition_size > 0).
  at::Tensor forward(const at::Tensor& x, const c10::optional<at::Tensor>& condition = c10::nullopt);
  const ConditionalLayerNormOptions& options() const { return options_; }

  // The weight's value for "no change" (1; the Gemma RMSNorm's 0), what reset_parameters sets.
  double unit_weight() const { return options_.kind() == NormKind::GemmaRmsNorm ? 0.0 : 1.0; }
  // Sets the initial values: weight unit_weight(), bias 0, condition layers 0.
  void reset_parameters();

  at::Tensor weight, bias;  // bias undefined for the RMS kinds
  torch::nn::Linear condition_to_weight{nullptr}, condition_to_bias{nullptr};

 private:
  ConditionalLayerNormOptions options_;
};
TORCH_MODULE(ConditionalLayerNorm);

}  // namespace attnkit::layers
