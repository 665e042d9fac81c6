#include "attnkit/train/tasks.h"

#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/train/listops.h"
#include "attnkit/train/metrics.h"
#include "attnkit/train/synthetic_tasks.h"
#include "attnkit/train/text_datasets.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

namespace attnkit::train {
namespace {

namespace fs = std::filesystem;
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

// Right-pads rows to the longest with `pad`; returns ids and the 0/1 attention mask.
std::pair<at::Tensor, at::Tensor> pad_rows(const std::vector<const Ids*>& rows, int64_t pad) {
  int64_t n = 1;
  for (const auto* r : rows) n = std::max<int64_t>(n, r->size());
  auto ids = at::full({static_cast<int64_t>(rows.size()), n}, pad, at::kLong);
  auto mask = at::zeros({static_cast<int64_t>(rows.size()), n}, at::kLong);
  for (size_t b = 0; b < rows.size(); ++b) {
    const int64_t len = rows[b]->size();
    ids[b].slice(0, 0, len).copy_(torch::tensor(*rows[b], at::kLong));
    mask[b].slice(0, 0, len).fill_(1);
  }
  return {ids, mask};
}

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
    return io::attnkit_metadata(model_);
  }
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
    double loss = 0, correct = 0;
    const size_t n = val_ids_.size();
    for_each_batch(val_ids_, batch_size_, [&](size_t start, const std::vector<const Ids*>& rows) {
      auto labels = torch::tensor(std::vector<int64_t>(val_labels_.begin() + start,
                                                       val_labels_.begin() + start + rows.size()),
                                  at::kLong);
      auto logits = run(rows).first;
      loss += models::cross_entropy(logits, labels).item<double>() * rows.size();
      correct += logits.argmax(-1).eq(labels).sum().item<double>();
    });
    return {{"accuracy", correct / n}, {"loss", loss / n}};
  }
  std::string primary_metric() const override { return "accuracy"; }
  bool higher_is_better() const override { return true; }

 private:
  std::pair<at::Tensor, at::Tensor> run(const std::vector<const Ids*>& rows) {
    auto [ids, mask] = pad_rows(rows, pad_);
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
};

// Causal LM over (input, target) rows already aligned: targets[t] is what position t predicts
// (kIgnoreLabel where nothing is predicted).
struct LmRow {
  Ids input;
  Ids target;
};

class LanguageModelTask : public ModelTask {
 public:
  LanguageModelTask(models::TaskModel model, const RunConfig& config, std::vector<LmRow> train,
                    std::vector<LmRow> val, int64_t pad, bool sequence_metric)
      : ModelTask(std::move(model), config), train_(std::move(train)), val_(std::move(val)),
        pad_(pad), sequence_metric_(sequence_metric),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {}

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const LmRow*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [logits, targets, mask] = run(rows);
    return {models::cross_entropy(logits, targets), mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    double loss_sum = 0, tokens = 0, correct = 0, sequences_right = 0;
    const size_t n = val_.size();
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const LmRow*>& rows) {
      auto [logits, targets, mask] = run(rows);
      auto counted = targets.ne(models::kIgnoreLabel);
      const double count = counted.sum().item<double>();
      if (count == 0) return;
      loss_sum += models::cross_entropy(logits, targets).item<double>() * count;
      tokens += count;
      auto right = logits.argmax(-1).eq(targets).logical_and(counted);
      correct += right.sum().item<double>();
      // A row is right when every counted position is.
      sequences_right += right.sum(1).eq(counted.sum(1)).sum().item<double>();
    });
    if (tokens == 0) throw Error("evaluation data has no target tokens");
    const double loss = loss_sum / tokens;
    std::map<std::string, double> out{{"loss", loss},
                                      {"perplexity", std::exp(loss)},
                                      {"token_accuracy", correct / tokens}};
    if (sequence_metric_) out["sequence_accuracy"] = sequences_right / n;
    return out;
  }
  std::string primary_metric() const override {
    return sequence_metric_ ? "sequence_accuracy" : "perplexity";
  }
  bool higher_is_better() const override { return sequence_metric_; }

 private:
  std::tuple<at::Tensor, at::Tensor, at::Tensor> run(const std::vector<const LmRow*>& rows) {
    std::vector<const Ids*> inputs, targets;
    for (const auto* r : rows) {
      inputs.push_back(&r->input);
      targets.push_back(&r->target);
    }
    auto [ids, mask] = pad_rows(inputs, pad_);
    auto target = pad_rows(targets, models::kIgnoreLabel).first;
    models::TaskInputs in;
    in.input_ids = ids;
    in.attention_mask = mask;
    return {model_->forward(in).causal_lm_logits, target, mask};
  }
  std::vector<LmRow> train_;
  std::vector<LmRow> val_;
  int64_t pad_;
  bool sequence_metric_;
  BatchOrder order_;
};

// ---------------------------------------------------------------------------------------------

// The task's model started from a model directory: its architecture (with any pruned heads) and
// every tensor of the same name and shape, the task's other heads freshly initialised. Prints one
// line saying what was loaded and what is new.
models::TaskModel init_model(const std::string& directory, int64_t vocab, int64_t longest,
                             const models::HeadsConfig& heads, int64_t token_types) {
  auto loaded = io::load_model(directory);
  const auto& c = loaded.config;
  if (vocab > c.vocab_size)
    throw Error(fmt::format("model.init {}: the tokenizer has {} ids but the model's vocabulary {}",
                            directory, vocab, c.vocab_size));
  if (c.positions == "learned" && longest > c.max_positions)
    throw Error(fmt::format("model.init {}: inputs of {} tokens exceed the model's {} positions "
                            "(lower task.truncate)", directory, longest, c.max_positions));
  if (token_types > std::max<int64_t>(c.type_vocab_size, 1))
    throw Error(fmt::format("model.init {}: the task uses {} token types, the model has {}",
                            directory, token_types, c.type_vocab_size));
  models::TaskModel model(c, heads);
  auto source = loaded.task->named_parameters(true);
  auto source_buffers = loaded.task->named_buffers(true);
  int64_t count = 0, values = 0;
  std::vector<std::string> fresh;
  torch::NoGradGuard no_grad;
  auto copy = [&](const std::string& name, at::Tensor& target,
                  const torch::OrderedDict<std::string, at::Tensor>& from) {
    const auto* value = from.find(name);
    if (value == nullptr || value->sizes() != target.sizes()) return false;
    target.copy_(*value);
    ++count;
    values += target.numel();
    return true;
  };
  for (auto& p : model->named_parameters(true))
    if (!copy(p.key(), p.value(), source)) fresh.push_back(p.key());
  for (auto& b : model->named_buffers(true)) copy(b.key(), b.value(), source_buffers);
  fmt::print(stderr, "init: {} tensors ({} values) from {} ({} layout); new: {}\n", count, values,
             directory, loaded.format, fresh.empty() ? std::string("none") : fmt::format("{}", fmt::join(fresh, ", ")));
  return model;
}

models::TaskModel build_model(const RunConfig& config, int64_t vocab, int64_t longest, bool causal,
                              const models::HeadsConfig& heads, int64_t token_types = 0) {
  torch::manual_seed(config.trainer.seed);  // the initial weights follow the run seed
  if (!config.model.init.empty()) return init_model(config.model.init, vocab, longest, heads, token_types);
  auto c = model_config(config, vocab, longest, causal);
  c.type_vocab_size = token_types;
  return models::TaskModel(c, heads);
}

models::HeadsConfig classification_heads(const RunConfig& config, int64_t labels) {
  models::HeadsConfig heads;
  heads.sequence_labels = labels;
  heads.sequence_pooling = models::parse_pooling(config.model.pooling);
  heads.classifier_dropout = config.model.dropout;
  return heads;
}

std::unique_ptr<TrainingTask> make_listops(const RunConfig& config) {
  const auto& t = config.task;
  std::vector<ListOpsExample> train, val;
  if (!t.data.empty()) {
    auto file = [&](const char* split) {
      for (const char* prefix : {"basic_", ""}) {
        auto p = fs::path(t.data) / fmt::format("{}{}.tsv", prefix, split);
        if (fs::exists(p)) return p.string();
      }
      throw Error(fmt::format("{}: no basic_{}.tsv (write it with `attnkit data listops --out {}`)",
                              t.data, split, t.data));
    };
    train = read_listops_tsv(file("train"));
    val = read_listops_tsv(file(t.eval_split.c_str()));
    if (t.eval_examples > 0 && static_cast<int64_t>(val.size()) > t.eval_examples) val.resize(t.eval_examples);
  } else {
    ListOpsOptions options;
    options.min_length = t.min_length;
    options.max_length = t.max_length;
    ListOpsGenerator train_generator(options, config.trainer.seed * 2 + 1);
    for (int64_t i = 0; i < t.train_examples; ++i) train.push_back(train_generator.next());
    ListOpsGenerator val_generator(options, config.trainer.seed * 2 + 2);
    val_generator.avoid(train_generator.fingerprints());
    for (int64_t i = 0; i < t.eval_examples; ++i) val.push_back(val_generator.next());
  }
  auto encode = [&](const std::vector<ListOpsExample>& examples, std::vector<Ids>& ids,
                    std::vector<int64_t>& labels) {
    for (const auto& e : examples) {
      auto row = ListOpsVocabulary::encode(e.source);
      if (static_cast<int64_t>(row.size()) > t.truncate) row.resize(t.truncate);
      ids.push_back(std::move(row));
      labels.push_back(e.target);
    }
  };
  std::vector<Ids> train_ids, val_ids;
  std::vector<int64_t> train_labels, val_labels;
  encode(train, train_ids, train_labels);
  encode(val, val_ids, val_labels);
  int64_t longest = 1;
  for (const auto* set : {&train_ids, &val_ids})
    for (const auto& r : *set) longest = std::max<int64_t>(longest, r.size());
  auto model = build_model(config, ListOpsVocabulary::kSize, longest, false,
                           classification_heads(config, ListOpsVocabulary::kNumClasses));
  return std::make_unique<ClassificationTask>(model, config, std::move(train_ids), std::move(train_labels),
                                              std::move(val_ids), std::move(val_labels),
                                              ListOpsVocabulary::kPad);
}

text::Tokenizer task_tokenizer(const RunConfig& config) {
  // Fine-tuning from a model directory: its tokenizer unless another is named.
  if (config.task.tokenizer.empty() && !config.model.init.empty())
    return text::load_tokenizer(config.model.init);
  if (config.task.tokenizer.empty())
    throw Error(fmt::format("task '{}' needs task.tokenizer (a tokenizer.json, vocab.txt or a "
                            "directory with one)", config.task.name));
  return text::load_tokenizer(config.task.tokenizer);
}

int64_t pad_id(const text::Tokenizer& tokenizer) {
  for (const char* name : {"[PAD]", "<pad>", "<|endoftext|>"})
    if (auto id = tokenizer.token_to_id(name)) return *id;
  return 0;
}

// The id of the first of `names` the tokenizer knows.
std::optional<int64_t> special_id(const text::Tokenizer& tokenizer, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (auto id = tokenizer.token_to_id(name)) return *id;
  return std::nullopt;
}

// Reading options from the run config; with task.skip_bad_lines, what was skipped is reported.
DataReadOptions read_options(const RunConfig& config) {
  DataReadOptions options;
  options.skip_bad_lines = config.task.skip_bad_lines;
  return options;
}

void report_skipped(const std::string& what, const DataReadStats& stats) {
  if (stats.skipped == 0) return;
  fmt::print(stderr, "{}: skipped {} bad line(s) (task.skip_bad_lines), e.g. {}\n", what, stats.skipped,
             stats.skipped_messages.empty() ? std::string("?") : stats.skipped_messages.front());
}

template <typename Data, typename Read>
Data read_reported(const std::string& path, Read read) {
  Data data = read(path);
  report_skipped(path, data.stats);
  return data;
}

// Token tagging (NER-style BIO tags): each word is tokenised on its own; its first sub-word
// carries the word's tag, the others and the special tokens are ignored in the loss and in the
// scores, which are per word (seqeval's entity F1 and token accuracy).
struct TaggedRow {
  Ids ids;
  Ids labels;                 // per token: tag id on a word's first sub-word, else kIgnoreLabel
  std::vector<int64_t> tags;  // per word kept (truncation may drop trailing words)
};

class TaggingTask : public ModelTask {
 public:
  TaggingTask(models::TaskModel model, const RunConfig& config, std::vector<TaggedRow> train,
              std::vector<TaggedRow> val, std::vector<std::string> tag_names, int64_t pad)
      : ModelTask(std::move(model), config), train_(std::move(train)), val_(std::move(val)),
        tag_names_(std::move(tag_names)), pad_(pad),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {}

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const TaggedRow*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [logits, labels, mask] = run(rows);
    return {models::cross_entropy(logits, labels), mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    double loss = 0;
    std::vector<std::vector<std::string>> predicted, gold;
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const TaggedRow*>& rows) {
      auto [logits, labels, mask] = run(rows);
      loss += models::cross_entropy(logits, labels).item<double>() * rows.size();
      auto best = logits.argmax(-1);
      for (size_t b = 0; b < rows.size(); ++b) {
        std::vector<int64_t> words;
        for (size_t t = 0; t < rows[b]->labels.size(); ++t)
          if (rows[b]->labels[t] != models::kIgnoreLabel) words.push_back(best[b][t].item<int64_t>());
        predicted.push_back(tag_names(words, tag_names_));
        gold.push_back(tag_names(rows[b]->tags, tag_names_));
      }
    });
    const auto scores = tagging_scores(predicted, gold);
    return {{"loss", loss / static_cast<double>(val_.size())},
            {"f1", scores.entities.f1},
            {"precision", scores.entities.precision},
            {"recall", scores.entities.recall},
            {"token_accuracy", scores.token_accuracy}};
  }
  std::string primary_metric() const override { return "f1"; }
  bool higher_is_better() const override { return true; }

 private:
  std::tuple<at::Tensor, at::Tensor, at::Tensor> run(const std::vector<const TaggedRow*>& rows) {
    std::vector<const Ids*> ids, labels;
    for (const auto* r : rows) {
      ids.push_back(&r->ids);
      labels.push_back(&r->labels);
    }
    auto [input, mask] = pad_rows(ids, pad_);
    models::TaskInputs in;
    in.input_ids = input;
    in.attention_mask = mask;
    return {model_->forward(in).token_logits, pad_rows(labels, models::kIgnoreLabel).first, mask};
  }
  std::vector<TaggedRow> train_, val_;
  std::vector<std::string> tag_names_;
  int64_t pad_;
  BatchOrder order_;
};

// The evaluation file of a training file: "train" in its name becomes the split ("val", "test").
std::string evaluation_path(const std::string& train_path, const std::string& split) {
  std::string path = train_path;
  const auto at = path.rfind("train");
  if (at == std::string::npos)
    throw Error(fmt::format("{}: the file name must contain 'train' (the validation file replaces "
                            "it with 'val', the test file with 'test')",
                            train_path));
  return path.replace(at, 5, split);
}

std::unique_ptr<TrainingTask> make_tagging(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'tagging' needs task.data (the training file)");
  auto tokenizer = task_tokenizer(config);
  const auto options = read_options(config);
  auto train = read_reported<TaggingData>(t.data, [&](const std::string& p) { return read_tagging(p, {}, options); });
  auto val = read_reported<TaggingData>(evaluation_path(t.data, t.eval_split), [&](const std::string& p) {
    return read_tagging(p, train.tags, options);
  });
  const auto cls = special_id(tokenizer, {"[CLS]", "<s>"});
  const auto sep = special_id(tokenizer, {"[SEP]", "</s>"});
  auto encode = [&](const TaggingData& data, int64_t limit) {
    std::vector<TaggedRow> rows;
    for (const auto& e : data.examples) {
      if (limit > 0 && static_cast<int64_t>(rows.size()) >= limit) break;
      TaggedRow row;
      auto push = [&](int64_t id, int64_t label) {
        row.ids.push_back(id);
        row.labels.push_back(label);
      };
      if (cls) push(*cls, models::kIgnoreLabel);
      const int64_t room = t.truncate - (sep ? 1 : 0);
      for (size_t w = 0; w < e.tokens.size(); ++w) {
        const auto pieces = tokenizer.encode(e.tokens[w], /*add_special_tokens=*/false).ids;
        if (pieces.empty()) continue;  // a word the tokenizer drops entirely has no position
        if (static_cast<int64_t>(row.ids.size() + pieces.size()) > room) break;
        for (size_t i = 0; i < pieces.size(); ++i) push(pieces[i], i == 0 ? e.tags[w] : models::kIgnoreLabel);
        row.tags.push_back(e.tags[w]);
      }
      if (sep) push(*sep, models::kIgnoreLabel);
      rows.push_back(std::move(row));
    }
    return rows;
  };
  auto train_rows = encode(train, 0), val_rows = encode(val, t.eval_examples);
  models::HeadsConfig heads;
  heads.token_labels = static_cast<int64_t>(train.tags.size());
  heads.classifier_dropout = config.model.dropout;
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, false, heads);
  return std::make_unique<TaggingTask>(model, config, std::move(train_rows), std::move(val_rows),
                                       train.tags, pad_id(tokenizer));
}

// Extractive QA (SQuAD JSON): encode_pair(question, context) truncated in the context, start and
// end labels on the first answer's tokens ([CLS], position 0, when there is none or it was cut
// away). Predictions take the best start <= end within the context (at most kMaxAnswerTokens
// long), map back to the context's characters and are scored with SQuAD's exact match and F1.
struct SpanRow {
  Ids ids;
  int64_t start = 0, end = 0;
  std::vector<std::pair<uint32_t, uint32_t>> offsets;  // per token, characters of the context
  std::vector<int32_t> sequence_ids;
  const SquadExample* example = nullptr;
};

// Characters [begin, end) (Unicode code points) of UTF-8 text.
std::string code_point_substring(const std::string& text, size_t begin, size_t end) {
  size_t cp = 0, from = text.size(), to = text.size();
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (cp == begin) from = std::min(from, i);
    if (cp == end) {
      to = i;
      break;
    }
    ++cp;
  }
  return from < to ? text.substr(from, to - from) : std::string();
}

class SpanTask : public ModelTask {
 public:
  static constexpr int64_t kMaxAnswerTokens = 30;

  SpanTask(models::TaskModel model, const RunConfig& config, SquadData train, SquadData val,
           std::vector<SpanRow> train_rows, std::vector<SpanRow> val_rows, int64_t pad)
      : ModelTask(std::move(model), config), train_data_(std::move(train)), val_data_(std::move(val)),
        train_(std::move(train_rows)), val_(std::move(val_rows)), pad_(pad),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {}

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const SpanRow*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [start_logits, end_logits, mask] = run(rows);
    auto [starts, ends] = positions(rows);
    return {models::span_loss(start_logits, end_logits, starts, ends), mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    double loss = 0;
    std::vector<std::string> predictions;
    std::vector<std::vector<std::string>> gold;
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const SpanRow*>& rows) {
      auto [start_logits, end_logits, mask] = run(rows);
      auto [starts, ends] = positions(rows);
      loss += models::span_loss(start_logits, end_logits, starts, ends).item<double>() * rows.size();
      auto start_cpu = start_logits.to(at::kDouble).contiguous(), end_cpu = end_logits.to(at::kDouble).contiguous();
      for (size_t b = 0; b < rows.size(); ++b) {
        predictions.push_back(predict(*rows[b], start_cpu[b].data_ptr<double>(), end_cpu[b].data_ptr<double>()));
        std::vector<std::string> answers;
        for (const auto& a : rows[b]->example->answers) answers.push_back(a.text);
        gold.push_back(std::move(answers));
      }
    });
    const auto scores = squad_scores(predictions, gold);
    return {{"loss", loss / static_cast<double>(val_.size())},
            {"exact_match", scores.exact_match},
            {"f1", scores.f1}};
  }
  std::string primary_metric() const override { return "f1"; }
  bool higher_is_better() const override { return true; }

 private:
  // The best-scoring span inside the context, as text of the context ("" when none fits).
  static std::string predict(const SpanRow& row, const double* start, const double* end) {
    double best = -std::numeric_limits<double>::infinity();
    int64_t best_s = -1, best_e = -1;
    const int64_t n = static_cast<int64_t>(row.ids.size());
    for (int64_t s = 0; s < n; ++s) {
      if (row.sequence_ids[s] != 1) continue;
      for (int64_t e = s; e < std::min(n, s + kMaxAnswerTokens); ++e) {
        if (row.sequence_ids[e] != 1) break;
        if (start[s] + end[e] > best) {
          best = start[s] + end[e];
          best_s = s;
          best_e = e;
        }
      }
    }
    if (best_s < 0) return {};
    return code_point_substring(row.example->context, row.offsets[best_s].first, row.offsets[best_e].second);
  }
  std::pair<at::Tensor, at::Tensor> positions(const std::vector<const SpanRow*>& rows) const {
    std::vector<int64_t> starts, ends;
    for (const auto* r : rows) {
      starts.push_back(r->start);
      ends.push_back(r->end);
    }
    return {torch::tensor(starts, at::kLong), torch::tensor(ends, at::kLong)};
  }
  std::tuple<at::Tensor, at::Tensor, at::Tensor> run(const std::vector<const SpanRow*>& rows) {
    std::vector<const Ids*> ids;
    for (const auto* r : rows) ids.push_back(&r->ids);
    auto [input, mask] = pad_rows(ids, pad_);
    models::TaskInputs in;
    in.input_ids = input;
    in.attention_mask = mask;
    auto out = model_->forward(in);
    // Padding can never be a prediction or a label.
    const auto blocked = mask.eq(0);
    return {out.start_logits.masked_fill(blocked, -1e4), out.end_logits.masked_fill(blocked, -1e4), mask};
  }
  SquadData train_data_, val_data_;  // the rows point into these
  std::vector<SpanRow> train_, val_;
  int64_t pad_;
  BatchOrder order_;
};

std::unique_ptr<TrainingTask> make_span(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'span' needs task.data (the SQuAD-style training JSON)");
  auto tokenizer = task_tokenizer(config);
  text::TruncationOptions truncation;
  truncation.max_length = static_cast<size_t>(t.truncate);
  truncation.strategy = text::TruncationStrategy::kOnlySecond;  // cut the context, keep the question
  tokenizer.set_truncation(truncation);
  tokenizer.set_padding(std::nullopt);
  const auto options = read_options(config);
  auto train = read_reported<SquadData>(t.data, [&](const std::string& p) { return read_squad_json(p, options); });
  auto val = read_reported<SquadData>(evaluation_path(t.data, t.eval_split),
                                      [&](const std::string& p) { return read_squad_json(p, options); });
  if (t.eval_examples > 0 && static_cast<int64_t>(val.examples.size()) > t.eval_examples)
    val.examples.resize(t.eval_examples);
  auto features = [&](const SquadData& data) {
    std::vector<SpanRow> rows;
    for (const auto& example : data.examples) {
      const auto f = make_squad_feature(tokenizer, example);
      SpanRow row;
      row.ids.assign(f.encoding.ids.begin(), f.encoding.ids.end());
      row.start = static_cast<int64_t>(f.start_position);
      row.end = static_cast<int64_t>(f.end_position);
      row.offsets = f.encoding.offsets;
      row.sequence_ids = f.encoding.sequence_ids;
      row.example = &example;
      rows.push_back(std::move(row));
    }
    return rows;
  };
  auto train_rows = features(train), val_rows = features(val);
  models::HeadsConfig heads;
  heads.span = true;
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, false, heads);
  const int64_t pad = pad_id(tokenizer);
  // The rows point at examples inside the SquadData objects; moving a vector keeps its elements.
  return std::make_unique<SpanTask>(model, config, std::move(train), std::move(val), std::move(train_rows),
                                    std::move(val_rows), pad);
}

// UniLM seq2seq (Dong et al. 2019) on "source<TAB>target" pairs: a BERT-family model whose
// masked-LM head predicts the next target token under the UniLM mask (token types 0 = source,
// 1 = target; see models::unilm_batch). A pair longer than task.truncate loses tokens from the end
// of its longer side first. Evaluation: loss, perplexity and token accuracy of the target under
// teacher forcing, and corpus BLEU (4-gram) of greedy decodes against the (possibly cut) target,
// both taken as the whitespace-separated words of the tokenizer's decoded text. Decoding stops at
// [SEP], at the longest training target, or at task.truncate tokens of input.
struct PairRow {
  Ids source, target;
};

class Seq2SeqTask : public ModelTask {
 public:
  Seq2SeqTask(models::TaskModel model, const RunConfig& config, text::Tokenizer tokenizer,
              std::vector<PairRow> train, std::vector<PairRow> val, int64_t cls, int64_t sep, int64_t pad)
      : ModelTask(std::move(model), config), tokenizer_(std::move(tokenizer)), train_(std::move(train)),
        val_(std::move(val)), cls_(cls), sep_(sep), pad_(pad), max_length_(config.task.truncate),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {
    for (const auto& r : train_) longest_target_ = std::max<int64_t>(longest_target_, r.target.size());
  }

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const PairRow*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [logits, batch] = run(rows);
    return {models::cross_entropy(logits, batch.targets), batch.attention_mask.sum().item<int64_t>()};
  }

  std::map<std::string, double> evaluate() override {
    double loss_sum = 0, tokens = 0, correct = 0;
    std::vector<std::vector<std::string>> hypotheses;
    std::vector<std::vector<std::vector<std::string>>> references;
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const PairRow*>& rows) {
      auto [logits, batch] = run(rows);
      const auto counted = batch.targets.ne(models::kIgnoreLabel);
      const double count = counted.sum().item<double>();
      loss_sum += models::cross_entropy(logits, batch.targets).item<double>() * count;
      tokens += count;
      correct += logits.argmax(-1).eq(batch.targets).logical_and(counted).sum().item<double>();
      std::vector<Ids> sources;
      for (const auto* r : rows) sources.push_back(r->source);
      const auto decoded =
          decode::unilm_greedy(model_, sources, cls_, sep_, pad_, longest_target_, max_length_);
      for (size_t b = 0; b < rows.size(); ++b) {
        hypotheses.push_back(words(decoded[b]));
        references.push_back({words(rows[b]->target)});
      }
    });
    const double loss = loss_sum / tokens;
    return {{"loss", loss},
            {"perplexity", std::exp(loss)},
            {"token_accuracy", correct / tokens},
            {"bleu", corpus_bleu(hypotheses, references).score}};
  }
  std::string primary_metric() const override { return "bleu"; }
  bool higher_is_better() const override { return true; }

 private:
  std::vector<std::string> words(const Ids& ids) const {
    const std::string text = tokenizer_.decode(std::vector<uint32_t>(ids.begin(), ids.end()));
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  }
  std::pair<at::Tensor, models::UnilmBatch> run(const std::vector<const PairRow*>& rows) {
    std::vector<Ids> sources, targets;
    for (const auto* r : rows) {
      sources.push_back(r->source);
      targets.push_back(r->target);
    }
    auto batch = models::unilm_batch(sources, targets, cls_, sep_, pad_);
    models::TaskInputs in;
    in.input_ids = batch.input_ids;
    in.token_type_ids = batch.token_type_ids;
    in.attention_mask = batch.attention_mask;
    in.mask = batch.mask;
    return {model_->forward(in).masked_lm_logits, std::move(batch)};
  }
  text::Tokenizer tokenizer_;
  std::vector<PairRow> train_, val_;
  int64_t cls_, sep_, pad_, max_length_;
  int64_t longest_target_ = 1;
  BatchOrder order_;
};

std::unique_ptr<TrainingTask> make_seq2seq(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'seq2seq' needs task.data (the training TSV: source<TAB>target)");
  if (t.truncate < 5) throw Error("task 'seq2seq' needs task.truncate >= 5 ([CLS] src [SEP] tgt [SEP])");
  const auto spec = layers::AttentionSpec::parse(config.model.attention);
  if (spec.kind == layers::AttentionKind::Linear || spec.kind == layers::AttentionKind::Cosformer)
    throw Error(fmt::format("task 'seq2seq' trains UniLM, whose source/target mask needs a softmax "
                            "or synthesizer attention kind (model.attention = '{}')",
                            config.model.attention));
  auto tokenizer = task_tokenizer(config);
  const auto cls = special_id(tokenizer, {"[CLS]", "<s>"});
  const auto sep = special_id(tokenizer, {"[SEP]", "</s>"});
  if (!cls || !sep)
    throw Error(fmt::format("task 'seq2seq': the tokenizer {} has no [CLS]/<s> or no [SEP]/</s> token",
                            t.tokenizer));
  const auto options = read_options(config);
  auto read = [&](const std::string& p) { return read_seq2seq_tsv(p, options); };
  const auto train = read_reported<Seq2SeqData>(t.data, read);
  const auto val = read_reported<Seq2SeqData>(evaluation_path(t.data, t.eval_split), read);
  auto encode = [&](const Seq2SeqData& data, int64_t limit) {
    std::vector<PairRow> rows;
    for (const auto& e : data.examples) {
      if (limit > 0 && static_cast<int64_t>(rows.size()) >= limit) break;
      const auto s = tokenizer.encode(e.source, /*add_special_tokens=*/false).ids;
      const auto g = tokenizer.encode(e.target, /*add_special_tokens=*/false).ids;
      PairRow row{Ids(s.begin(), s.end()), Ids(g.begin(), g.end())};
      if (row.source.empty() || row.target.empty()) continue;  // nothing the tokenizer keeps
      while (static_cast<int64_t>(row.source.size() + row.target.size()) > t.truncate - 3)
        (row.source.size() >= row.target.size() ? row.source : row.target).pop_back();
      rows.push_back(std::move(row));
    }
    return rows;
  };
  auto train_rows = encode(train, 0), val_rows = encode(val, t.eval_examples);
  if (train_rows.empty() || val_rows.empty())
    throw Error(fmt::format("task 'seq2seq': no pair of {} or its evaluation file has tokens on both sides", t.data));
  models::HeadsConfig heads;
  heads.masked_lm = true;
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, false, heads, /*token_types=*/2);
  const int64_t pad = pad_id(tokenizer);
  return std::make_unique<Seq2SeqTask>(model, config, std::move(tokenizer), std::move(train_rows),
                                       std::move(val_rows), *cls, *sep, pad);
}

std::unique_ptr<TrainingTask> make_text_classification(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'classification' needs task.data (the training file)");
  auto tokenizer = task_tokenizer(config);
  const auto options = read_options(config);
  auto train = read_reported<ClassificationData>(
      t.data, [&](const std::string& p) { return read_classification(p, {}, options); });
  auto val = read_reported<ClassificationData>(evaluation_path(t.data, t.eval_split), [&](const std::string& p) {
    return read_classification(p, train.labels, options);
  });
  auto encode = [&](const ClassificationData& data, std::vector<Ids>& ids, std::vector<int64_t>& labels,
                    int64_t limit) {
    for (const auto& e : data.examples) {
      if (limit > 0 && static_cast<int64_t>(ids.size()) >= limit) break;
      auto enc = tokenizer.encode(e.text);
      Ids row(enc.ids.begin(), enc.ids.end());
      if (static_cast<int64_t>(row.size()) > t.truncate) row.resize(t.truncate);
      ids.push_back(std::move(row));
      labels.push_back(e.label);
    }
  };
  std::vector<Ids> train_ids, val_ids;
  std::vector<int64_t> train_labels, val_labels;
  encode(train, train_ids, train_labels, 0);
  encode(val, val_ids, val_labels, t.eval_examples);
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, false,
                           classification_heads(config, train.labels.size()));
  return std::make_unique<ClassificationTask>(model, config, std::move(train_ids), std::move(train_labels),
                                              std::move(val_ids), std::move(val_labels), pad_id(tokenizer));
}

std::unique_ptr<TrainingTask> make_synthetic(const RunConfig& config) {
  const auto& t = config.task;
  SyntheticTaskOptions options;
  options.task = synthetic_task_from_string(t.name);
  options.min_length = t.min_length;
  options.max_length = t.max_length;
  options.num_symbols = t.symbols;
  options.num_values = t.symbols;
  options.num_keys = std::max<int64_t>(options.num_keys, t.max_length);
  auto rows = [&](uint64_t seed, int64_t count) {
    std::vector<LmRow> out;
    for (const auto& e : generate_synthetic_task(options, seed, count)) {
      auto batch = make_synthetic_batch({e});
      auto in = batch.inputs[0], target = batch.targets[0];
      out.push_back({Ids(in.data_ptr<int64_t>(), in.data_ptr<int64_t>() + in.numel()),
                     Ids(target.data_ptr<int64_t>(), target.data_ptr<int64_t>() + target.numel())});
    }
    return out;
  };
  auto train = rows(config.trainer.seed * 2 + 1, t.train_examples);
  auto val = rows(config.trainer.seed * 2 + 2, t.eval_examples);
  int64_t longest = 1;
  for (const auto* set : {&train, &val})
    for (const auto& r : *set) longest = std::max<int64_t>(longest, r.input.size());
  models::HeadsConfig heads;
  heads.causal_lm = true;
  auto model = build_model(config, synthetic_vocab_size(options), longest, true, heads);
  return std::make_unique<LanguageModelTask>(model, config, std::move(train), std::move(val),
                                             SyntheticVocabulary::kPad, true);
}

std::unique_ptr<TrainingTask> make_text_lm(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'lm' needs task.data (text files separated by commas)");
  auto tokenizer = task_tokenizer(config);
  std::vector<std::string> paths;
  std::string path;
  std::istringstream list(t.data);
  while (std::getline(list, path, ','))
    if (!path.empty()) paths.push_back(path);
  LanguageModelDataOptions options;
  options.block_size = t.truncate;
  options.threads = 0;
  options.skip_bad_lines = t.skip_bad_lines;
  auto data = read_language_model_data(paths, tokenizer, options);
  report_skipped(t.data, data.stats);
  if (data.blocks.size() < 2)
    throw Error(fmt::format("task 'lm': {} tokens make {} block(s) of {}; need at least 2 (one for "
                            "validation)", data.tokens, data.blocks.size(), t.truncate));
  // Every 20th block (at most eval_examples of them) is held out for validation.
  std::vector<LmRow> train, val;
  for (size_t i = 0; i < data.blocks.size(); ++i) {
    const auto& b = data.blocks[i];
    LmRow row{Ids(b.begin(), b.end() - 1), Ids(b.begin() + 1, b.end())};
    const bool held_out = i % 20 == 19 && static_cast<int64_t>(val.size()) < t.eval_examples;
    (held_out ? val : train).push_back(std::move(row));
  }
  if (val.empty()) {
    val.push_back(train.back());
    train.pop_back();
  }
  models::HeadsConfig heads;
  heads.causal_lm = true;
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, true, heads);
  return std::make_unique<LanguageModelTask>(model, config, std::move(train), std::move(val),
                                             pad_id(tokenizer), false);
}

}  // namespace

models::TransformerConfig model_config(const RunConfig& config, int64_t vocab, int64_t longest,
                                       bool causal) {
  const auto& m = config.model;
  const std::string family = m.family.empty() ? (causal ? "gpt2" : "bert") : m.family;
  if (!models::is_preset(family))
    throw Error(fmt::format("model.family: '{}' is not one of {}", family,
                            fmt::join(models::preset_names(), ", ")));
  models::TransformerConfig c =
      models::preset(family, {vocab, m.hidden, m.layers, m.heads, m.intermediate, m.embedding_size});
  c.type_vocab_size = 0;
  c.pooler = config.model.pooling == "pooler" && !causal;
  c.attention = layers::AttentionSpec::parse(m.attention);
  c.attention.causal = causal;
  c.positions = m.positions;
  c.dropout = m.dropout;
  c.max_positions = m.max_positions > 0 ? m.max_positions : std::max<int64_t>(longest, 16);
  c.attention.max_length = c.max_positions;  // Synthesizer logits span the longest input
  c.validate();
  return c;
}

std::unique_ptr<TrainingTask> make_task(const RunConfig& config) {
  const auto& name = config.task.name;
  if (config.task.batch_size < 1) throw Error("task.batch_size must be >= 1");
  if (config.task.truncate < 1) throw Error("task.truncate must be >= 1");
  if (config.task.eval_split != "val" && config.task.eval_split != "test")
    throw Error(fmt::format("task.eval_split: '{}' is not val or test", config.task.eval_split));
  const bool has_files = (name == "listops" && !config.task.data.empty()) ||
                         name == "classification" || name == "tagging" || name == "span" ||
                         name == "seq2seq";
  if (config.task.eval_split == "test" && !has_files)
    throw Error(fmt::format("task.eval_split = test needs test files (listops with task.data, "
                            "classification, tagging, span, seq2seq); task '{}' has none",
                            name));
  if (name == "listops") return make_listops(config);
  if (name == "classification") return make_text_classification(config);
  if (name == "tagging") return make_tagging(config);
  if (name == "span") return make_span(config);
  if (name == "seq2seq") return make_seq2seq(config);
  if (name == "lm") return make_text_lm(config);
  if (name == "copy" || name == "reverse" || name == "sort" || name == "recall" ||
      name == "associative-recall")
    return make_synthetic(config);
  throw Error(fmt::format("task.name: '{}' is not one of listops, classification, tagging, span, "
                          "seq2seq, lm, copy, reverse, sort, recall", name));
}

models::TaskModel task_model(TrainingTask& task) {
  auto* model_task = dynamic_cast<ModelTask*>(&task);
  if (!model_task) throw Error("task_model: not a task made by make_task");
  return model_task->model();
}

}  // namespace attnkit::train
