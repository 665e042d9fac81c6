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
  fc_in = register_module("fc_in", torch::nn::Linear(options.hidden(), options.intermediate()));
  fc_out = register_module("fc_out", torch::nn::Linear(options.intermediate(), options.hidden()));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
  return fc_out->forward(apply_activation(fc_in->forward(x), options_.activation()));
}

at::Tensor FeedForwardImpl::step(const at::Tensor& x) {
  return linear_rows(*fc_out, apply_activation(linear_rows(*fc_in, x), options_.activation()));
}

}  // namespace attnkit::layers
