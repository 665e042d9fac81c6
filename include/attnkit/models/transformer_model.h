#pragma once
// TransformerModel: embeddings + a stack of TransformerBlocks (+ final LN, + pooler). BERT,
// ALBERT (shared layers), GPT-2 and both halves of the encoder-decoder are configurations of it.
// Every layer's hidden states, attention weights and per-head contexts are available to callers.
#include "attnkit/layers/embeddings.h"
#include "attnkit/layers/transformer_block.h"
#include "attnkit/models/decoding.h"
#include "attnkit/models/transformer_config.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

namespace attnkit::models {

struct ModelInputs {
  at::Tensor input_ids;                      // [batch, n] int64
  c10::optional<at::Tensor> token_type_ids;  // [batch, n]
  c10::optional<at::Tensor> attention_mask;  // [batch, n], nonzero/true = real token
  c10::optional<at::Tensor> mask;            // extra bool mask [batch|1, 1|heads, n, n] (UniLM, ...)
  // [batch] integer: the prefix-LM / UniLM mask as prefix lengths (layers::AttentionInputs::
  // prefix_lengths): linear attention and cosFormer run it in O(n); the logit kinds use `mask` if
  // given (then the same mask, e.g. unilm_mask), else ops::prefix_lm_mask of these lengths.
  c10::optional<at::Tensor> prefix_lengths;
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
  // Per layer [batch, heads, n, value_size] of the cross attention (output_head_contexts with
  // memory, in a model with cross attention).
  std::vector<at::Tensor> cross_head_contexts;
};

// XLNet's two-stream attention (TransformerModelImpl::two_stream_forward).
struct TwoStreamOutput {
  ModelOutput content;  // the content stream: forward(inputs) exactly
  at::Tensor query;     // [batch, n, hidden]: the query stream's last layer (after the final LN)
};

// Which attention of a block: self attention, or the cross attention of decoder blocks.
enum class AttentionSite { Self, Cross };

class TransformerModelImpl : public torch::nn::Module {
 public:
  explicit TransformerModelImpl(const TransformerConfig& config);
  ModelOutput forward(const ModelInputs& inputs);

  // XLNet's two-stream attention (Yang et al. 2019, section 2.3) with the same blocks: the
  // content stream h is forward(inputs) (inputs.mask: position i attends j iff rank(j) <= rank(i)
  // in the factorisation order); the query stream g starts from `query_vector` [embedding size] at
  // every position, through the embeddings' positions (and token types, LayerNorm, projection)
  // instead of the token, and in every layer attends with the same projections, queries from g,
  // keys and values from the content stream's input of that layer, under `query_mask` (rank(j) <
  // rank(i): never itself), then the same feed-forward. So g at i knows i's position, not its
  // token. ops::xlnet_masks gives both masks. Refused in one line: a model with cross attention,
  // inputs.prefix_lengths (give the mask), a kind without explicit logits (the attention's error).
  TwoStreamOutput two_stream_forward(const ModelInputs& inputs, const at::Tensor& query_vector,
                                     const at::Tensor& query_mask);

  // Decoding (models/decoding.h): the states of a session of `batch` rows and at most `horizon`
  // columns, one per layer from `caches` (and the memory's cross-attention caches, for a stack
  // with cross attention: memory [batch, S, width] required). Throws attnkit::Error for a
  // non-positive horizon, a missing memory, a condition that is not [batch, condition_size], or
  // a kind without a cached form (naming it).
  StackCache start_decoding(const CacheFactory& caches, int64_t batch, int64_t horizon,
                            const c10::optional<at::Tensor>& memory = c10::nullopt,
                            const c10::optional<at::Tensor>& memory_padding = c10::nullopt,
                            const c10::optional<at::Tensor>& condition = c10::nullopt);
  // One cached step: ids [batch, n] at step.positions with step.valid; token_types optional
  // [batch, n]. Returns the last hidden states [batch, n, hidden] (after the final LayerNorm when
  // the model has one): what forward gives at those columns. Per-depth head gates apply. Eval
  // mode (the blocks would apply dropout in training).
  at::Tensor step(StackCache& cache, const at::Tensor& ids, const layers::StepInputs& step,
                  const c10::optional<at::Tensor>& token_types = c10::nullopt);

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

  // Physical head pruning: {block: [heads]} in the unpruned numbering (with shared layers the
  // key is the shared block, whose heads go at every depth it serves), as Hugging Face's
  // prune_heads takes it; heads already removed are skipped. Recorded in
  // config().pruned_heads / pruned_cross_heads, which the constructor applies, so a saved
  // model reloads pruned. Throws attnkit::Error for a block or head out of range.
  void prune_heads(const HeadIndices& heads, AttentionSite site = AttentionSite::Self);
  // Head gates ξ per layer (depth), one [heads of that layer] or [batch, heads] tensor each, or
  // an empty vector to remove them. Set per depth, so ALBERT's shared blocks get one gate set per
  // depth. A gate tensor that requires grad receives ∂loss/∂ξ.
  void set_head_gates(const std::vector<at::Tensor>& gates,
                      AttentionSite site = AttentionSite::Self);
  // The gates set_head_gates holds per depth (empty = none); cached decoding applies them too.
  const std::vector<at::Tensor>& head_gates(AttentionSite site = AttentionSite::Self) const {
    return site == AttentionSite::Self ? self_gates_ : cross_gates_;
  }
  // The attention layer of `layer` at `site` (null for Cross in a model without cross attention).
  layers::MultiHeadAttention attention(int64_t layer, AttentionSite site = AttentionSite::Self) const;
  // Heads per layer (depth) now, after pruning.
  std::vector<int64_t> heads_per_layer(AttentionSite site = AttentionSite::Self) const;

  layers::Embeddings embeddings{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  layers::ConditionalLayerNorm final_norm{nullptr};
  torch::nn::Linear pooler{nullptr};

 private:
  layers::TransformerBlockOptions block_options(int64_t layer) const;
  // The rotary tables of layer `layer` at `positions` from the model's tables of this call
  // (`tables`: global, local), made on first use. Undefined tables without rotary positions.
  struct RotaryCall {
    at::Tensor positions;
    ops::RotaryTables global, local;
  };
  const ops::RotaryTables& rotary_tables(RotaryCall& call, int64_t layer);
  // forward's steps, shared with two_stream_forward: the blocks' inputs (checks input_ids and the
  // attention mask), the head gates of one depth, one layer's requested outputs, the final LN and
  // pooler.
  layers::BlockInputs block_inputs_of(const ModelInputs& in) const;
  void set_depth_gates(int64_t layer);
  void record_layer(const ModelInputs& in, const layers::BlockInputs& block_inputs,
                    const layers::BlockOutput& b, ModelOutput& out) const;
  void finish(const ModelInputs& in, at::Tensor h, ModelOutput& out);
  TransformerConfig config_;
  std::vector<at::Tensor> self_gates_, cross_gates_;  // per depth; empty = none
  // config.rotary / rotary_local: one embedding each per model (dynamic scalings keep state).
  std::shared_ptr<ops::RotaryEmbedding> rotary_, rotary_local_;
};
TORCH_MODULE(TransformerModel);

// The weight [vocab, hidden] of a language-model head over `model`'s outputs: `own_head` when it
// is defined (an untied head), else the model's word embeddings (a tied head, GPT-2's lm_head).
const at::Tensor& lm_head_weight(const at::Tensor& own_head, const TransformerModelImpl& model);

// Language-model logits of `model`'s config: cap · tanh(logits / cap) when final_logit_softcap
// is set (Gemma 2), else `logits` unchanged.
at::Tensor final_logits(at::Tensor logits, const TransformerConfig& config);

// Parameter count of a module (all parameters, shared ones once).
int64_t parameter_count(const torch::nn::Module& module);

}  // namespace attnkit::models
