#pragma once
// Synthetic sequence tasks for long-sequence tests: copy, reverse, sort and associative recall.
// Seeded (std::mt19937_64 with our own uniform draws: a seed gives the same examples on every
// platform) and length-configurable.
//
// Vocabulary layout, shared by every task:
//   0                 <pad>
//   1                 <sep>    ends the sequence part of copy/reverse/sort; precedes the query key
//   2 ...             symbols: copy/reverse/sort use num_symbols of them (ids 2 .. 2+num_symbols-1);
//                     associative recall uses num_keys keys (ids 2 .. 2+num_keys-1) followed by
//                     num_values values (ids 2+num_keys .. 2+num_keys+num_values-1).
//
// Examples (an LM reads input ++ target and is trained to predict the target tokens):
//   copy               input  s1 .. sn <sep>              target s1 .. sn
//   reverse            input  s1 .. sn <sep>              target sn .. s1
//   sort               input  s1 .. sn <sep>              target s1 .. sn sorted by id, ascending
//   associative recall input  k1 v1 .. kn vn <sep> q      target v  (the value paired with q)
// where n is drawn uniformly from min_length..max_length (the number of symbols, or of key-value
// pairs for recall). Recall keys within an example are distinct, so the answer is unique; the
// query is one of them, chosen uniformly. Recall's target has one token: its class label.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace attnkit::data {

enum class SyntheticTask { kCopy, kReverse, kSort, kAssociativeRecall };

std::string to_string(SyntheticTask task);  // "copy", "reverse", "sort", "associative-recall"
// Throws attnkit::Error listing the names for an unknown one (also accepts "recall").
SyntheticTask synthetic_task_from_string(const std::string& name);

struct SyntheticVocabulary {
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kSeparator = 1;
  static constexpr int64_t kFirstSymbol = 2;
};

struct SyntheticTaskOptions {
  SyntheticTask task = SyntheticTask::kCopy;
  int64_t min_length = 32;   // symbols (copy/reverse/sort) or key-value pairs (recall)
  int64_t max_length = 32;   // n is uniform in min_length..max_length
  int64_t num_symbols = 16;  // copy/reverse/sort alphabet
  int64_t num_keys = 64;     // recall: key alphabet, at least max_length (keys are distinct)
  int64_t num_values = 16;   // recall: value alphabet
};

// 2 + num_symbols, or 2 + num_keys + num_values for recall.
int64_t synthetic_vocab_size(const SyntheticTaskOptions& options);

struct SyntheticExample {
  std::vector<int64_t> input;
  std::vector<int64_t> target;
};

// Throws attnkit::Error for options that cannot work (lengths < 1 or min > max, an empty
// alphabet, fewer recall keys than pairs).
class SyntheticTaskGenerator {
 public:
  SyntheticTaskGenerator(const SyntheticTaskOptions& options, uint64_t seed);
  SyntheticExample next();
  const SyntheticTaskOptions& options() const { return options_; }

 private:
  SyntheticTaskOptions options_;
  std::mt19937_64 rng_;
  std::vector<int64_t> keys_;  // recall: scratch for drawing distinct keys
};

std::vector<SyntheticExample> generate_synthetic_task(const SyntheticTaskOptions& options, uint64_t seed,
                                                      size_t count);

}  // namespace attnkit::data
