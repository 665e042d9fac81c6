// classification: text classification of TSV/JSONL files (text_datasets.h) with a tokenizer.
#include "task_common.h"

#include "attnkit/error.h"

#include <fmt/format.h>

namespace attnkit::train::detail {

std::unique_ptr<TrainingTask> make_text_classification(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'classification' needs task.data (the training file)");
  auto tokenizer = task_tokenizer(config);
  const auto options = read_options(config);
  auto train = read_reported<data::ClassificationData>(
      t.data, [&](const std::string& p) { return data::read_classification(p, {}, options); });
  auto val = read_reported<data::ClassificationData>(evaluation_path(t.data, t.eval_split), [&](const std::string& p) {
    return data::read_classification(p, train.labels, options);
  });
  auto encode = [&](const data::ClassificationData& data, std::vector<Ids>& ids, std::vector<int64_t>& labels,
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

}  // namespace attnkit::train::detail
