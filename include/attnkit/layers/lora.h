#pragma once
// LoRA adapters on a model's attention projections (Hu et al. 2021; issue 45 stage 2, the
// low-rank fine-tuning of LoLCATs): `attnkit train --lora.rank R` (docs/training.md). The
// arithmetic is MultiHeadAttentionImpl's (add_lora / merge_lora); this walks a model's modules.
//
// A model with adapters exists while it trains: its checkpoints carry NAME_lora_a / _lora_b /
// _lora_scale beside the frozen weights (so a run resumes exactly), and every loader of a model
// file (io/model_directory.h) merges them into the weights, so generate, eval of a directory,
// convert, analyze and prune see a plain model.
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::layers {

struct LoraOptions {
  int64_t rank = 0;                 // 0 = no adapters
  double alpha = 16.0;              // scale = alpha / rank
  std::string targets = "q,k,v,o";  // the projections of every attention layer
};

// "q,k,v,o" (any non-empty subset, comma-separated) -> projection indices {0, 1, 2, 3}. Throws
// attnkit::Error naming the accepted letters for anything else.
std::vector<int> lora_projections(const std::string& targets);

// The projections `options` names, after checking it: rank >= 1, alpha > 0 and finite, targets as
// above. Throws attnkit::Error naming the setting (lora.rank, lora.alpha, lora.targets).
std::vector<int> check_lora_options(const LoraOptions& options);

// Adds an adapter (options.rank, options.alpha) to each target projection of every attention
// layer of `module` (every site: self attention of an encoder or decoder, cross attention) that
// has that projection, then freezes every other parameter (requires_grad false), so that only the
// adapters train. Returns the adapters added. Throws attnkit::Error for rank < 1, bad targets, a
// module without attention layers or one that has adapters already.
int64_t add_lora(torch::nn::Module& module, const LoraOptions& options);

// The adapters a weights file holds, as (name, shape) of its tensors: an adapter of the file's
// rank on each projection whose NAME_lora_a is there (scale 1 until the file's NAME_lora_scale is
// loaded over it). Returns the adapters added (0 when the file has none). Throws attnkit::Error
// for a name that is not an attention projection of `module`.
int64_t add_lora_of_file(torch::nn::Module& module,
                         const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors);

// Merges every adapter of `module` into its projection (MultiHeadAttentionImpl::merge_lora).
// Returns how many were merged.
int64_t merge_lora(torch::nn::Module& module);

}  // namespace attnkit::layers
