#pragma once
// TransformerModel: embeddings + a stack of TransformerBlocks (+ final LN, + pooler). BERT,
// ALBERT (shared layers), GPT-2 and both halves of the encoder-decoder are configurations of it.
// Every layer's hidden states, attention weights and per-head contexts are available to callers.
#include "attnkit/layers/embeddings.h"
#include "attnkit/layers/transformer_block.h"
#include "attnkit/models/transformer_config.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <vector>

namespace attnkit::models {

struct ModelInputs {
  at::Tensor input_ids;                      // [batch, n] int64
  c10::optional<at::Tensor> token_type_ids;  // [batch, n]
  c10::optional<at::Tensor> attention_mask;  // [batch, n], nonzero/true = real token
  c10::optional<at::Tensor> mask;            // extra bool mask [batch|1, 1|heads, n, n] (UniLM, ...)
  c10::optional<at::Tensor> condition;       // [batch, condition_size] for Conditional LN
  c10::optional<at::Tensor> memory;          // encoder output for cross attention
  c10::optional<at::Tensor> memory_padding;  // [batch, S] bool
  int64_t position_offset = 0;
  c10::optional<at::Tensor> position_ids;    // [batch, n] per-token positions (left padding)
  bool output_hidden_states = false;  // embedding output + every layer's output
  bool output_attentions = false;
  bool output_head_contexts = false;
};

struct ModelOutput {
  at::Tensor last_hidden_state;            // [batch, n, hidden] (after the final LN if any)
  at::Tensor pooled;                       // [batch, hidden] when the model has a pooler
  std::vector<at::Tensor> hidden_states;   // layers + 1 entries when asked
  std::vector<at::Tensor> attentions;      // per layer [batch, heads, n, n]
  std::vector<at::Tensor> head_contexts;   // per layer [batch, heads, n, value_size]
};

class TransformerModelImpl : public torch::nn::Module {
 public:
  explicit TransformerModelImpl(const TransformerConfig& config);
  ModelOutput forward(const ModelInputs& inputs);

  const TransformerConfig& config() const { return config_; }
  // The block that computes layer `layer` (the same block for several layers when shared).
  layers::TransformerBlock block(int64_t layer) const;
  int64_t block_count() const { return static_cast<int64_t>(blocks->size()); }
  // ALBERT -> BERT: give every layer its own copy of its shared block (outputs unchanged).
  void unshare();
  // Switch skip / MLP / LN in every block (rank-collapse variants with the same weights).
  void set_paths(const layers::BlockPaths& paths);
  // The input embedding matrix [vocab, E] (tied LM heads read it).
  const at::Tensor& word_embeddings() const { return embeddings->token->weight; }
  // Re-initialise every weight as the families do: normal(0, std) for dense and embedding
  // weights, zeros for biases, LayerNorm (1, 0); Conditional LN's dense layers stay zero.
  void reset_parameters(double std = 0.02);

  layers::Embeddings embeddings{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  layers::ConditionalLayerNorm final_norm{nullptr};
  torch::nn::Linear pooler{nullptr};

 private:
  layers::TransformerBlockOptions block_options() const;
  TransformerConfig config_;
};
TORCH_MODULE(TransformerModel);

// Parameter count of a module (all parameters, shared ones once).
int64_t parameter_count(const torch::nn::Module& module);

}  // namespace attnkit::models
