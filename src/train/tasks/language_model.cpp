// lm: causal LM over text files, tokenised and packed into blocks of task.truncate tokens.
#include "task_common.h"

#include "attnkit/error.h"

#include <fmt/format.h>

#include <sstream>

namespace attnkit::train::detail {

std::unique_ptr<TrainingTask> make_text_lm(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty()) throw Error("task 'lm' needs task.data (text files separated by commas)");
  auto tokenizer = task_tokenizer(config);
  auto data = read_text_files(config, tokenizer, static_cast<size_t>(t.truncate));
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
  if (t.eval_split == "test") {
    // Evaluated on the test files instead: each task.data file with 'train' replaced by 'test' in
    // its name, every block of them (the first eval_examples when that is > 0). The training
    // blocks stay as above, so a run's model is the same whichever split it reports.
    std::string files;
    std::istringstream list(t.data);
    for (std::string path; std::getline(list, path, ',');)
      if (!path.empty()) files += (files.empty() ? "" : ",") + evaluation_path(path, "test");
    RunConfig test_config = config;
    test_config.task.data = files;
    const auto test = read_text_files(test_config, tokenizer, static_cast<size_t>(t.truncate));
    val.clear();
    for (const auto& b : test.blocks) {
      if (t.eval_examples > 0 && static_cast<int64_t>(val.size()) >= t.eval_examples) break;
      val.push_back(LmRow{Ids(b.begin(), b.end() - 1), Ids(b.begin() + 1, b.end())});
    }
    if (val.empty())
      throw Error(fmt::format("task 'lm': the test files {} hold {} tokens, no block of {}", files, test.tokens,
                              t.truncate));
  }
  models::HeadsConfig heads;
  heads.causal_lm = true;
  auto model = build_model(config, tokenizer.vocab_size(), t.truncate, true, heads);
  return std::make_unique<LanguageModelTask>(model, config, std::move(train), std::move(val),
                                             pad_id(tokenizer), false);
}

}  // namespace attnkit::train::detail
