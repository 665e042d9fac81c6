#pragma once
// The models attnkit decodes, as decode::LanguageModel (generation.h) over IncrementalModel
// (incremental.h):
//   CausalLM      a TaskModel with a causal-LM head (GPT-2, attnkit- or HF-layout); optional
//                 class id for a class-conditional model (Conditional LayerNorm fed by the
//                 model's condition embedding).
//   UnilmLM       a BERT-style TaskModel with a masked-LM head under the UniLM mask: the prompt
//                 ([CLS] source [SEP]) is one bidirectional segment (token type 0) cached once;
//                 every new token (type 1) sees the source and the tokens before it.
//   Seq2SeqLM     the encoder-decoder model: the encoder runs once per source, each decoder
//                 layer caches the memory's cross-attention keys and values; the prompt is the
//                 decoder's start token(s).
// All run the model in eval mode under NoGradGuard (set by the caller's generate()).
#include "attnkit/decode/generation.h"
#include "attnkit/decode/incremental.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"

#include <memory>
#include <vector>

namespace attnkit::decode {

class CausalLM : public LanguageModel {
 public:
  // condition_class >= 0: the class id for every row (needs heads.condition_classes > 0).
  explicit CausalLM(models::TaskModel model, int64_t condition_class = -1);
  void start(int64_t batch, int64_t horizon) override;
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid,
                     const at::Tensor& positions) override;
  void select_rows(const at::Tensor& index) override;
  IncrementalModel& session() { return *session_; }

 private:
  models::TaskModel model_;
  int64_t condition_class_ = -1;
  std::unique_ptr<IncrementalModel> session_;
};

class UnilmLM : public LanguageModel {
 public:
  explicit UnilmLM(models::TaskModel model);
  void start(int64_t batch, int64_t horizon) override;
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid,
                     const at::Tensor& positions) override;
  void select_rows(const at::Tensor& index) override;

 private:
  models::TaskModel model_;
  std::unique_ptr<IncrementalModel> session_;
  bool source_done_ = false;
};

class Seq2SeqLM : public LanguageModel {
 public:
  // sources: one token list per prompt row passed to generate (same order).
  Seq2SeqLM(models::EncoderDecoderModel model, std::vector<std::vector<int64_t>> sources,
            int64_t pad_id = 0);
  void start(int64_t batch, int64_t horizon) override;
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid,
                     const at::Tensor& positions) override;
  void select_rows(const at::Tensor& index) override;

 private:
  models::EncoderDecoderModel model_;
  std::vector<std::vector<int64_t>> sources_;
  int64_t pad_id_ = 0;
  std::unique_ptr<IncrementalModel> session_;
};

// Greedy UniLM decoding with the cache (the seq2seq task's BLEU decoder). Each source is decoded
// as [CLS] source [SEP] -> new tokens until sep_id (not included), max_new_tokens, or the
// prefix's last position reaching max_length (the input [CLS] src [SEP] prefix [SEP] of the
// uncached formulation stays <= max_length; 0 = no limit) or the model's max_positions. Rows
// decode independently of their batchmates. Throws attnkit::Error without a masked-LM head.
std::vector<std::vector<int64_t>> unilm_greedy(models::TaskModel model,
                                               const std::vector<std::vector<int64_t>>& sources,
                                               int64_t cls_id, int64_t sep_id, int64_t pad_id,
                                               int64_t max_new_tokens, int64_t max_length = 0);

}  // namespace attnkit::decode
