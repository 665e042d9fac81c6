// The task registry (tasks.h) is the one list of tasks: every row builds through make_task (or,
// without its files, refuses in one line naming what it needs), and the unknown-name error, the
// eval_split check and run_settings()' help list exactly its rows.
#include "attnkit/error.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;

RunConfig tiny(const TaskInfo& task) {
  RunConfig c;
  c.task.name = task.name;
  c.task.batch_size = 4;
  c.task.min_length = task.name == "listops" ? 10 : 4;
  c.task.max_length = task.name == "listops" ? 40 : 8;
  c.task.train_examples = 16;
  c.task.eval_examples = 4;
  c.task.symbols = 6;
  c.model.hidden = 16;
  c.model.layers = 1;
  c.model.heads = 2;
  c.trainer.quiet = true;
  return c;
}

// "a, b, c" -> {a, b, c}
std::vector<std::string> split_list(const std::string& text, const std::string& separator = ", ") {
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t at; (at = text.find(separator, from)) != std::string::npos; from = at + separator.size())
    out.push_back(text.substr(from, at - from));
  out.push_back(text.substr(from));
  return out;
}

// The text between `before` and the next `after` in `text` ("" when `before` is missing).
std::string between(const std::string& text, const std::string& before, const std::string& after) {
  const auto at = text.find(before);
  if (at == std::string::npos) return "";
  const auto from = at + before.size();
  return text.substr(from, text.find(after, from) - from);
}

std::vector<std::string> names_where(bool (*keep)(const TaskInfo&)) {
  std::vector<std::string> out;
  for (const auto& t : task_registry())
    if (keep(t)) out.push_back(t.name);
  return out;
}

bool any_task(const TaskInfo&) { return true; }

std::string help_of(const std::string& section, const std::string& key) {
  for (const auto& s : run_settings())
    if (s.section == section && s.key == key) return s.help;
  ADD_FAILURE() << section << "." << key << " is not a setting";
  return "";
}

TEST(Tasks, RegistryRowsAreCompleteAndNamedOnce) {
  std::set<std::string> seen;
  ASSERT_FALSE(task_registry().empty());
  for (const auto& t : task_registry()) {
    EXPECT_TRUE(seen.insert(t.name).second) << t.name << " is registered twice";
    EXPECT_FALSE(t.help.empty()) << t.name;
    EXPECT_EQ(t.help.find('\n'), std::string::npos) << t.name;
    EXPECT_NE(t.make, nullptr) << t.name;
    EXPECT_EQ(t.files.empty(), t.data == TaskData::kNone) << t.name;
    EXPECT_EQ(find_task(t.name), &t);
  }
  EXPECT_EQ(find_task("translate"), nullptr);
  EXPECT_EQ(split_list(task_names()), names_where(any_task));
}

TEST(Tasks, EveryRegisteredTaskBuildsOrNamesTheFilesItNeeds) {
  const auto dir = scratch_directory("task_registry");
  for (const auto& t : task_registry()) {
    auto config = tiny(t);
    if (t.data == TaskData::kRequired) {
      // Without its files: one line naming task.data and what it should name.
      const auto error = error_of([&] { make_task(config); });
      EXPECT_EQ(error, fmt::format("task '{}' needs task.data ({})", t.name, t.files));
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;
      // With them named but no tokenizer: the tokenizer is named before any file is read.
      config.task.data = (dir / "absent_train.txt").string();
      if (t.tokenizer)
        EXPECT_NE(error_of([&] { make_task(config); }).find(fmt::format("task '{}' needs task.tokenizer", t.name)),
                  std::string::npos)
            << t.name;
      continue;
    }
    EXPECT_FALSE(t.tokenizer) << t.name << ": a generated task needs no tokenizer";
    auto task = make_task(config);
    EXPECT_TRUE(std::isfinite(task->train_loss(0, 0, 1).loss.item<double>())) << t.name;
    EXPECT_FALSE(task->primary_metric().empty()) << t.name;
    EXPECT_GT(task_model(*task)->config().vocab_size, 0) << t.name;
  }
}

TEST(Tasks, UnknownNameListsExactlyTheRegistry) {
  RunConfig config;
  config.task.name = "translate";
  const auto error = error_of([&] { make_task(config); });
  const std::string prefix = "task.name: 'translate' is not one of ";
  ASSERT_EQ(error.rfind(prefix, 0), 0u) << error;
  EXPECT_EQ(split_list(error.substr(prefix.size())), names_where(any_task)) << error;
}

TEST(Tasks, TestSplitNeedsATaskWithTestFiles) {
  std::vector<std::string> with_tests;
  for (const auto& t : task_registry())
    if (t.test_split) with_tests.push_back(t.name + (t.data == TaskData::kOptional ? " with task.data" : ""));
  ASSERT_FALSE(with_tests.empty());
  for (const auto& t : task_registry()) {
    auto config = tiny(t);
    config.task.eval_split = "test";
    const auto error = error_of([&] { make_task(config); });
    // Generated examples (no task.data) have no test split, whatever the task.
    const bool refused = !t.test_split || t.data != TaskData::kRequired;
    if (!refused) {
      EXPECT_EQ(error.find("needs test files"), std::string::npos) << error;
      continue;
    }
    EXPECT_EQ(error, fmt::format("task.eval_split = test needs test files ({}); task '{}' has none",
                                 fmt::join(with_tests, ", "), t.name));
    EXPECT_EQ(split_list(between(error, "needs test files (", ");")), with_tests) << error;
  }
}

TEST(RunConfig, TaskSettingsHelpListsTheRegistry) {
  EXPECT_EQ(split_list(help_of("task", "name"), " | "), names_where(any_task));
  EXPECT_EQ(split_list(between(help_of("task", "tokenizer"), "(", ")")),
            names_where([](const TaskInfo& t) { return t.tokenizer; }));
  EXPECT_EQ(split_list(between(help_of("task", "eval_split"), "val | test (", ")")),
            names_where([](const TaskInfo& t) { return t.test_split; }));
}

}  // namespace
}  // namespace attnkit::train
