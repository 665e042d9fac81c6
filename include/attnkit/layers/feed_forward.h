#pragma once
// Position-wise feed-forward network fc_out(act(fc_in(x))), or gated (the Llama families' MLP,
// Shazeer 2020): fc_out(act(gate(x)) · fc_in(x)) (HF: down_proj(act(gate_proj(x)) · up_proj(x))),
// and the activations the model families use (BERT: exact erf gelu; GPT-2/ALBERT: the tanh
// approximation "gelu_new"; Llama: silu; Gemma: gelu_pytorch_tanh).
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

namespace attnkit::layers {

enum class Activation { Gelu, GeluTanh, Relu, Silu };

// "gelu" (exact), "gelu_new" / "gelu_tanh" / "gelu_pytorch_tanh" (tanh approximation), "relu",
// "silu" / "swish" (x·sigmoid(x); Marian's Opus-MT models).
Activation parse_activation(const std::string& name);
const char* activation_name(Activation activation);
at::Tensor apply_activation(const at::Tensor& x, Activation activation);

struct FeedForwardOptions {
  FeedForwardOptions(int64_t hidden, int64_t intermediate)
      : hidden_(hidden), intermediate_(intermediate) {}
  TORCH_ARG(int64_t, hidden);
  TORCH_ARG(int64_t, intermediate);
  TORCH_ARG(Activation, activation) = Activation::Gelu;
  TORCH_ARG(bool, gated) = false;
  TORCH_ARG(bool, bias) = true;  // on every dense layer
};

class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const FeedForwardOptions& options);
  at::Tensor forward(const at::Tensor& x);
  // forward for the few rows of a decoding step, through the row kernels (layers/row_linear.h).
  at::Tensor step(const at::Tensor& x);
  const FeedForwardOptions& options() const { return options_; }
  torch::nn::Linear fc_in{nullptr}, fc_out{nullptr};
  torch::nn::Linear gate{nullptr};  // gated only

 private:
  FeedForwardOptions options_;
};
TORCH_MODULE(FeedForward);

}  // namespace attnkit::layers
