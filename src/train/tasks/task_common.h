#pragma once
// The machinery the training tasks of src/train/tasks/ share (internal to the train layer, not a
// public header): the data order, the model-owning task base and the two generic tasks
// (whole-sequence classification, causal LM over aligned rows), model building, tokenizer and
// data-file helpers, and the factory of each task family, which registry.cpp's table names.
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/metrics/metrics.h"
#include "attnkit/models/batching.h"
#include "attnkit/models/prediction_metrics.h"
#include "attnkit/text/tokenizer.h"
#include "attnkit/train/run_config.h"
#include "attnkit/data/text_datasets.h"
#include "attnkit/train/trainer.h"
#include "attnkit/train/translation.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::train::detail {

// The random streams of evaluation (mlm, plm): validation blocks are masked or permuted with
// streams of their own, the same at every evaluation.
constexpr uint64_t kEvaluationStream = uint64_t{1} << 62;

using Ids = std::vector<int64_t>;

// Which examples micro-batch `index` of `rank` reads: positions g·B .. g·B+B-1 (g = index·world
// + rank) of the endless sequence of per-epoch permutations of 0..N-1.
class BatchOrder {
 public:
  BatchOrder(size_t examples, int64_t batch_size, uint64_t seed)
      : examples_(examples), batch_(batch_size), seed_(seed) {
    if (examples == 0) throw Error("training data is empty");
  }
  std::vector<size_t> batch(int64_t index, int rank, int world) {
    std::vector<size_t> out;
    const uint64_t first = static_cast<uint64_t>((index * world + rank) * batch_);
    for (int64_t i = 0; i < batch_; ++i) {
      const uint64_t position = first + static_cast<uint64_t>(i);
      out.push_back(permutation(position / examples_)[position % examples_]);
    }
    return out;
  }

 private:
  const std::vector<size_t>& permutation(uint64_t epoch) {
    if (epoch != epoch_ || order_.empty()) {
      order_.resize(examples_);
      std::iota(order_.begin(), order_.end(), size_t{0});
      std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + epoch + 1);
      // Fisher-Yates with our own draws, so every platform shuffles alike.
      for (size_t i = examples_; i > 1; --i) std::swap(order_[i - 1], order_[rng() % i]);
      epoch_ = epoch;
    }
    return order_;
  }
  size_t examples_;
  int64_t batch_;
  uint64_t seed_;
  uint64_t epoch_ = 0;
  std::vector<size_t> order_;
};

// Calls body(first, rows) for consecutive slices of at most `batch` rows (evaluation order).
template <typename Row, typename Body>
void for_each_batch(const std::vector<Row>& all, int64_t batch, Body body) {
  for (size_t first = 0; first < all.size(); first += static_cast<size_t>(batch)) {
    std::vector<const Row*> rows;
    for (size_t i = first; i < std::min(all.size(), first + batch); ++i) rows.push_back(&all[i]);
    body(first, rows);
  }
}

// ---------------------------------------------------------------------------------------------

class ModelTask : public TrainingTask {
 public:
  ModelTask(models::TaskModel model, const RunConfig& config)
      : model_(std::move(model)), batch_size_(config.task.batch_size) {}
  torch::nn::Module& module() override { return *model_; }
  std::map<std::string, std::string> checkpoint_metadata() const override {
    return io::attnkit_metadata(*model_);
  }
  std::shared_ptr<models::Model> trained_model() const override { return model_.ptr(); }
  models::TaskModel model() const { return model_; }

 protected:
  models::TaskModel model_;
  int64_t batch_size_;
};

// Whole-sequence classification (ListOps, text classification).
class ClassificationTask : public ModelTask {
 public:
  ClassificationTask(models::TaskModel model, const RunConfig& config, std::vector<Ids> train_ids,
                     std::vector<int64_t> train_labels, std::vector<Ids> val_ids,
                     std::vector<int64_t> val_labels, int64_t pad)
      : ModelTask(std::move(model), config), train_ids_(std::move(train_ids)),
        train_labels_(std::move(train_labels)), val_ids_(std::move(val_ids)),
        val_labels_(std::move(val_labels)), pad_(pad),
        order_(train_ids_.size(), config.task.batch_size, config.trainer.seed) {}

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const Ids*> rows;
    std::vector<int64_t> labels;
    for (size_t i : order_.batch(index, rank, world)) {
      rows.push_back(&train_ids_[i]);
      labels.push_back(train_labels_[i]);
    }
    auto [logits, mask] = run(rows);
    return {models::cross_entropy(logits, torch::tensor(labels, at::kLong)), mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    models::PredictionMetrics metrics;
    metrics.record_rows();
    for_each_batch(val_ids_, batch_size_, [&](size_t start, const std::vector<const Ids*>& rows) {
      auto labels = torch::tensor(std::vector<int64_t>(val_labels_.begin() + start,
                                                       val_labels_.begin() + start + rows.size()),
                                  at::kLong);
      metrics.add(run(rows).first, labels);
    });
    // Each example right or not (1 of 1): the items of a paired bootstrap of accuracy.
    items_ = attnkit::metrics::accuracy_item_statistics(metrics.row_correct(), metrics.row_counts());
    return {{"accuracy", metrics.accuracy()}, {"loss", metrics.mean_loss()}};
  }
  std::string primary_metric() const override { return "accuracy"; }
  bool higher_is_better() const override { return true; }
  std::optional<metrics::ItemStatistics> evaluation_items() const override { return items_; }

 private:
  std::pair<at::Tensor, at::Tensor> run(const std::vector<const Ids*>& rows) {
    auto [ids, mask] = models::right_padded_ids(rows, pad_);
    models::TaskInputs in;
    in.input_ids = ids;
    in.attention_mask = mask;
    return {model_->forward(in).sequence_logits, mask};
  }
  std::vector<Ids> train_ids_;
  std::vector<int64_t> train_labels_;
  std::vector<Ids> val_ids_;
  std::vector<int64_t> val_labels_;
  int64_t pad_;
  BatchOrder order_;
  std::optional<metrics::ItemStatistics> items_;  // of the last evaluate() (each example: right, 1)
};

// A language model's targets scored by the frequency baseline of its training targets
// (metrics::unigram_baseline), beside the model: unigram_perplexity and unigram_accuracy.
class UnigramScore {
 public:
  UnigramScore() = default;
  UnigramScore(const std::vector<const Ids*>& training_targets, const std::vector<char>& excluded)
      : baseline_(metrics::unigram_baseline(training_targets, excluded)) {}
  void reset() {
    nll_ = 0;
    right_ = 0;
    counted_ = 0;
  }
  // targets: int64 ids; kIgnoreLabel entries are skipped.
  void add(const at::Tensor& targets) {
    const at::Tensor ids = targets.contiguous();
    const int64_t* p = ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < ids.numel(); ++i) {
      if (p[i] == models::kIgnoreLabel) continue;
      nll_ -= baseline_.log_probability.at(static_cast<size_t>(p[i]));
      right_ += p[i] == baseline_.most_frequent;
      ++counted_;
    }
  }
  void put(std::map<std::string, double>& out) const {
    if (counted_ == 0) return;
    out["unigram_perplexity"] = std::exp(nll_ / static_cast<double>(counted_));
    out["unigram_accuracy"] = static_cast<double>(right_) / static_cast<double>(counted_);
  }

 private:
  metrics::UnigramBaseline baseline_;
  double nll_ = 0;
  int64_t right_ = 0, counted_ = 0;
};

// Causal LM over (input, target) rows already aligned: targets[t] is what position t predicts
// (kIgnoreLabel where nothing is predicted); a class-conditional model (conditional-lm) takes each
// row's condition class (HeadsConfig::condition_classes).
struct LmRow {
  Ids input;
  Ids target;
  int64_t condition = -1;  // -1: none
};

class LanguageModelTask : public ModelTask {
 public:
  LanguageModelTask(models::TaskModel model, const RunConfig& config, std::vector<LmRow> train,
                    std::vector<LmRow> val, int64_t pad, bool sequence_metric)
      : ModelTask(std::move(model), config), train_(std::move(train)), val_(std::move(val)),
        pad_(pad), sequence_metric_(sequence_metric),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {
    if (sequence_metric_) return;
    std::vector<const Ids*> targets;
    for (const auto& row : train_) targets.push_back(&row.target);
    unigram_ = UnigramScore(targets, std::vector<char>(static_cast<size_t>(model_->config().vocab_size), 0));
  }

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const LmRow*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [logits, targets, mask] = run(rows);
    return {models::cross_entropy(logits, targets), mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    models::PredictionMetrics metrics;
    if (!sequence_metric_) metrics.record_rows();
    unigram_.reset();
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const LmRow*>& rows) {
      auto [logits, targets, mask] = run(rows);
      metrics.add(logits, targets);
      if (!sequence_metric_) unigram_.add(targets);
    });
    if (metrics.counted() == 0) throw Error("evaluation data has no target tokens");
    if (!sequence_metric_)
      items_ = attnkit::metrics::perplexity_item_statistics(metrics.row_loss_sums(), metrics.row_counts());
    const double loss = metrics.mean_loss();
    std::map<std::string, double> out{{"loss", loss},
                                      {"perplexity", std::exp(loss)},
                                      {"token_accuracy", metrics.accuracy()}};
    // A row is right when every counted position is.
    if (sequence_metric_)
      out["sequence_accuracy"] =
          static_cast<double>(metrics.rows_all_right()) / static_cast<double>(val_.size());
    unigram_.put(out);
    return out;
  }
  std::optional<metrics::ItemStatistics> evaluation_items() const override { return items_; }
  std::string primary_metric() const override {
    return sequence_metric_ ? "sequence_accuracy" : "perplexity";
  }
  bool higher_is_better() const override { return sequence_metric_; }

 private:
  std::tuple<at::Tensor, at::Tensor, at::Tensor> run(const std::vector<const LmRow*>& rows) {
    std::vector<const Ids*> inputs, targets;
    std::vector<int64_t> conditions;
    for (const auto* r : rows) {
      inputs.push_back(&r->input);
      targets.push_back(&r->target);
      conditions.push_back(r->condition);
    }
    auto [ids, mask] = models::right_padded_ids(inputs, pad_);
    auto target = models::right_padded_ids(targets, models::kIgnoreLabel).ids;
    models::TaskInputs in;
    in.input_ids = ids;
    // Full rows (the lm task's packed blocks) need no key padding: a causal model then attends as
    // without a mask, and kinds that take none (linear attention with rotary positions: a
    // linearized Llama-family model) train too.
    if (!mask.all().item<bool>()) in.attention_mask = mask;
    if (!conditions.empty() && conditions.front() >= 0) in.condition_ids = torch::tensor(conditions, at::kLong);
    return {model_->forward(in).causal_lm_logits, target, mask};
  }
  std::vector<LmRow> train_;
  std::vector<LmRow> val_;
  int64_t pad_;
  bool sequence_metric_;
  BatchOrder order_;
  std::optional<metrics::ItemStatistics> items_;  // of the last evaluate() (perplexity rows)
  UnigramScore unigram_;  // the training targets' frequency baseline (not for sequence_metric)
};

// model.init's checks of one stack of the model at `path` against the task: the tokenizer's
// `vocab` ids fit its vocabulary, inputs of `longest` tokens its learned positions.
void check_init_stack(const std::string& path, const models::TransformerConfig& stack, int64_t vocab,
                      int64_t longest);

// The model of a task: torch's seed set from the run's, then model_config() with `token_types`
// token types and `heads`; `pad_token_id`, when given, is the model's (TransformerConfig::
// set_pad_token_id: RoBERTa's positions follow it).
models::TaskModel build_model(const RunConfig& config, int64_t vocab, int64_t longest, bool causal,
                              const models::HeadsConfig& heads, int64_t token_types = 0,
                              std::optional<int64_t> pad_token_id = std::nullopt);

// Heads of a whole-sequence classifier with `labels` classes (model.pooling, model.dropout).
models::HeadsConfig classification_heads(const RunConfig& config, int64_t labels);

// Throws "model.NAME: V is larger than 2^40" for a size setting beyond 2^40 (such sizes would
// overflow the products of the model's shapes; the memory check refuses far smaller ones) and
// "model.key_size: V must be at least 1" for a negative key or value size.
void check_model_size_settings(const ModelSettings& m);

// The tokenizer task.tokenizer names; Error naming the task when it is empty.
text::Tokenizer task_tokenizer(const RunConfig& config);

// The padding id of a tokenizer ([PAD], <pad>, <|endoftext|>, else 0).
int64_t pad_id(const text::Tokenizer& tokenizer);

// The id of the first of `names` the tokenizer knows.
std::optional<int64_t> special_id(const text::Tokenizer& tokenizer, std::initializer_list<const char*> names);

// Reading options from the run config; with task.skip_bad_lines, what was skipped is reported.
data::DataReadOptions read_options(const RunConfig& config);

void report_skipped(const std::string& what, const data::DataReadStats& stats);

template <typename Data, typename Read>
Data read_reported(const std::string& path, Read read) {
  Data data = read(path);
  report_skipped(path, data.stats);
  return data;
}

// task.data and its evaluation file (read_seq2seq_tsv, skipped lines reported), encoded by
// `tokenizer` (train::encode_translation_pairs: sources with its special tokens when
// source_special_tokens): the evaluation side keeps its first task.eval_examples pairs (0 = all).
// Error naming `task` when either side is left empty.
std::pair<std::vector<TranslationPair>, std::vector<TranslationPair>> encoded_pair_files(
    const RunConfig& config, const text::Tokenizer& tokenizer, const std::string& task,
    bool source_special_tokens = false);

// The evaluation file of a training file: "train" in its name becomes the split ("val", "test").
std::string evaluation_path(const std::string& train_path, const std::string& split);

// The factories registry.cpp's table names, one file of src/train/tasks/ each.
std::unique_ptr<TrainingTask> make_listops(const RunConfig& config);             // listops.cpp
std::unique_ptr<TrainingTask> make_text_classification(const RunConfig& config); // classification.cpp
std::unique_ptr<TrainingTask> make_tagging(const RunConfig& config);             // tagging.cpp
std::unique_ptr<TrainingTask> make_span(const RunConfig& config);                // span.cpp
std::unique_ptr<TrainingTask> make_seq2seq(const RunConfig& config);             // seq2seq.cpp
std::unique_ptr<TrainingTask> make_text_lm(const RunConfig& config);             // language_model.cpp
std::unique_ptr<TrainingTask> make_synthetic(const RunConfig& config);           // synthetic.cpp
std::unique_ptr<TrainingTask> make_mlm(const RunConfig& config);                 // mlm.cpp
std::unique_ptr<TrainingTask> make_plm(const RunConfig& config);                 // plm.cpp
std::unique_ptr<TrainingTask> make_translation(const RunConfig& config);         // translation.cpp
std::unique_ptr<TrainingTask> make_conditional_lm(const RunConfig& config);      // conditional_lm.cpp

// The text files of task.data (separated by commas) through read_language_model_data with blocks
// of `block` (+ 1) tokens and `separator` after each file when set (task.skip_bad_lines applied and
// reported); `files` receives how many files were named. With `split` ("val", "test") each file's
// evaluation_path for it instead.
data::LanguageModelData read_text_files(const RunConfig& config, const text::Tokenizer& tokenizer, size_t block,
                                  std::optional<int64_t> separator = std::nullopt, size_t* files = nullptr,
                                  const std::string& split = "");

// Pretraining text (mlm, plm): the files of task.data (separated by commas) tokenised without
// special tokens, `separator` after each file (a document) when set, and the stream of N tokens
// cut into floor((N - 1) / block) consecutive blocks of `block` tokens (read_language_model_data's
// blocks less their extra target token; the tail is dropped). Every 20th block, at
// most task.eval_examples of them, is held out for validation. One-line errors naming the task
// for an empty corpus and fewer than 2 blocks (callers check that task.data is set first).
struct TextBlocks {
  std::vector<Ids> train, val;
};
TextBlocks text_blocks(const RunConfig& config, const text::Tokenizer& tokenizer, int64_t block,
                       std::optional<int64_t> separator);
std::unique_ptr<TrainingTask> make_lra_pathfinder(const RunConfig& config);      // lra_image.cpp
std::unique_ptr<TrainingTask> make_lra_image(const RunConfig& config);           // lra_image.cpp
std::unique_ptr<TrainingTask> make_lra_text(const RunConfig& config);            // lra_text.cpp
std::unique_ptr<TrainingTask> make_lra_retrieval(const RunConfig& config);       // lra_text.cpp

}  // namespace attnkit::train::detail
