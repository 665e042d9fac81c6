// listops: LRA ListOps, 10-way classification of the whole sequence, from `attnkit data listops`
// files (task.data) or generated with the task's lengths.
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/data/listops.h"

#include <fmt/format.h>

#include <filesystem>

namespace attnkit::train::detail {

namespace fs = std::filesystem;

std::unique_ptr<TrainingTask> make_listops(const RunConfig& config) {
  const auto& t = config.task;
  std::vector<data::ListOpsExample> train, val;
  if (!t.data.empty()) {
    auto file = [&](const char* split) {
      for (const char* prefix : {"basic_", ""}) {
        auto p = fs::path(t.data) / fmt::format("{}{}.tsv", prefix, split);
        if (fs::exists(p)) return p.string();
      }
      throw Error(fmt::format("{}: no basic_{}.tsv (write it with `attnkit data listops --out {}`)",
                              t.data, split, t.data));
    };
    train = data::read_listops_tsv(file("train"));
    val = data::read_listops_tsv(file(t.eval_split.c_str()));
    if (t.eval_examples > 0 && static_cast<int64_t>(val.size()) > t.eval_examples) val.resize(t.eval_examples);
  } else {
    data::ListOpsOptions options;
    options.min_length = t.min_length;
    options.max_length = t.max_length;
    data::ListOpsGenerator train_generator(options, config.trainer.seed * 2 + 1);
    for (int64_t i = 0; i < t.train_examples; ++i) train.push_back(train_generator.next());
    data::ListOpsGenerator val_generator(options, config.trainer.seed * 2 + 2);
    val_generator.avoid(train_generator.fingerprints());
    for (int64_t i = 0; i < t.eval_examples; ++i) val.push_back(val_generator.next());
  }
  auto encode = [&](const std::vector<data::ListOpsExample>& examples, std::vector<Ids>& ids,
                    std::vector<int64_t>& labels) {
    for (const auto& e : examples) {
      auto row = data::ListOpsVocabulary::encode(e.source);
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
  auto model = build_model(config, data::ListOpsVocabulary::kSize, longest, false,
                           classification_heads(config, data::ListOpsVocabulary::kNumClasses));
  return std::make_unique<ClassificationTask>(model, config, std::move(train_ids), std::move(train_labels),
                                              std::move(val_ids), std::move(val_labels),
                                              data::ListOpsVocabulary::kPad);
}

}  // namespace attnkit::train::detail
