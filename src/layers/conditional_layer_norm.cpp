#include "attnkit/layers/conditional_layer_norm.h"

#include "attnkit/error.h"

#include <fmt/format.h>

namespace attnkit::layers {

const char* norm_kind_name(NormKind kind) {
  switch (kind) {
    case NormKind::LayerNorm: return "layer_norm";
    case NormKind::RmsNorm: return "rms_norm";
    case NormKind::GemmaRmsNorm: return "gemma_rms_norm";
  }
  return "?";
}

NormKind parse_norm_kind(const std::string& name) {
  for (NormKind kind : {NormKind::LayerNorm, NormKind::RmsNorm, NormKind::GemmaRmsNorm})
    if (name == norm_kind_name(kind)) return kind;
  throw Error(fmt::format("unknown norm '{}' (known: layer_norm, rms_norm, gemma_rms_norm)",
                          one_line(name)));
}

ConditionalLayerNormImpl::ConditionalLayerNormImpl(const ConditionalLayerNormOptions& options)
    : options_(options) {
  if (options.size() <= 0)
    throw Error(fmt::format("layer norm: size must be positive (got {})", options.size()));
  if (options.kind() != NormKind::LayerNorm && options.condition_size() > 0)
    throw Error(fmt::format("layer norm: {} is never conditional (condition_size {})",
                            norm_kind_name(options.kind()), options.condition_size()));
  weight = register_parameter("weight", torch::full({options.size()}, unit_weight()));
  if (options.kind() != NormKind::LayerNorm) return;
  bias = register_parameter("bias", torch::zeros({options.size()}));
  if (options.condition_size() > 0) {
    auto dense = torch::nn::LinearOptions(options.condition_size(), options.size()).bias(false);
    condition_to_weight = register_module("condition_to_weight", torch::nn::Linear(dense));
    condition_to_bias = register_module("condition_to_bias", torch::nn::Linear(dense));
    torch::NoGradGuard no_grad;
    condition_to_weight->weight.zero_();
    condition_to_bias->weight.zero_();
  }
}

void ConditionalLayerNormImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  weight.fill_(unit_weight());
  if (bias.defined()) bias.zero_();
  if (condition_to_weight) {
    condition_to_weight->weight.zero_();
    condition_to_bias->weight.zero_();
  }
}

at::Tensor ConditionalLayerNormImpl::forward(const at::Tensor& x,
                                             const c10::optional<at::Tensor>& condition) {
  const int64_t size = options_.size();
  if (x.size(-1) != size)
    throw Error(fmt::format("layer norm: last dimension must be {}, got [{}]", size,
                            fmt::join(x.sizes(), ", ")));
  if (options_.kind() != NormKind::LayerNorm)
    return ops::rms_norm(x, weight, options_.eps(),
                         options_.kind() == NormKind::GemmaRmsNorm ? ops::RmsNormKind::Gemma
                                                                   : ops::RmsNormKind::Llama);
  if (options_.condition_size() == 0)
    return at::layer_norm(x, {size}, weight, bias, options_.eps());
  if (!condition)
    throw Error("conditional layer norm: a condition [batch, " +
                std::to_string(options_.condition_size()) + "] is required");
  const auto& c = *condition;
  if (c.dim() != 2 || c.size(0) != x.size(0) || c.size(1) != options_.condition_size())
    throw Error(fmt::format("conditional layer norm: condition must be [{}, {}], got [{}]",
                            x.size(0), options_.condition_size(), fmt::join(c.sizes(), ", ")));
  at::Tensor normed = at::layer_norm(x, {size}, {}, {}, options_.eps());
  // [batch, size] -> [batch, 1, ..., size] to broadcast over the sequence axes.
  std::vector<int64_t> shape(x.dim(), 1);
  shape.front() = x.size(0);
  shape.back() = size;
  at::Tensor gain = (weight + condition_to_weight->forward(c)).view(shape);
  at::Tensor shift = (bias + condition_to_bias->forward(c)).view(shape);
  return normed * gain + shift;
}

}  // namespace attnkit::layers
