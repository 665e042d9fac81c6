#include "attnkit/layers/feed_forward.h"

#include "attnkit/layers/row_linear.h"

#include "attnkit/error.h"

#include <fmt/format.h>

#include <cmath>

namespace attnkit::layers {

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::Gelu;
  if (name == "gelu_new" || name == "gelu_tanh" || name == "gelu_pytorch_tanh")
    return Activation::GeluTanh;
  if (name == "relu") return Activation::Relu;
  if (name == "silu" || name == "swish") return Activation::Silu;
  throw Error(fmt::format("unknown activation '{}' (known: gelu, gelu_new, gelu_tanh, "
                          "gelu_pytorch_tanh, relu, silu, swish)", one_line(name)));
}

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::Gelu: return "gelu";
    case Activation::GeluTanh: return "gelu_new";
    case Activation::Relu: return "relu";
    case Activation::Silu: return "silu";
  }
  return "?";
}

at::Tensor apply_activation(const at::Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::Gelu: return at::gelu(x);
    case Activation::GeluTanh: return at::gelu(x, "tanh");
    case Activation::Relu: return at::relu(x);
    case Activation::Silu: return at::silu(x);
  }
  return x;
}

FeedForwardImpl::FeedForwardImpl(const FeedForwardOptions& options) : options_(options) {
  if (options.hidden() <= 0 || options.intermediate() <= 0)
    throw Error(fmt::format("feed-forward: hidden ({}) and intermediate ({}) must be positive",
                            options.hidden(), options.intermediate()));
  const auto in = torch::nn::LinearOptions(options.hidden(), options.intermediate()).bias(options.bias());
  if (options.gated()) gate = register_module("gate", torch::nn::Linear(in));
  fc_in = register_module("fc_in", torch::nn::Linear(in));
  fc_out = register_module(
      "fc_out", torch::nn::Linear(
                    torch::nn::LinearOptions(options.intermediate(), options.hidden()).bias(options.bias())));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
  at::Tensor inner = apply_activation(linear(gate ? *gate : *fc_in, x), options_.activation());
  if (gate) inner = inner * linear(*fc_in, x);
  return linear(*fc_out, inner);
}

at::Tensor FeedForwardImpl::step(const at::Tensor& x) {
  if (!gate) return linear_rows(*fc_out, apply_activation(linear_rows(*fc_in, x), options_.activation()));
  auto gate_up = linear_rows(x, {dense_layer(*gate), dense_layer(*fc_in)});
  return linear_rows(*fc_out, apply_activation(gate_up[0], options_.activation()) * gate_up[1]);
}

}  // namespace attnkit::layers
