#pragma once
// TaskModel: a TransformerModel plus the task heads a checkpoint or a training run needs.
//
//   masked LM       dense H->E, activation, LayerNorm, decoder tied to the word embeddings + bias
//                   (BERT's cls.predictions, ALBERT's predictions: E = embedding_size)
//   causal LM       hidden · Wᵀ, W tied to the word embeddings (GPT-2's lm_head) or its own
//   next sentence   Linear(H, 2) on the pooled output (BERT NSP, ALBERT SOP)
//   classification  Linear(H, labels) on the pooled output / first / last real / mean token
//   tagging         Linear(H, labels) on every token
//   span            Linear(H, 2) -> start and end logits (reading comprehension)
//   condition       Embedding(classes, condition_size) feeding Conditional LayerNorm (class-
//                   conditional LM); or pass a [batch, condition_size] vector directly
//
// UniLM seq2seq is a BERT with the masked-LM head used as a next-token predictor under the
// UniLM mask (see unilm_batch); a conditional LM is a GPT-2-style model with condition_size > 0.
#include "attnkit/layers/feed_forward.h"
#include "attnkit/models/model.h"
#include "attnkit/models/transformer_model.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace attnkit::models {

enum class Pooling { Pooler, First, Last, Mean };
Pooling parse_pooling(const std::string& name);  // pooler | first | last | mean
std::string to_string(Pooling pooling);

struct HeadsConfig {
  bool masked_lm = false;
  bool causal_lm = false;
  bool tie_lm = true;               // LM decoders read the word embeddings
  int64_t next_sentence = 0;        // > 0: NSP/SOP logits on the pooled output
  int64_t sequence_labels = 0;      // > 0: sequence classification
  Pooling sequence_pooling = Pooling::Pooler;
  bool sequence_bias = true;        // GPT-2's score layer has none
  int64_t token_labels = 0;         // > 0: token classification (tagging)
  bool span = false;                // start/end logits
  int64_t condition_classes = 0;    // > 0: class id -> condition vector (needs condition_size)
  double classifier_dropout = 0.1;
  // > 0: two-tower pair classification (LRA retrieval, pair_logits): each side encoded alone by the
  // one encoder and pooled (sequence_pooling), [u, v, u*v, u-v] through an MLP of one hidden layer
  // (pair_hidden: 4·hidden -> hidden, the model's activation) and pair_classifier (-> pair_labels).
  int64_t pair_labels = 0;
  // XLNet's query stream (two_stream_forward): a learned start vector `query_start` [embedding
  // size]; needs causal_lm (the query stream's tokens are read through the LM head).
  bool query_stream = false;

  bool any() const {
    return masked_lm || causal_lm || next_sentence > 0 || sequence_labels > 0 ||
           token_labels > 0 || span || condition_classes > 0 || pair_labels > 0;
  }
};
void to_json(nlohmann::json& j, const HeadsConfig& heads);
void from_json(const nlohmann::json& j, HeadsConfig& heads);  // strict, like TransformerConfig
// A model with a masked-LM head and no causal-LM head decodes as UniLM (models/decoding.h): its
// prompts carry the tokenizer's special tokens ([CLS] ... [SEP]) and its end token is "[SEP]".
bool decodes_as_unilm(const HeadsConfig& heads);

struct TaskInputs : ModelInputs {
  c10::optional<at::Tensor> condition_ids;  // [batch] int64 class ids (condition_classes > 0)
};

// two_stream_forward: the content stream's outputs and the query stream's causal-LM logits.
struct TwoStreamTaskOutput {
  ModelOutput content;
  at::Tensor query_hidden;  // [batch, n, hidden]
  at::Tensor query_logits;  // [batch, n, vocab]: at i, the token AT i (not the next one)
};

struct TaskOutput {
  ModelOutput base;
  at::Tensor masked_lm_logits;       // [batch, n, vocab]
  at::Tensor causal_lm_logits;       // [batch, n, vocab]
  at::Tensor next_sentence_logits;   // [batch, next_sentence]
  at::Tensor sequence_logits;        // [batch, labels]
  at::Tensor token_logits;           // [batch, n, labels]
  at::Tensor start_logits;           // [batch, n]
  at::Tensor end_logits;             // [batch, n]
};

// BERT/ALBERT masked-LM head. The decoder weight is the tied word-embedding matrix unless the
// head owns one (`decoder`, when tie_lm is false).
class MaskedLMHeadImpl : public torch::nn::Module {
 public:
  MaskedLMHeadImpl(int64_t hidden, int64_t embedding_size, int64_t vocab_size,
                   layers::Activation activation, double layer_norm_eps, bool tied);
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& word_embeddings);

  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  at::Tensor decoder;  // [vocab, E] when untied
  at::Tensor bias;     // [vocab]

 private:
  layers::Activation activation_;
};
TORCH_MODULE(MaskedLMHead);

// An encoder-only (bidirectional attention) or decoder-only (causal) models::Model: one stack,
// one attention site ("encoder.self" or "decoder.self").
class TaskModelImpl : public torch::nn::Module, public Model {
 public:
  TaskModelImpl(const TransformerConfig& config, const HeadsConfig& heads);
  TaskOutput forward(const TaskInputs& inputs);
  // The pooled vector (heads.sequence_pooling) of each row of one batch: [batch, hidden].
  at::Tensor encode(const TaskInputs& inputs);
  // Two-tower logits [batch, pair_labels] (heads.pair_labels > 0): left and right are encoded
  // separately (each row's vector depends on that row alone) by the same weights.
  at::Tensor pair_logits(const TaskInputs& left, const TaskInputs& right);
  // XLNet's two-stream attention (heads.query_stream): TransformerModelImpl::two_stream_forward
  // from `query_start`, the query stream through the causal LM head. inputs.mask is the content
  // mask; query_mask must never let i attend i (ops::xlnet_masks' query mask).
  TwoStreamTaskOutput two_stream_forward(const TaskInputs& inputs, const at::Tensor& query_mask);

  // models::Model
  ModelShape shape() const override;
  torch::nn::Module& module() override { return *this; }
  const torch::nn::Module& module() const override { return *this; }
  std::vector<AttentionSiteRef> attention_sites() const override;
  void prune_heads(const std::string& site, const HeadIndices& heads) override;
  nlohmann::json config_description() const override;
  DecodingTraits decoding_traits() const override;
  Decoding decoding(const DecodingRequest& request, const CacheFactory& caches) override;

  const TransformerConfig& config() const { return transformer->config(); }
  const HeadsConfig& heads() const { return heads_; }

  TransformerModel transformer{nullptr};
  MaskedLMHead masked_lm{nullptr};
  at::Tensor lm_head;  // [vocab, hidden] when the causal LM head is untied
  at::Tensor query_start;  // [embedding size] when heads.query_stream (XLNet's w)
  torch::nn::Linear next_sentence{nullptr}, classifier{nullptr}, tagger{nullptr}, span{nullptr};
  torch::nn::Embedding condition_embedding{nullptr};
  torch::nn::Linear pair_hidden{nullptr}, pair_classifier{nullptr};

 private:
  at::Tensor pool(const TaskInputs& in, const ModelOutput& out) const;
  ModelInputs base_inputs(const TaskInputs& in);  // with the condition vector of condition_ids
  HeadsConfig heads_;
};
TORCH_MODULE(TaskModel);

// ---- losses (mean over the counted positions; labels equal to kIgnoreLabel do not count) ----
constexpr int64_t kIgnoreLabel = -100;
// logits [batch, n, vocab] (or [batch, labels]) against labels [batch, n] (or [batch]).
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels);
// Next-token targets for a causal LM: targets[:, t] = input_ids[:, t + 1]; the last position and
// positions whose next token is padding (attention_mask 0) get kIgnoreLabel.
at::Tensor next_token_targets(const at::Tensor& input_ids,
                              const c10::optional<at::Tensor>& attention_mask = c10::nullopt);
// (CE(start) + CE(end)) / 2 with start/end positions [batch].
at::Tensor span_loss(const at::Tensor& start_logits, const at::Tensor& end_logits,
                     const at::Tensor& start_positions, const at::Tensor& end_positions);

// UniLM seq2seq batch (Dong et al. 2019, as bert4keras trains it): input [CLS] src [SEP] tgt
// [SEP], token types 0 / 1, the UniLM mask, and next-token targets on the target segment only
// (kIgnoreLabel elsewhere), padded to the longest pair with pad_id. prefix_lengths [batch] is the
// same mask as ModelInputs::prefix_lengths take it (the source segment's length, [CLS] and [SEP]
// included), the form linear attention and cosFormer run in O(n); set both `mask` and
// `prefix_lengths` (inputs()) and every attention kind sees the UniLM mask.
struct UnilmBatch {
  at::Tensor input_ids, token_type_ids, attention_mask, mask, targets, prefix_lengths;
  TaskInputs inputs() const;  // ids, token types, attention mask, mask and prefix lengths
};
UnilmBatch unilm_batch(const std::vector<std::vector<int64_t>>& sources,
                       const std::vector<std::vector<int64_t>>& targets, int64_t cls_id,
                       int64_t sep_id, int64_t pad_id);

}  // namespace attnkit::models
