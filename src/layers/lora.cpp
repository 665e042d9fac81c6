#include "attnkit/layers/lora.h"

#include "attnkit/error.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace attnkit::layers {
namespace {

// `module` itself and its descendants (not modules(include_self = true), which needs `module` to
// be owned by a shared_ptr).
std::vector<MultiHeadAttentionImpl*> attention_layers(torch::nn::Module& module) {
  std::vector<MultiHeadAttentionImpl*> out;
  if (auto* attention = dynamic_cast<MultiHeadAttentionImpl*>(&module)) out.push_back(attention);
  for (const auto& m : module.modules(/*include_self=*/false))
    if (auto* attention = dynamic_cast<MultiHeadAttentionImpl*>(m.get())) out.push_back(attention);
  return out;
}

// "q" / "k" / "v" / "o" -> 0..3; -1 for anything else.
int projection_index(const std::string& letter) {
  for (int i = 0; i < 4; ++i)
    if (letter == MultiHeadAttentionImpl::kProjectionNames[i]) return i;
  return -1;
}

}  // namespace

std::vector<int> lora_projections(const std::string& targets) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= targets.size()) {
    const size_t comma = std::min(targets.find(',', start), targets.size());
    const std::string item = targets.substr(start, comma - start);
    const int which = projection_index(item);
    if (which < 0)
      throw Error(fmt::format("lora.targets: '{}' is not a projection (accepted: q, k, v, o, comma-separated)", item));
    if (std::find(out.begin(), out.end(), which) != out.end())
      throw Error(fmt::format("lora.targets: '{}' is named twice", item));
    out.push_back(which);
    start = comma + 1;
  }
  return out;
}

std::vector<int> check_lora_options(const LoraOptions& options) {
  if (options.rank < 1) throw Error(fmt::format("lora.rank must be at least 1, or 0 for none (got {})", options.rank));
  if (!(options.alpha > 0) || !std::isfinite(options.alpha))
    throw Error(fmt::format("lora.alpha must be positive (got {})", options.alpha));
  return lora_projections(options.targets);
}

int64_t add_lora(torch::nn::Module& module, const LoraOptions& options) {
  const std::vector<int> projections = check_lora_options(options);
  const auto layers = attention_layers(module);
  if (layers.empty()) throw Error("lora: the model has no attention layers");
  for (auto* attention : layers)
    if (attention->has_lora()) throw Error("lora: the model has adapters already");
  // Everything the model had is frozen; the adapters made below are what trains.
  for (auto& parameter : module.parameters()) parameter.set_requires_grad(false);
  int64_t added = 0;
  for (auto* attention : layers)
    for (int which : projections) {
      if (!attention->has_projection(which)) continue;  // q and k of a random synthesizer
      attention->add_lora(which, options.rank, options.alpha);
      ++added;
    }
  return added;
}

int64_t add_lora_of_file(torch::nn::Module& module,
                         const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  std::map<std::string, MultiHeadAttentionImpl*> by_name;
  for (const auto& item : module.named_modules())
    if (auto* attention = dynamic_cast<MultiHeadAttentionImpl*>(item.value().get())) by_name[item.key()] = attention;
  int64_t added = 0;
  for (const auto& [name, shape] : tensors) {
    if (!ends_with(name, "_lora_a")) continue;
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string letter = name.substr(dot == std::string::npos ? 0 : dot + 1, name.size() - (dot + 1) - 7);
    const int which = projection_index(letter);
    const auto found = by_name.find(owner);
    if (which < 0 || found == by_name.end() || shape.size() != 2)
      throw Error(fmt::format("{}: not a LoRA adapter of an attention projection of this model", name));
    found->second->add_lora(which, shape[0], static_cast<double>(shape[0]));  // scale 1 until loaded
    ++added;
  }
  return added;
}

int64_t merge_lora(torch::nn::Module& module) {
  int64_t merged = 0;
  for (auto* attention : attention_layers(module)) merged += attention->merge_lora();
  return merged;
}

}  // namespace attnkit::layers
