// mlm: masked-LM pretraining, RoBERTa's recipe (train/pretraining.h): text files packed into
// full blocks of task.truncate tokens ([CLS] text [SEP] when the tokenizer has them; files are
// documents, separated by [SEP]), masked afresh (whole words: "##" pieces, and Chinese words of
// task.word_list by longest match) for every micro-batch as a pure function of (run
// seed, micro-batch), a bidirectional model (any attention kind) with the masked-LM head.
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/train/pretraining.h"

#include <fmt/format.h>

namespace attnkit::train::detail {
namespace {

class MaskedLanguageModelTask : public ModelTask {
 public:
  MaskedLanguageModelTask(models::TaskModel model, const RunConfig& config, TextBlocks blocks,
                          MaskingVocabulary vocabulary, MaskingOptions options, int64_t pad)
      : ModelTask(std::move(model), config), train_(std::move(blocks.train)), val_(std::move(blocks.val)),
        vocabulary_(std::move(vocabulary)), options_(options), pad_(pad), seed_(config.trainer.seed),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {
    std::vector<const Ids*> rows;
    for (const auto& row : train_) rows.push_back(&row);
    unigram_ = UnigramScore(rows, vocabulary_.special);
  }

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const Ids*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto out = run(rows, static_cast<uint64_t>(index * world + rank));
    // A batch without a selected token (possible at a small mask_probability) teaches nothing.
    at::Tensor loss = out.labels.numel() > 0 ? models::cross_entropy(out.logits, out.labels) : out.logits.sum() * 0;
    return {loss, out.tokens};
  }

  std::map<std::string, double> evaluate() override {
    models::PredictionMetrics metrics, on_mask;
    std::vector<double> block_nll, block_tokens;
    unigram_.reset();
    for_each_batch(val_, batch_size_, [&](size_t start, const std::vector<const Ids*>& rows) {
      auto out = run(rows, kEvaluationStream + start);
      if (out.labels.numel() == 0) return;
      metrics.add(out.logits, out.labels);
      add_block_items(out, block_nll, block_tokens);
      const at::Tensor labels = out.labels.index({out.mask_input}).contiguous();
      if (labels.numel() == 0) return;
      on_mask.add(out.logits.index({out.mask_input}), labels);
      unigram_.add(labels);
    });
    if (metrics.counted() == 0) throw Error("task 'mlm': the validation blocks have no masked token");
    items_ = attnkit::metrics::perplexity_item_statistics(block_nll, block_tokens);
    const double loss = metrics.mean_loss();
    std::map<std::string, double> result = {
        {"loss", loss}, {"perplexity", std::exp(loss)}, {"masked_accuracy", metrics.accuracy()}};
    // The targets whose input is the mask token (mask_fraction of them; the others show the model
    // their own or a random token): the model there, beside the frequency baseline on the same
    // targets (metrics::unigram_baseline) — how much of the context the model uses.
    if (on_mask.counted() > 0) {
      result["mask_input_perplexity"] = std::exp(on_mask.mean_loss());
      result["mask_input_accuracy"] = on_mask.accuracy();
      unigram_.put(result);
    }
    return result;
  }
  std::string primary_metric() const override { return "perplexity"; }
  bool higher_is_better() const override { return false; }
  // Each validation block with a masked token is an item: its masked tokens' summed negative
  // log-likelihood and their count (the masks are a pure function of the run's seed, so two runs
  // of one seed score the same tokens and pair item by item).
  std::optional<metrics::ItemStatistics> evaluation_items() const override { return items_; }

 private:
  // The masked-LM logits [selected, vocab] of the selected positions only (the head's output at
  // the others is never used: at vocab 30k and 512 tokens it would be most of the step), their
  // labels [selected], the selection [rows, length], and the batch's real tokens.
  struct Output {
    at::Tensor logits, labels, selected;
    at::Tensor mask_input;  // [selected] bool: the input at the target is the mask token
    int64_t tokens = 0;
  };

  // Appends each row's summed negative log-likelihood over its selected tokens and their count,
  // for the rows with at least one.
  static void add_block_items(const Output& out, std::vector<double>& nll, std::vector<double>& tokens) {
    const at::Tensor losses = at::cross_entropy_loss(out.logits.to(at::kDouble), out.labels, {},
                                                     at::Reduction::None, models::kIgnoreLabel);
    const at::Tensor row_of = out.selected.nonzero().select(1, 0);
    const int64_t rows = out.selected.size(0);
    const at::Tensor sums = at::zeros({rows}, at::kDouble).index_add_(0, row_of, losses).contiguous();
    const at::Tensor counts = out.selected.sum(1).to(at::kDouble).contiguous();
    for (int64_t r = 0; r < rows; ++r) {
      if (counts.data_ptr<double>()[r] == 0) continue;
      nll.push_back(sums.data_ptr<double>()[r]);
      tokens.push_back(counts.data_ptr<double>()[r]);
    }
  }

  Output run(const std::vector<const Ids*>& rows, uint64_t stream) {
    auto masked = mask_tokens(rows, vocabulary_, options_, seed_, stream);
    auto [ids, mask] = models::right_padded_ids(masked.inputs, pad_);
    auto labels = models::right_padded_ids(masked.labels, models::kIgnoreLabel).ids;
    models::ModelInputs in;
    in.input_ids = ids;
    in.attention_mask = mask;
    auto& transformer = model_->transformer;
    const at::Tensor hidden = transformer->forward(in).last_hidden_state;
    const at::Tensor selected = labels.ne(models::kIgnoreLabel);
    const at::Tensor logits = model_->masked_lm->forward(hidden.index({selected}), transformer->word_embeddings());
    return {logits, labels.index({selected}), selected, ids.index({selected}).eq(vocabulary_.mask_id),
            mask.sum().item<int64_t>()};
  }
  std::vector<Ids> train_, val_;
  MaskingVocabulary vocabulary_;
  MaskingOptions options_;
  int64_t pad_;
  uint64_t seed_;
  BatchOrder order_;
  UnigramScore unigram_;  // of the training blocks' ordinary tokens
  std::optional<metrics::ItemStatistics> items_;  // of the last evaluate()
};

}  // namespace

std::unique_ptr<TrainingTask> make_mlm(const RunConfig& config) {
  const auto& t = config.task;
  MaskingOptions options;
  options.probability = t.mask_probability;
  options.mask_fraction = t.mask_fraction;
  options.random_fraction = t.random_fraction;
  // A word list implies whole-word masking: its words and the "##" pieces are grouped together.
  options.whole_word = t.whole_word || !t.word_list.empty();
  options.validate();
  if (t.data.empty()) throw Error(fmt::format("task '{}' needs task.data (text files separated by commas)", t.name));
  auto tokenizer = task_tokenizer(config);
  auto vocabulary = masking_vocabulary(tokenizer);
  if (!t.word_list.empty()) {
    vocabulary.words = read_word_list(t.word_list, tokenizer);
  } else if (options.whole_word && std::find(vocabulary.continuation.begin(), vocabulary.continuation.end(), 1) ==
                                        vocabulary.continuation.end()) {
    throw Error("task.whole_word: the tokenizer has no WordPiece \"##\" pieces to group into words");
  }
  const auto cls = special_id(tokenizer, {"[CLS]", "<s>"});
  const auto sep = special_id(tokenizer, {"[SEP]", "</s>"});
  auto blocks = text_blocks(config, tokenizer, t.truncate - (cls ? 1 : 0) - (sep ? 1 : 0), sep);
  for (auto* set : {&blocks.train, &blocks.val})
    for (auto& b : *set) {
      if (cls) b.insert(b.begin(), *cls);
      if (sep) b.push_back(*sep);
    }
  models::HeadsConfig heads;
  heads.masked_lm = true;
  // Two token types, as BERT has: the checkpoint fine-tunes on pair tasks (span, seq2seq) and
  // loads as a Hugging Face BertForMaskedLM. RoBERTa has one (its pair template gives every token
  // type 0), and a model.init keeps its own table (the task feeds type 0 only).
  const bool one_type = !config.model.init.empty() || config.model.family->preset == models::ModelFamily::Roberta;
  const int64_t pad = pad_id(tokenizer);
  // The model's pad_token_id is the tokenizer's: RoBERTa's positions skip the padding.
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, false, heads, one_type ? 1 : 2, pad);
  return std::make_unique<MaskedLanguageModelTask>(model, config, std::move(blocks), std::move(vocabulary),
                                                   options, pad);
}

}  // namespace attnkit::train::detail
