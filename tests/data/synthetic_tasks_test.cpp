// Synthetic tasks: targets correct by construction, the documented vocabulary layout, seeding,
// and the LM-style batch with ignored positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/data/synthetic_tasks.h"

namespace attnkit::data {
namespace {

using V = SyntheticVocabulary;
using Ids = std::vector<int64_t>;

SyntheticTaskOptions task_options(SyntheticTask task, int64_t min_length = 5, int64_t max_length = 40) {
  SyntheticTaskOptions options;
  options.task = task;
  options.min_length = min_length;
  options.max_length = max_length;
  options.num_symbols = 7;
  options.num_keys = 50;
  options.num_values = 9;
  return options;
}

// The symbols of a copy/reverse/sort example, after checking its layout.
Ids checked_sequence(const SyntheticExample& e, const SyntheticTaskOptions& o) {
  EXPECT_EQ(e.input.back(), V::kSeparator);
  Ids symbols(e.input.begin(), e.input.end() - 1);
  EXPECT_GE(static_cast<int64_t>(symbols.size()), o.min_length);
  EXPECT_LE(static_cast<int64_t>(symbols.size()), o.max_length);
  for (int64_t s : symbols) {
    EXPECT_GE(s, V::kFirstSymbol);
    EXPECT_LT(s, synthetic_vocab_size(o));
  }
  return symbols;
}

TEST(SyntheticTasks, CopyReverseSortTargetsByConstruction) {
  for (SyntheticTask task : {SyntheticTask::kCopy, SyntheticTask::kReverse, SyntheticTask::kSort}) {
    const SyntheticTaskOptions options = task_options(task);
    EXPECT_EQ(synthetic_vocab_size(options), 2 + 7);
    std::set<size_t> lengths;
    for (const SyntheticExample& e : generate_synthetic_task(options, 11, 100)) {
      Ids expected = checked_sequence(e, options);
      lengths.insert(expected.size());
      if (task == SyntheticTask::kReverse) std::reverse(expected.begin(), expected.end());
      if (task == SyntheticTask::kSort) std::sort(expected.begin(), expected.end());
      EXPECT_EQ(e.target, expected) << to_string(task);
    }
    EXPECT_GT(lengths.size(), 10u);  // lengths vary over 5..40
  }
}

TEST(SyntheticTasks, AssociativeRecallAnswersTheQueriedKey) {
  const SyntheticTaskOptions options = task_options(SyntheticTask::kAssociativeRecall, 3, 50);
  EXPECT_EQ(synthetic_vocab_size(options), 2 + 50 + 9);
  const int64_t first_value = V::kFirstSymbol + options.num_keys;
  for (const SyntheticExample& e : generate_synthetic_task(options, 3, 200)) {
    // k1 v1 .. kn vn <sep> q
    ASSERT_GE(e.input.size(), 2 * 3 + 2u);
    ASSERT_EQ(e.input.size() % 2, 0u);
    const size_t pairs = (e.input.size() - 2) / 2;
    EXPECT_LE(pairs, 50u);
    EXPECT_EQ(e.input[2 * pairs], V::kSeparator);
    const int64_t query = e.input.back();
    std::set<int64_t> keys;
    int64_t answer = -1;
    for (size_t i = 0; i < pairs; ++i) {
      const int64_t key = e.input[2 * i], value = e.input[2 * i + 1];
      EXPECT_GE(key, V::kFirstSymbol);
      EXPECT_LT(key, first_value);
      EXPECT_GE(value, first_value);
      EXPECT_LT(value, first_value + options.num_values);
      keys.insert(key);
      if (key == query) answer = value;
    }
    EXPECT_EQ(keys.size(), pairs);  // distinct keys: the answer is unique
    ASSERT_EQ(e.target.size(), 1u);
    EXPECT_EQ(e.target[0], answer);
  }
}

TEST(SyntheticTasks, SeededAndReproducible) {
  const SyntheticTaskOptions options = task_options(SyntheticTask::kAssociativeRecall);
  const auto a = generate_synthetic_task(options, 99, 20);
  const auto b = generate_synthetic_task(options, 99, 20);
  const auto c = generate_synthetic_task(options, 100, 20);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].input, b[i].input);
    EXPECT_EQ(a[i].target, b[i].target);
    differs = differs || a[i].input != c[i].input;
  }
  EXPECT_TRUE(differs);
  // A long sequence, as the long-sequence tests use.
  SyntheticTaskOptions long_copy = task_options(SyntheticTask::kCopy, 4096, 4096);
  const auto example = SyntheticTaskGenerator(long_copy, 1).next();
  EXPECT_EQ(example.input.size(), 4097u);
  EXPECT_EQ(example.target.size(), 4096u);
}

TEST(SyntheticTasks, NamesAndOptionsAreChecked) {
  for (SyntheticTask task : {SyntheticTask::kCopy, SyntheticTask::kReverse, SyntheticTask::kSort, SyntheticTask::kAssociativeRecall}) {
    EXPECT_EQ(synthetic_task_from_string(to_string(task)), task);
  }
  EXPECT_THROW(synthetic_task_from_string("cpy"), Error);
  EXPECT_THROW(SyntheticTaskGenerator(task_options(SyntheticTask::kCopy, 0, 4), 1), Error);
  EXPECT_THROW(SyntheticTaskGenerator(task_options(SyntheticTask::kCopy, 5, 4), 1), Error);
  // 60 pairs cannot have distinct keys from 50.
  EXPECT_THROW(SyntheticTaskGenerator(task_options(SyntheticTask::kAssociativeRecall, 5, 60), 1), Error);
  SyntheticTaskOptions no_symbols = task_options(SyntheticTask::kSort);
  no_symbols.num_symbols = 0;
  EXPECT_THROW(SyntheticTaskGenerator(no_symbols, 1), Error);
}

}  // namespace
}  // namespace attnkit::data
