// conditional-lm: a causal LM conditioned on a class label through Conditional LayerNorm
// (bert4keras's "Conditional Layer Normalization" text generation). The data are the
// classification task's files (TSV "text<TAB>label" or JSONL, a validation file beside the
// training file): each text is one row, [start] text -> text [end], and its label's id picks a
// learned condition vector (HeadsConfig::condition_classes) that every LayerNorm maps to its gain
// and bias. The label names, one per line in id order, go into every checkpoint as
// condition_labels.txt, so `attnkit generate --condition NAME|ID` can take either.
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/train/tasks.h"

#include <fmt/format.h>

namespace attnkit::train::detail {
std::unique_ptr<TrainingTask> make_conditional_lm(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty())
    throw Error("task 'conditional-lm' needs task.data (the labelled training file: TSV text<TAB>label or JSONL)");
  if (t.truncate < 2) throw Error(fmt::format("task 'conditional-lm': task.truncate {} leaves no room for text", t.truncate));
  auto tokenizer = task_tokenizer(config);
  const auto options = read_options(config);
  auto train_data = read_reported<data::ClassificationData>(
      t.data, [&](const std::string& p) { return data::read_classification(p, {}, options); });
  auto val_data = read_reported<data::ClassificationData>(evaluation_path(t.data, t.eval_split), [&](const std::string& p) {
    return data::read_classification(p, train_data.labels, options);
  });
  // Each row starts at a start token (what generation is prompted with) and ends at an end token.
  const auto start = special_id(tokenizer, {"<|endoftext|>", "[CLS]", "<s>", "[SEP]"});
  const auto end = special_id(tokenizer, {"<|endoftext|>", "[SEP]", "</s>"});
  if (!start || !end)
    throw Error("task 'conditional-lm': the tokenizer has no start or end token (<|endoftext|>, [CLS] / [SEP], "
                "<s> / </s>)");
  auto rows = [&](const data::ClassificationData& data, int64_t limit) {
    std::vector<LmRow> out;
    for (const auto& e : data.examples) {
      if (limit > 0 && static_cast<int64_t>(out.size()) >= limit) break;
      auto enc = tokenizer.encode(e.text, /*add_special_tokens=*/false);
      Ids text(enc.ids.begin(), enc.ids.end());
      if (static_cast<int64_t>(text.size()) > t.truncate - 1) text.resize(t.truncate - 1);
      LmRow row;
      row.input.push_back(*start);
      row.input.insert(row.input.end(), text.begin(), text.end());
      row.target = text;
      row.target.push_back(*end);
      row.condition = e.label;
      out.push_back(std::move(row));
    }
    return out;
  };
  auto train = rows(train_data, 0), val = rows(val_data, t.eval_examples);
  if (train.empty()) throw Error(fmt::format("task 'conditional-lm': {} holds no examples", t.data));
  if (val.empty())
    throw Error(fmt::format("task 'conditional-lm': {} holds no examples", evaluation_path(t.data, t.eval_split)));
  models::HeadsConfig heads;
  heads.causal_lm = true;
  heads.condition_classes = static_cast<int64_t>(train_data.labels.size());
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, true, heads);
  auto task = std::make_unique<LanguageModelTask>(model, config, std::move(train), std::move(val), pad_id(tokenizer),
                                                  /*sequence_metric=*/false);
  std::string names;
  for (const auto& label : train_data.labels) {
    if (label.find_first_of("\r\n") != std::string::npos)
      throw Error(fmt::format("task 'conditional-lm': {}: label '{}' holds a line break", t.data, one_line(label)));
    names += label + "\n";
  }
  task->add_checkpoint_file(kConditionLabelsFile, names);
  return task;
}

}  // namespace attnkit::train::detail
