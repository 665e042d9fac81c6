// The decoding entry of the models (models/decoding.h): the sessions of a task model (causal LM,
// UniLM) and of the encoder-decoder over the layers' cached steps.
#include "attnkit/models/decoding.h"

#include "attnkit/error.h"
#include "attnkit/models/batching.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/quantize.h"
#include "attnkit/models/task_model.h"

#include <fmt/format.h>

namespace attnkit::models {

void StackCache::select_rows(const at::Tensor& index) {
  for (auto& s : self) s->select_rows(index);
  for (auto& x : cross) x->select_rows(index);
  if (condition) condition = condition->index_select(0, index);
}

int64_t StackCache::bytes() const {
  int64_t total = 0;
  for (const auto& s : self) total += s->bytes();
  return total;
}

bool decodes_as_unilm(const HeadsConfig& heads) { return !heads.causal_lm && heads.masked_lm; }

namespace {

at::Tensor last_column(const at::Tensor& h) { return h.select(1, h.size(1) - 1); }

// The positions the stack that reads the prompts holds (a learned or sinusoidal table); 0: no
// limit (rotary or no positions).
int64_t prompt_positions(const TransformerConfig& stack) {
  return stack.positions == layers::PositionEncoding::None ? 0 : stack.max_positions;
}

// The prompts' checks every shape shares: every prompt non-empty, its ids in the vocabulary and (positions > 0) no longer than the
// position table, checked before any decoding with the prompt's number in the message.
void check_prompts(const DecodingRequest& request, int64_t vocab, int64_t positions) {
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    const auto& prompt = request.prompts[p];
    if (prompt.empty()) throw Error(fmt::format("generate: prompt {} has no tokens", p + 1));
    for (int64_t id : prompt)
      if (id < 0 || id >= vocab)
        throw Error(fmt::format("generate: token id {} is outside the model's vocabulary [0, {})",
                                id, vocab));
    if (positions > 0 && int64_t(prompt.size()) > positions)
      throw Error(fmt::format("generate: prompt {} has {} tokens, more than the model's {} positions "
                              "(--max-input-length {} keeps the first {})",
                              p + 1, prompt.size(), positions, positions, positions));
  }
}

// A task model with a causal-LM head; condition_class >= 0: a class-conditional model's class.
class CausalSession : public DecodingSession {
 public:
  CausalSession(TaskModel model, const CacheFactory& caches, int64_t condition_class)
      : model_(std::move(model)), caches_(caches), condition_class_(condition_class) {}
  void start(int64_t batch, int64_t horizon) override {
    c10::optional<at::Tensor> condition;
    if (condition_class_ >= 0)
      condition = model_->condition_embedding->forward(at::full({batch}, condition_class_, at::kLong));
    cache_ = model_->transformer->start_decoding(caches_, batch, horizon, c10::nullopt,
                                                 c10::nullopt, condition);
  }
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid,
                     const at::Tensor& positions) override {
    const at::Tensor h = last_column(model_->transformer->step(cache_, ids, {valid, positions, true, {}}));
    return final_logits(lm_head_product(h, model_->lm_head, *model_->transformer, /*step=*/true),
                        model_->transformer->config());
  }
  void select_rows(const at::Tensor& index) override { cache_.select_rows(index); }
  int64_t state_bytes() const override { return cache_.bytes(); }

 private:
  TaskModel model_;
  const CacheFactory& caches_;
  int64_t condition_class_ = -1;
  StackCache cache_;
};

// A task model with a masked-LM head under the UniLM mask: the first forward is the source
// segment (token type 0, bidirectional), every later one a new target token (type 1, causal).
class UnilmSession : public DecodingSession {
 public:
  UnilmSession(TaskModel model, const CacheFactory& caches)
      : model_(std::move(model)), caches_(caches) {}
  void start(int64_t batch, int64_t horizon) override {
    cache_ = model_->transformer->start_decoding(caches_, batch, horizon);
    source_done_ = false;
  }
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid,
                     const at::Tensor& positions) override {
    const bool source = !source_done_;
    const at::Tensor types = at::full(ids.sizes(), source ? 0 : 1, at::kLong);
    // A row that reached its own length limit may be fed on while its batchmates decode (its
    // tokens are discarded by decode::unilm_greedy): keep its positions inside the table.
    const at::Tensor clamped = positions.clamp_max(model_->config().max_positions - 1);
    const at::Tensor h = model_->transformer->step(cache_, ids, {valid, clamped, !source, {}}, types);
    source_done_ = true;
    return model_->masked_lm->forward(last_column(h).unsqueeze(1),
                                      model_->transformer->word_embeddings())
        .squeeze(1);
  }
  void select_rows(const at::Tensor& index) override { cache_.select_rows(index); }
  int64_t state_bytes() const override { return cache_.bytes(); }

 private:
  TaskModel model_;
  const CacheFactory& caches_;
  StackCache cache_;
  bool source_done_ = false;
};

// The encoder-decoder: the sources encoded once at start (right padded), the decoder stepping
// over the memory.
class Seq2SeqSession : public DecodingSession {
 public:
  Seq2SeqSession(EncoderDecoderModel model, const CacheFactory& caches,
                 std::vector<std::vector<int64_t>> sources, int64_t pad_id)
      : model_(std::move(model)), caches_(caches), sources_(std::move(sources)), pad_id_(pad_id) {}
  void start(int64_t batch, int64_t horizon) override {
    if (batch != static_cast<int64_t>(sources_.size()))
      throw Error(fmt::format("generate: {} prompts for {} sources", batch, sources_.size()));
    const auto [ids, mask] = right_padded_ids(sources_, pad_id_);
    const at::Tensor memory = model_->encode(ids, mask);
    cache_ = model_->decoder->start_decoding(caches_, batch, horizon, memory, mask.to(at::kBool));
  }
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid,
                     const at::Tensor& positions) override {
    const at::Tensor h = last_column(model_->decoder->step(cache_, ids, {valid, positions, true, {}}));
    at::Tensor logits =
        lm_head_product(h, model_->lm_head, *model_->decoder, /*step=*/true);
    // Marian's and BART's final_logits_bias [1, vocab].
    return model_->final_logits_bias.defined() ? logits + model_->final_logits_bias : logits;
  }
  void select_rows(const at::Tensor& index) override { cache_.select_rows(index); }
  int64_t state_bytes() const override { return cache_.bytes(); }

 private:
  EncoderDecoderModel model_;
  const CacheFactory& caches_;
  std::vector<std::vector<int64_t>> sources_;
  int64_t pad_id_ = 0;
  StackCache cache_;
};

}  // namespace

int64_t max_new_tokens_limit(const DecodingTraits& traits, const std::vector<std::vector<int64_t>>& prompts) {
  if (traits.output_positions <= 0) return -1;
  // A language model's prompt takes positions 0 .. L-1 (the longest prompt's L; shorter ones end
  // earlier); the decoder's start token takes position 0. New token k is fed at the next position
  // to give token k + 1; the last one is never fed.
  int64_t used = 1;
  if (traits.continues_prompt)
    for (const auto& p : prompts) used = std::max(used, static_cast<int64_t>(p.size()));
  if (used > traits.output_positions) return -1;
  return traits.output_positions - used + 1;
}

// ---- task models ------------------------------------------------------------------------------
DecodingTraits TaskModelImpl::decoding_traits() const {
  DecodingTraits traits;
  const bool unilm = decodes_as_unilm(heads_);
  traits.end_token = unilm ? "[SEP]" : "<|endoftext|>";
  traits.prompts_take_special_tokens = unilm;
  traits.prompt_vocab = config().vocab_size;
  traits.output_pad_id = config().pad_token_id;
  if (!unilm) traits.output_positions = prompt_positions(config());
  return traits;
}

Decoding TaskModelImpl::decoding(const DecodingRequest& request, const CacheFactory& caches) {
  check_prompts(request, decoding_traits().prompt_vocab, prompt_positions(config()));
  TaskModel self(std::static_pointer_cast<TaskModelImpl>(shared_from_this()));
  Decoding out;
  out.prompts = request.prompts;
  if (heads_.causal_lm) {
    const int64_t condition = request.condition_class;
    if (condition >= 0) {
      if (!condition_embedding)
        throw Error("generate: --condition needs a class-conditional model (heads.condition_classes "
                    "> 0)");
      if (condition >= heads_.condition_classes)
        throw Error(fmt::format("generate: condition {} is outside the model's classes [0, {})",
                                condition, heads_.condition_classes));
    } else if (config().condition_size > 0) {
      throw Error("generate: the model is class-conditional; give a condition (class id)");
    }
    out.session = std::make_unique<CausalSession>(self, caches, condition);
    return out;
  }
  if (decodes_as_unilm(heads_)) {
    if (request.condition_class >= 0) throw Error("--condition: UniLM models take no condition");
    out.session = std::make_unique<UnilmSession>(self, caches);
    return out;
  }
  throw Error(fmt::format("generate: {} has neither a causal-LM nor a masked-LM head", request.name));
}

// ---- the encoder-decoder ------------------------------------------------------------------------
DecodingTraits EncoderDecoderModelImpl::decoding_traits() const {
  DecodingTraits traits;
  traits.end_token = "</s>";
  traits.end_token_fallbacks = true;
  traits.prompts_take_special_tokens = true;
  traits.continues_prompt = false;
  traits.prompt_vocab = config().encoder.vocab_size;
  traits.output_pad_id = config().decoder.pad_token_id;
  traits.output_positions = prompt_positions(config().decoder);
  return traits;
}

Decoding EncoderDecoderModelImpl::decoding(const DecodingRequest& request,
                                           const CacheFactory& caches) {
  check_prompts(request, decoding_traits().prompt_vocab, prompt_positions(config().encoder));
  if (request.condition_class >= 0)
    throw Error("--condition: encoder-decoder models take no condition");
  const int64_t start = request.decoder_start_token_id >= 0 ? request.decoder_start_token_id
                                                            : decoder_start_token();
  if (start < 0 || start >= config().decoder.vocab_size)
    throw Error(fmt::format("generate: decoder start token {} is outside the decoder's vocabulary "
                            "[0, {})",
                            start, config().decoder.vocab_size));
  const int64_t pad = request.source_pad_id >= 0 ? request.source_pad_id : config().encoder.pad_token_id;
  Decoding out;
  out.session = std::make_unique<Seq2SeqSession>(
      EncoderDecoderModel(std::static_pointer_cast<EncoderDecoderModelImpl>(shared_from_this())),
      caches, request.prompts, pad);
  out.prompts.assign(request.prompts.size(), std::vector<int64_t>{start});
  return out;
}

}  // namespace attnkit::models
