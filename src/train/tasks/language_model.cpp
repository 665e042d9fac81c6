// lm: causal LM over text files, tokenised and packed into blocks of task.truncate tokens.
#include "task_common.h"

#include "attnkit/error.h"

#include <fmt/format.h>

namespace attnkit::train::detail {

std::unique_ptr<TrainingTask> make_text_lm(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'lm' needs task.data (text files separated by commas)");
  auto tokenizer = task_tokenizer(config);
  auto data = read_text_files(config, tokenizer, static_cast<size_t>(t.truncate));
  if (data.blocks.size() < 2)
    throw Error(fmt::format("task 'lm': {} tokens make {} block(s) of {}; need at least 2 (one for "
                            "validation)", data.tokens, data.blocks.size(), t.truncate));
  // A block of truncate + 1 tokens: the inputs, and the next tokens as targets.
  const auto row_of = [](const auto& b) { return LmRow{Ids(b.begin(), b.end() - 1), Ids(b.begin() + 1, b.end())}; };
  // Every 20th block (at most eval_examples of them) is held out for validation.
  std::vector<LmRow> train, val;
  for (size_t i = 0; i < data.blocks.size(); ++i) {
    LmRow row = row_of(data.blocks[i]);
    const bool held_out = i % 20 == 19 && static_cast<int64_t>(val.size()) < t.eval_examples;
    (held_out ? val : train).push_back(std::move(row));
  }
  if (val.empty()) {
    val.push_back(train.back());
    train.pop_back();
  }
  if (t.eval_split == "test") {
    // Evaluated on the test files instead: each task.data file with 'train' replaced by 'test' in
    // its name, every block of them (the first eval_examples when that is > 0). The training
    // blocks stay as above, so a run's model is the same whichever split it reports.
    const auto test = read_text_files(config, tokenizer, static_cast<size_t>(t.truncate), std::nullopt, nullptr, "test");
    val.clear();
    for (const auto& b : test.blocks) {
      if (t.eval_examples > 0 && static_cast<int64_t>(val.size()) >= t.eval_examples) break;
      val.push_back(row_of(b));
    }
    if (val.empty())
      throw Error(fmt::format("task 'lm': the test files of {} hold {} tokens, no block of {}", t.data, test.tokens,
                              t.truncate));
  }
  models::HeadsConfig heads;
  heads.causal_lm = true;
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, true, heads);
  return std::make_unique<LanguageModelTask>(model, config, std::move(train), std::move(val),
                                             pad_id(tokenizer), false);
}

}  // namespace attnkit::train::detail
