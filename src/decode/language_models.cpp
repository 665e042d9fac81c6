#include "attnkit/decode/language_models.h"

#include "attnkit/error.h"
#include "attnkit/models/batching.h"
#include "row_linear.h"

#include <fmt/format.h>
#include <torch/torch.h>

namespace attnkit::decode {
namespace {

at::Tensor last_column(const at::Tensor& h) { return h.select(1, h.size(1) - 1); }

}  // namespace

// ---- causal LM ------------------------------------------------------------------------------
CausalLM::CausalLM(models::TaskModel model, int64_t condition_class)
    : model_(std::move(model)), condition_class_(condition_class) {
  if (!model_->heads().causal_lm) throw Error("generate: the model has no causal-LM head");
  if (condition_class_ >= 0) {
    if (!model_->condition_embedding)
      throw Error("generate: --condition needs a class-conditional model (heads.condition_classes "
                  "> 0)");
    if (condition_class_ >= model_->heads().condition_classes)
      throw Error(fmt::format("generate: condition {} is outside the model's classes [0, {})",
                              condition_class_, model_->heads().condition_classes));
  } else if (model_->config().condition_size > 0) {
    throw Error("generate: the model is class-conditional; give a condition (class id)");
  }
}

void CausalLM::start(int64_t batch, int64_t horizon) {
  c10::optional<at::Tensor> condition;
  if (condition_class_ >= 0)
    condition = model_->condition_embedding->forward(at::full({batch}, condition_class_, at::kLong));
  session_ = std::make_unique<IncrementalModel>(model_->transformer, batch, horizon, c10::nullopt,
                                                c10::nullopt, condition);
}

at::Tensor CausalLM::forward(const at::Tensor& ids, const at::Tensor& valid,
                             const at::Tensor& positions) {
  at::Tensor h = last_column(session_->forward(ids, valid, positions));
  return linear_rows(h, models::lm_head_weight(model_->lm_head, *model_->transformer), {});
}

void CausalLM::select_rows(const at::Tensor& index) { session_->select_rows(index); }

// ---- UniLM ----------------------------------------------------------------------------------
UnilmLM::UnilmLM(models::TaskModel model) : model_(std::move(model)) {
  if (!model_->masked_lm) throw Error("generate: UniLM decoding needs a masked-LM head");
}

void UnilmLM::start(int64_t batch, int64_t horizon) {
  session_ = std::make_unique<IncrementalModel>(model_->transformer, batch, horizon);
  source_done_ = false;
}

at::Tensor UnilmLM::forward(const at::Tensor& ids, const at::Tensor& valid,
                            const at::Tensor& positions) {
  const bool source = !source_done_;
  at::Tensor types = at::full(ids.sizes(), source ? 0 : 1, at::kLong);
  // A row that reached its own length limit may be fed on while its batchmates decode (its
  // tokens are discarded by unilm_greedy): keep its positions inside the table.
  at::Tensor clamped = positions.clamp_max(model_->config().max_positions - 1);
  at::Tensor h = session_->forward(ids, valid, clamped, types, /*causal=*/!source);
  source_done_ = true;
  return model_->masked_lm->forward(last_column(h).unsqueeze(1),
                                    model_->transformer->word_embeddings())
      .squeeze(1);
}

void UnilmLM::select_rows(const at::Tensor& index) { session_->select_rows(index); }

std::vector<std::vector<int64_t>> unilm_greedy(models::TaskModel model,
                                               const std::vector<std::vector<int64_t>>& sources,
                                               int64_t cls_id, int64_t sep_id, int64_t pad_id,
                                               int64_t max_new_tokens, int64_t max_length) {
  if (!model->masked_lm) throw Error("unilm_greedy: the model has no masked-LM head");
  if (max_new_tokens < 0)
    throw Error(fmt::format("unilm_greedy: max_new_tokens {} < 0", max_new_tokens));
  std::vector<std::vector<int64_t>> out(sources.size());
  // Row r may produce `limit[r]` tokens: the prefix's last position stays inside max_length
  // (the input [CLS] src [SEP] prefix [SEP] of the uncached formulation) and max_positions.
  std::vector<int64_t> limit;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<size_t> rows;
  int64_t longest = 0;
  const int64_t positions = model->config().max_positions;
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto src = static_cast<int64_t>(sources[i].size());
    int64_t n = std::min(max_new_tokens, positions - (src + 2));
    if (max_length > 0) n = std::min(n, max_length - 2 - src);
    limit.push_back(n);
    if (n <= 0) continue;
    std::vector<int64_t> p{cls_id};
    p.insert(p.end(), sources[i].begin(), sources[i].end());
    p.push_back(sep_id);
    prompts.push_back(std::move(p));
    rows.push_back(i);
    longest = std::max(longest, n);
  }
  if (prompts.empty()) return out;
  GenerationConfig config;
  config.strategy = Strategy::Greedy;
  config.max_new_tokens = longest;
  config.eos_token_ids = {sep_id};
  config.pad_token_id = pad_id;
  torch::NoGradGuard no_grad;
  UnilmLM lm(model);
  auto results = generate(lm, prompts, config);
  for (size_t k = 0; k < rows.size(); ++k) {
    auto tokens = results[k][0].tokens;
    if (!tokens.empty() && tokens.back() == sep_id) tokens.pop_back();
    // A row decodes independently of its batchmates, so its first limit tokens are what a
    // decode stopped at its own limit gives.
    if (static_cast<int64_t>(tokens.size()) > limit[rows[k]]) tokens.resize(limit[rows[k]]);
    out[rows[k]] = std::move(tokens);
  }
  return out;
}

// ---- encoder-decoder ------------------------------------------------------------------------
Seq2SeqLM::Seq2SeqLM(models::EncoderDecoderModel model, std::vector<std::vector<int64_t>> sources,
                     int64_t pad_id)
    : model_(std::move(model)), sources_(std::move(sources)), pad_id_(pad_id) {}

void Seq2SeqLM::start(int64_t batch, int64_t horizon) {
  if (batch != static_cast<int64_t>(sources_.size()))
    throw Error(fmt::format("generate: {} prompts for {} sources", batch, sources_.size()));
  // The encoder's input is right padded (the decoder's prompts are left padded, generation.cpp).
  const auto [ids, mask] = models::right_padded_ids(sources_, pad_id_);
  at::Tensor memory = model_->encode(ids, mask);
  session_ = std::make_unique<IncrementalModel>(model_->decoder, batch, horizon, memory,
                                                mask.to(at::kBool));
}

at::Tensor Seq2SeqLM::forward(const at::Tensor& ids, const at::Tensor& valid,
                              const at::Tensor& positions) {
  at::Tensor h = last_column(session_->forward(ids, valid, positions));
  at::Tensor logits = linear_rows(h, models::lm_head_weight(model_->lm_head, *model_->decoder), {});
  // Marian's and BART's final_logits_bias [1, vocab].
  return model_->final_logits_bias.defined() ? logits + model_->final_logits_bias : logits;
}

void Seq2SeqLM::select_rows(const at::Tensor& index) { session_->select_rows(index); }

}  // namespace attnkit::decode
