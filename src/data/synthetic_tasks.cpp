#include "attnkit/data/synthetic_tasks.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "attnkit/error.h"
#include "uniform_draws.h"

namespace attnkit::data {
namespace {

using detail::uniform_below;

int64_t uniform_in(std::mt19937_64& rng, int64_t low, int64_t high) {
  return low + static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(high - low) + 1));
}

void check_synthetic_options(const SyntheticTaskOptions& o) {
  if (o.min_length < 1 || o.min_length > o.max_length) {
    throw Error(fmt::format("synthetic task {}: need 1 <= min_length <= max_length, got {} and {}", to_string(o.task),
                            o.min_length, o.max_length));
  }
  if (o.task == SyntheticTask::kAssociativeRecall) {
    if (o.num_values < 1) throw Error(fmt::format("synthetic task associative-recall: num_values must be at least 1, got {}", o.num_values));
    if (o.num_keys < o.max_length) {
      throw Error(fmt::format("synthetic task associative-recall: num_keys ({}) must be at least max_length ({}) so "
                              "that the keys of an example are distinct",
                              o.num_keys, o.max_length));
    }
  } else if (o.num_symbols < 1) {
    throw Error(fmt::format("synthetic task {}: num_symbols must be at least 1, got {}", to_string(o.task), o.num_symbols));
  }
}

}  // namespace

std::string to_string(SyntheticTask task) {
  switch (task) {
    case SyntheticTask::kCopy: return "copy";
    case SyntheticTask::kReverse: return "reverse";
    case SyntheticTask::kSort: return "sort";
    case SyntheticTask::kAssociativeRecall: return "associative-recall";
  }
  return "unknown";
}

SyntheticTask synthetic_task_from_string(const std::string& name) {
  std::vector<std::string> names;
  for (auto task : {SyntheticTask::kCopy, SyntheticTask::kReverse, SyntheticTask::kSort,
                    SyntheticTask::kAssociativeRecall}) {
    if (name == to_string(task)) return task;
    names.push_back(to_string(task));
  }
  if (name == "recall") return SyntheticTask::kAssociativeRecall;
  throw Error(fmt::format("synthetic task: unknown task '{}', expected {} or {}", name,
                          fmt::join(names.begin(), names.end() - 1, ", "), names.back()));
}

int64_t synthetic_vocab_size(const SyntheticTaskOptions& options) {
  return SyntheticVocabulary::kFirstSymbol +
         (options.task == SyntheticTask::kAssociativeRecall ? options.num_keys + options.num_values : options.num_symbols);
}

SyntheticTaskGenerator::SyntheticTaskGenerator(const SyntheticTaskOptions& options, uint64_t seed)
    : options_(options), rng_(seed) {
  check_synthetic_options(options_);
  if (options_.task == SyntheticTask::kAssociativeRecall) {
    keys_.resize(static_cast<size_t>(options_.num_keys));
    std::iota(keys_.begin(), keys_.end(), SyntheticVocabulary::kFirstSymbol);
  }
}

SyntheticExample SyntheticTaskGenerator::next() {
  const int64_t n = uniform_in(rng_, options_.min_length, options_.max_length);
  SyntheticExample example;
  if (options_.task == SyntheticTask::kAssociativeRecall) {
    // n distinct keys: the first n places of a partial Fisher-Yates shuffle.
    const size_t pairs = static_cast<size_t>(n);
    for (size_t i = 0; i < pairs; ++i) {
      const size_t j = i + static_cast<size_t>(uniform_below(rng_, keys_.size() - i));
      std::swap(keys_[i], keys_[j]);
    }
    const int64_t first_value = SyntheticVocabulary::kFirstSymbol + options_.num_keys;
    example.input.reserve(2 * pairs + 2);
    std::vector<int64_t> values(pairs);
    for (size_t i = 0; i < pairs; ++i) {
      values[i] = first_value + static_cast<int64_t>(uniform_below(rng_, static_cast<uint64_t>(options_.num_values)));
      example.input.push_back(keys_[i]);
      example.input.push_back(values[i]);
    }
    const size_t query = static_cast<size_t>(uniform_below(rng_, pairs));
    example.input.push_back(SyntheticVocabulary::kSeparator);
    example.input.push_back(keys_[query]);
    example.target = {values[query]};
    return example;
  }
  std::vector<int64_t> symbols(static_cast<size_t>(n));
  for (int64_t& s : symbols) {
    s = SyntheticVocabulary::kFirstSymbol + static_cast<int64_t>(uniform_below(rng_, static_cast<uint64_t>(options_.num_symbols)));
  }
  example.input = symbols;
  example.input.push_back(SyntheticVocabulary::kSeparator);
  example.target = std::move(symbols);
  if (options_.task == SyntheticTask::kReverse) std::reverse(example.target.begin(), example.target.end());
  if (options_.task == SyntheticTask::kSort) std::sort(example.target.begin(), example.target.end());
  return example;
}

std::vector<SyntheticExample> generate_synthetic_task(const SyntheticTaskOptions& options, uint64_t seed,
                                                      size_t count) {
  SyntheticTaskGenerator generator(options, seed);
  std::vector<SyntheticExample> examples;
  examples.reserve(count);
  for (size_t i = 0; i < count; ++i) examples.push_back(generator.next());
  return examples;
}

}  // namespace attnkit::data
