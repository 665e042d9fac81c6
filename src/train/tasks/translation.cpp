// translation: an encoder-decoder Transformer on source<TAB>target pairs, selected by sacreBLEU.
#include "task_common.h"

#include "attnkit/decode/generation.h"
#include "attnkit/train/translation.h"
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/layers/attention_spec.h"
#include "attnkit/layers/embeddings.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/train/memory_budget.h"
#include "attnkit/metrics/metrics.h"

#include <fmt/format.h>

namespace attnkit::train::detail {
namespace {

// models::EncoderDecoderModel (Vaswani et al. 2017) over one joint vocabulary (task.tokenizer),
// with Marian's conventions (the pipeline of train/translation.h, which `analyze heads` shares):
// the encoder reads the source encoded with the tokenizer's special tokens; the decoder starts
// from the padding token (the model's pad_token_id, its decoder_start) and reads pad + target,
// predicting target + the end token (</s>, else [SEP], [EOS] or <|endoftext|>); trained with
// label-smoothed cross entropy (task.label_smoothing). A source longer than task.truncate
// tokens loses its end, a target its end beyond task.truncate - 1 (the decoder's input then holds
// task.truncate tokens). Evaluation: loss, perplexity and token accuracy of the target under
// teacher forcing (no smoothing), and sacreBLEU's corpus BLEU and chrF (fractions; sacreBLEU
// prints 100×) of decodes (greedy, or beam search with task.beams and task.length_penalty)
// detokenised by the tokenizer, against the reference text as the file has it (not cut).
// Decoding stops at the end token or after the longest training target + 1 tokens (within the
// position table). The best checkpoint has the best BLEU.
class TranslationTask : public TrainingTask {
 public:
  TranslationTask(models::EncoderDecoderModel model, const RunConfig& config, text::Tokenizer tokenizer,
                  std::vector<TranslationPair> train, std::vector<TranslationPair> val, int64_t eos, int64_t pad)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), train_(std::move(train)),
        val_(std::move(val)), tokens_{pad, pad, eos}, batch_size_(config.task.batch_size),
        label_smoothing_(config.task.label_smoothing), beams_(config.task.beams),
        length_penalty_(config.task.length_penalty),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {
    int64_t longest = 1;
    for (const auto& r : train_) longest = std::max<int64_t>(longest, static_cast<int64_t>(r.target.size()));
    max_new_tokens_ = std::min<int64_t>(longest + 1, model_->config().decoder.max_positions - 1);
  }

  torch::nn::Module& module() override { return *model_; }
  std::map<std::string, std::string> checkpoint_metadata() const override {
    return io::attnkit_metadata(*model_);
  }
  std::shared_ptr<models::Model> trained_model() const override { return model_.ptr(); }

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const TranslationPair*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    const TranslationBatch b = translation_batch(rows, tokens_);
    const at::Tensor logits = model_->forward(b.source, b.decoder_input, b.source_mask, b.target_mask);
    const at::Tensor loss =
        at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), b.labels.reshape({-1}), {},
                               at::Reduction::Mean, models::kIgnoreLabel, label_smoothing_);
    return {loss, b.source_mask.sum().item<int64_t>() + b.target_mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    models::PredictionMetrics metrics;
    std::vector<std::string> hypotheses;
    std::vector<std::vector<std::string>> references;
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const TranslationPair*>& rows) {
      const TranslationBatch b = translation_batch(rows, tokens_);
      metrics.add(model_->forward(b.source, b.decoder_input, b.source_mask, b.target_mask), b.labels);
      std::vector<Ids> sources;
      for (const auto* r : rows) sources.push_back(r->source);
      for (const auto& ids : translate(sources)) hypotheses.push_back(detokenize(ids));
      for (const auto* r : rows) references.push_back({r->reference});
    });
    const double loss = metrics.mean_loss();
    return {{"loss", loss},
            {"perplexity", std::exp(loss)},
            {"token_accuracy", metrics.accuracy()},
            {"bleu", metrics::sacrebleu_corpus_bleu(hypotheses, references).score},
            {"chrf", metrics::sacrebleu_corpus_chrf(hypotheses, references).score}};
  }
  std::string primary_metric() const override { return "bleu"; }
  bool higher_is_better() const override { return true; }

 private:
  // New tokens per source, without the </s> that ended them.
  std::vector<Ids> translate(const std::vector<Ids>& sources) {
    decode::GenerationConfig g;
    g.strategy = beams_ > 1 ? decode::Strategy::Beam : decode::Strategy::Greedy;
    g.num_beams = std::max<int64_t>(beams_, 1);
    g.length_penalty = length_penalty_;
    g.max_new_tokens = max_new_tokens_;
    g.eos_token_ids = {tokens_.eos};
    g.pad_token_id = tokens_.pad;
    return train::translate(*model_, sources, g, tokens_);
  }
  std::string detokenize(const Ids& ids) const {
    return tokenizer_.decode(std::vector<uint32_t>(ids.begin(), ids.end()));
  }

  models::EncoderDecoderModel model_;
  text::Tokenizer tokenizer_;
  std::vector<TranslationPair> train_, val_;
  TranslationTokens tokens_;  // start = pad: the decoder starts from the padding token
  int64_t batch_size_;
  double label_smoothing_;
  int64_t beams_;
  double length_penalty_;
  int64_t max_new_tokens_ = 1;
  BatchOrder order_;
};

// Fine-tuning an encoder-decoder (model.init: an attnkit model or run directory, e.g. a student of
// `attnkit linearize`): its own config and every weight, checked against the task's tokenizer and
// lengths, and the training memory checked, before training starts.
models::EncoderDecoderModel init_encoder_decoder(const std::string& path, int64_t vocab, int64_t truncate,
                                                 int64_t pad, const TrainerOptions& options) {
  auto loaded = io::load_model(path);
  auto impl = std::dynamic_pointer_cast<models::EncoderDecoderModelImpl>(loaded.model);
  if (!impl)
    throw Error(fmt::format("model.init {}: task 'translation' needs an encoder-decoder; this is an {} model", path,
                            models::to_string(loaded.model->shape())));
  const auto& c = impl->config();
  for (const auto* stack : {&c.encoder, &c.decoder}) check_init_stack(path, *stack, vocab, truncate);
  const int64_t start = c.decoder_start_token_id >= 0 ? c.decoder_start_token_id : c.decoder.pad_token_id;
  if (c.decoder.pad_token_id != pad || start != pad)
    throw Error(fmt::format("model.init {}: its padding / decoder start tokens are {} / {}, the tokenizer's padding "
                            "token {} (the task starts the decoder from the padding token)",
                            path, c.decoder.pad_token_id, start, pad));
  check_training_memory(c, options, fmt::format("model.init {}", path), memory_budget());
  fmt::print(stderr, "init: the encoder-decoder of {} ({} layout), every weight\n", path, loaded.format);
  return models::EncoderDecoderModel(impl);
}

}  // namespace

std::unique_ptr<TrainingTask> make_translation(const RunConfig& config) {
  const auto& t = config.task;
  const auto& m = config.model;
  // Settings first, before anything is read or allocated.
  if (t.data.empty()) throw Error("task 'translation' needs task.data (the training TSV: source<TAB>target)");
  if (t.truncate < 2) throw Error("task 'translation' needs task.truncate >= 2");
  if (!(t.label_smoothing >= 0.0 && t.label_smoothing < 1.0))
    throw Error(fmt::format("task.label_smoothing must be in [0, 1) (got {})", t.label_smoothing));
  if (t.beams < 1) throw Error(fmt::format("task.beams must be >= 1 (got {})", t.beams));
  if (!std::isfinite(t.length_penalty))
    throw Error(fmt::format("task.length_penalty must be finite (got {})", t.length_penalty));
  if (m.family->preset)
    throw Error(fmt::format("task 'translation' trains an encoder-decoder Transformer: model.family must be "
                            "empty or transformer (got '{}'; pre- or post-LN: model.pre_ln)",
                            m.family.text()));
  if (m.init.empty()) check_model_size_settings(m);
  if (m.max_positions > 0 && m.max_positions < t.truncate)
    throw Error(fmt::format("model.max_positions ({}) is below task.truncate ({}): a source or target of "
                            "task.truncate tokens would not fit the position table",
                            m.max_positions, t.truncate));
  if (m.init.empty() && (m.hidden < 1 || m.layers < 1 || m.heads < 1 || m.hidden % m.heads != 0))
    throw Error(fmt::format("model.hidden ({}) must be a positive multiple of model.heads ({})", m.hidden, m.heads));
  const layers::AttentionSpec& self_attention = m.attention.value();
  const layers::AttentionSpec cross_attention = m.cross_attention->value_or(self_attention);
  const layers::PositionEncoding positions = m.positions.value();

  auto tokenizer = task_tokenizer(config);
  // An encoder-decoder's end token (models::DecodingTraits::end_token), then the fallbacks.
  const text::EndTokenRule end_rule{"</s>", /*fallbacks=*/true};
  const auto eos = text::end_token_id(tokenizer, end_rule);
  if (!eos)
    throw Error(fmt::format("task 'translation': the tokenizer {} has no end token ({})", t.tokenizer,
                            text::end_token_names(end_rule)));
  const int64_t pad = pad_id(tokenizer);  // also the decoder's start token
  auto [train, val] = encoded_pair_files(config, tokenizer, "translation", /*source_special_tokens=*/true);
  cut_translation_pairs(train, t.truncate, t.truncate - 1);
  cut_translation_pairs(val, t.truncate, t.truncate - 1);

  const int64_t vocab = tokenizer.vocab_size();
  if (!m.init.empty())
    return std::make_unique<TranslationTask>(init_encoder_decoder(m.init, vocab, t.truncate, pad, config.trainer),
                                             config, std::move(tokenizer), std::move(train), std::move(val),
                                             *eos, pad);
  auto c = models::EncoderDecoderConfig::transformer(vocab, vocab, m.hidden, m.layers, m.heads,
                                                     m.intermediate > 0 ? m.intermediate : 4 * m.hidden,
                                                     self_attention, cross_attention);
  for (auto* stack : {&c.encoder, &c.decoder}) {
    stack->norm_first = m.pre_ln;
    stack->final_layer_norm = m.pre_ln;  // a pre-LN stack ends with a LayerNorm
    stack->positions = positions;
    stack->dropout = m.dropout;
    stack->max_positions = m.max_positions > 0 ? m.max_positions : std::max<int64_t>(t.truncate, 16);
    stack->attention.max_length = stack->max_positions;
  }
  c.decoder.cross_attention_spec.max_length = c.encoder.max_positions;
  c.encoder.pad_token_id = c.decoder.pad_token_id = pad;
  c.share_embeddings = m.share_embeddings;
  c.tie_output = true;
  c.validate();
  check_training_memory(c, config.trainer,
                        fmt::format("model.layers = {} (each stack), model.hidden = {}, model.intermediate = {}, "
                                    "vocabulary {}", m.layers, m.hidden, c.encoder.intermediate, vocab),
                        memory_budget());
  torch::manual_seed(config.trainer.seed);  // the initial weights follow the run seed
  models::EncoderDecoderModel model(c);
  return std::make_unique<TranslationTask>(model, config, std::move(tokenizer), std::move(train),
                                           std::move(val), *eos, pad);
}

}  // namespace attnkit::train::detail
