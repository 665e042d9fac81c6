// lra-text and lra-retrieval: the Long-Range Arena's byte-level text tasks on Debian's fortunes
// (include/attnkit/data/lra_text.h), stand-ins for IMDB and the ACL Anthology. Bytes are the
// tokens: ids 0..255, padding 256 (a vocabulary of 257; no [CLS], the model pools over the bytes,
// model.pooling, mean for LRA). Inputs longer than task.truncate bytes are cut.
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/data/lra_text.h"
#include "attnkit/train/tasks.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>

namespace attnkit::train::detail {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kBytePad = 256;
constexpr int64_t kByteVocabulary = 257;

Ids byte_ids(const std::string& text, int64_t truncate) {
  const size_t n = std::min(text.size(), static_cast<size_t>(truncate));
  Ids ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

// task.data: a directory holding PREFIX_train.tsv, or the training file itself.
std::string training_file(const RunConfig& config, const std::string& prefix) {
  const auto& data = config.task.data;
  if (data.empty())
    throw Error(fmt::format("task '{}' needs task.data ({})", config.task.name, find_task(config.task.name)->files));
  if (fs::is_directory(data)) return (fs::path(data) / (prefix + "_train.tsv")).string();
  if (!fs::exists(data))
    throw Error(fmt::format("{}: no such file or directory (write it with `attnkit data {} --out DIR`)", data,
                            config.task.name));
  return data;
}

class PairClassificationTask : public ModelTask {
 public:
  struct Pair {
    Ids left, right;
    int64_t label;
  };
  PairClassificationTask(models::TaskModel model, const RunConfig& config, std::vector<Pair> train,
                         std::vector<Pair> val)
      : ModelTask(std::move(model), config), train_(std::move(train)), val_(std::move(val)),
        order_(train_.size(), config.task.batch_size, config.trainer.seed) {}

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    std::vector<const Pair*> rows;
    for (size_t i : order_.batch(index, rank, world)) rows.push_back(&train_[i]);
    auto [logits, labels, tokens] = run(rows);
    return {models::cross_entropy(logits, labels), tokens};
  }
  std::map<std::string, double> evaluate() override {
    models::PredictionMetrics metrics;
    for_each_batch(val_, batch_size_, [&](size_t, const std::vector<const Pair*>& rows) {
      auto [logits, labels, tokens] = run(rows);
      metrics.add(logits, labels);
    });
    return {{"accuracy", metrics.accuracy()}, {"loss", metrics.mean_loss()}};
  }
  std::string primary_metric() const override { return "accuracy"; }
  bool higher_is_better() const override { return true; }

 private:
  std::tuple<at::Tensor, at::Tensor, int64_t> run(const std::vector<const Pair*>& rows) {
    std::vector<const Ids*> left, right;
    std::vector<int64_t> labels;
    for (const auto* p : rows) {
      left.push_back(&p->left);
      right.push_back(&p->right);
      labels.push_back(p->label);
    }
    auto a = models::right_padded_ids(left, kBytePad);
    auto b = models::right_padded_ids(right, kBytePad);
    models::TaskInputs l, r;
    l.input_ids = a.ids;
    l.attention_mask = a.attention_mask;
    r.input_ids = b.ids;
    r.attention_mask = b.attention_mask;
    const int64_t tokens = a.attention_mask.sum().item<int64_t>() + b.attention_mask.sum().item<int64_t>();
    return {model_->pair_logits(l, r), torch::tensor(labels, at::kLong), tokens};
  }
  std::vector<Pair> train_;
  std::vector<Pair> val_;
  BatchOrder order_;
};

}  // namespace

std::unique_ptr<TrainingTask> make_lra_text(const RunConfig& config) {
  const auto& t = config.task;
  const std::string train_path = training_file(config, "text");
  const data::LabelledTexts train = data::read_lra_text_file(train_path);
  const std::string val_path = evaluation_path(train_path, t.eval_split);
  const data::LabelledTexts val = data::read_lra_text_file(val_path);
  if (train.texts.empty()) throw Error(fmt::format("{}: no passages", train_path));
  if (val.texts.empty()) throw Error(fmt::format("{}: no passages", val_path));
  // Classes: the categories of the training file, sorted.
  std::map<std::string, int64_t> classes;
  for (const auto& l : train.labels) classes.emplace(l, 0);
  if (classes.size() < 2) throw Error(fmt::format("{}: {} category, need at least 2", train_path, classes.size()));
  int64_t next = 0;
  for (auto& [name, id] : classes) id = next++;
  auto encode = [&](const data::LabelledTexts& set, const std::string& path, std::vector<Ids>& ids,
                    std::vector<int64_t>& labels, int64_t limit) {
    for (size_t i = 0; i < set.texts.size() && (limit <= 0 || static_cast<int64_t>(i) < limit); ++i) {
      auto it = classes.find(set.labels[i]);
      if (it == classes.end())
        throw Error(fmt::format("{}: category '{}' is not in the training file", path, set.labels[i]));
      ids.push_back(byte_ids(set.texts[i], t.truncate));
      labels.push_back(it->second);
    }
  };
  std::vector<Ids> train_ids, val_ids;
  std::vector<int64_t> train_labels, val_labels;
  encode(train, train_path, train_ids, train_labels, 0);
  encode(val, val_path, val_ids, val_labels, t.eval_examples);
  int64_t longest = 1;
  for (const auto* set : {&train_ids, &val_ids})
    for (const auto& r : *set) longest = std::max<int64_t>(longest, r.size());
  auto model = build_model(config, kByteVocabulary, longest, false,
                           classification_heads(config, static_cast<int64_t>(classes.size())));
  return std::make_unique<ClassificationTask>(model, config, std::move(train_ids), std::move(train_labels),
                                              std::move(val_ids), std::move(val_labels), kBytePad);
}

std::unique_ptr<TrainingTask> make_lra_retrieval(const RunConfig& config) {
  const auto& t = config.task;
  const std::string train_path = training_file(config, "retrieval");
  const auto train = data::read_lra_retrieval_file(train_path);
  const std::string val_path = evaluation_path(train_path, t.eval_split);
  const auto val = data::read_lra_retrieval_file(val_path);
  if (train.empty()) throw Error(fmt::format("{}: no pairs", train_path));
  if (val.empty()) throw Error(fmt::format("{}: no pairs", val_path));
  auto convert = [&](const std::vector<data::TextPair>& pairs, int64_t limit) {
    std::vector<PairClassificationTask::Pair> out;
    for (size_t i = 0; i < pairs.size() && (limit <= 0 || static_cast<int64_t>(i) < limit); ++i)
      out.push_back({byte_ids(pairs[i].left, t.truncate), byte_ids(pairs[i].right, t.truncate), pairs[i].label});
    return out;
  };
  auto train_pairs = convert(train, 0);
  auto val_pairs = convert(val, t.eval_examples);
  int64_t longest = 1;
  for (const auto* set : {&train_pairs, &val_pairs})
    for (const auto& p : *set)
      longest = std::max<int64_t>({longest, static_cast<int64_t>(p.left.size()), static_cast<int64_t>(p.right.size())});
  models::HeadsConfig heads;
  heads.pair_labels = 2;
  heads.sequence_pooling = config.model.pooling.value();
  heads.classifier_dropout = config.model.dropout;
  auto model = build_model(config, kByteVocabulary, longest, false, heads);
  return std::make_unique<PairClassificationTask>(model, config, std::move(train_pairs), std::move(val_pairs));
}

}  // namespace attnkit::train::detail
