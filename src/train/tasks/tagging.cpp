// tagging: token tagging (BIO tags per word), scored by entity F1.
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/metrics/metrics.h"

#include <fmt/format.h>

namespace attnkit::train::detail {
namespace {

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
        predicted.push_back(data::tag_names(words, tag_names_));
        gold.push_back(data::tag_names(rows[b]->tags, tag_names_));
      }
    });
    const auto scores = metrics::tagging_scores(predicted, gold);
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
    auto [input, mask] = models::right_padded_ids(ids, pad_);
    models::TaskInputs in;
    in.input_ids = input;
    in.attention_mask = mask;
    return {model_->forward(in).token_logits, models::right_padded_ids(labels, models::kIgnoreLabel).ids, mask};
  }
  std::vector<TaggedRow> train_, val_;
  std::vector<std::string> tag_names_;
  int64_t pad_;
  BatchOrder order_;
};

}  // namespace

std::unique_ptr<TrainingTask> make_tagging(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'tagging' needs task.data (the training file)");
  auto tokenizer = task_tokenizer(config);
  const auto options = read_options(config);
  auto train = read_reported<data::TaggingData>(t.data, [&](const std::string& p) { return data::read_tagging(p, {}, options); });
  auto val = read_reported<data::TaggingData>(evaluation_path(t.data, t.eval_split), [&](const std::string& p) {
    return data::read_tagging(p, train.tags, options);
  });
  const auto cls = special_id(tokenizer, {"[CLS]", "<s>"});
  const auto sep = special_id(tokenizer, {"[SEP]", "</s>"});
  auto encode = [&](const data::TaggingData& data, int64_t limit) {
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

}  // namespace attnkit::train::detail
