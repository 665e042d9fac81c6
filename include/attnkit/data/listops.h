#pragma once
// ListOps as the Long Range Arena benchmark generates it (Tay et al. 2021, lra_benchmarks/data/
// listops.py; after Nangia & Bowman 2018): nested lists of the operators MIN, MAX, MED (median,
// rounded down) and SM (sum modulo 10) over the digits 0..9, 10 classes (the value, 0..9).
//
// Generation (LRA's procedure, our own random stream): the root sits at depth 1. A node at a
// depth below max_depth is an operator with probability operator_probability (LRA: 0.25), else a
// digit drawn uniformly from 0..9; a node at max_depth is always a digit. An operator draws its
// number of arguments uniformly from 2..max_arguments, generates them in order, then draws its
// operator uniformly from MIN, MAX, MED, SM. An expression is kept when
// min_length < length < max_length (both exclusive, as LRA), where length counts the operator,
// digit and "]" tokens, not the parentheses. Each split keeps distinct expressions (LRA keeps its
// examples in a set). The random stream is std::mt19937_64 with our own uniform draws, so a seed
// gives the same bytes on every platform.
//
// Source strings are LRA's to_string(): an operator with arguments a1..ak is written as k + 1
// opening parentheses, then "[OP a1 )", " ai )" for each further argument, then " ] )":
//   [MAX 2 9 ]  ->  "( ( ( [MAX 2 ) 9 ) ] )"
// TSV files are LRA's csv.writer output: a "Source\tTarget" header, then "source\tvalue" rows,
// each line ended by "\r\n" (Python's csv default); the reader accepts "\n" too.
// File names are LRA's: {task}_train.tsv, {task}_val.tsv, {task}_test.tsv (task "basic").
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace attnkit::data {

// The defaults are LRA's.
struct ListOpsOptions {
  int max_depth = 10;      // deepest node (root = depth 1); operators only above it
  int max_arguments = 10;  // arguments per operator: uniform in 2..max_arguments
  int64_t min_length = 500;   // kept when min_length < length < max_length
  int64_t max_length = 2000;
  double operator_probability = 0.25;  // LRA's VALUE_P: P(operator) for a node above max_depth
  bool unique = true;  // never return the same expression twice (compared by 64-bit fingerprint)
};

struct ListOpsExample {
  std::string source;  // LRA's parenthesised string
  int target = 0;      // its value, 0..9
};

// Streams examples from one seed. Throws attnkit::Error for options that cannot work
// (max_depth outside 1..1000, max_arguments < 2, min_length + 1 >= max_length, probability
// outside [0, 1)). A draw stops as soon as it reaches max_length tokens (it would be rejected);
// that changes the random stream, not the distribution of the kept expressions.
class ListOpsGenerator {
 public:
  ListOpsGenerator(const ListOpsOptions& options, uint64_t seed);

  // The next kept expression. Throws attnkit::Error when 1,000,000 draws in a row are rejected
  // (a length window that the distribution almost never reaches, or no distinct expression left).
  ListOpsExample next();

  // With options.unique: also never return an expression that another generator returned (pass
  // its fingerprints()), so splits drawn from different seeds stay disjoint.
  void avoid(const std::unordered_set<uint64_t>& fingerprints);
  // Fingerprints (64-bit FNV-1a of the token ids) of the expressions returned so far (and avoided).
  const std::unordered_set<uint64_t>& fingerprints() const { return seen_; }
  const ListOpsOptions& options() const { return options_; }

 private:
  ListOpsOptions options_;
  std::mt19937_64 rng_;
  std::unordered_set<uint64_t> seen_;
};

std::vector<ListOpsExample> generate_listops(const ListOpsOptions& options, uint64_t seed, size_t count);

// The exact value of an expression and the shape the generator controls. Parentheses are
// optional (as LRA's model never sees them) but must balance when present.
struct ListOpsAnalysis {
  int value = 0;          // 0..9
  int64_t length = 0;     // operator, digit and "]" tokens
  int depth = 0;          // deepest node, root = 1 (a lone digit has depth 1)
  int max_arguments = 0;  // most arguments of any operator (0 for a lone digit)
};
// Throws attnkit::Error naming the problem for a malformed expression: an unknown token, "]" with
// no open operator, an operator without arguments, an unclosed operator, unbalanced parentheses,
// tokens after the end, an empty string.
ListOpsAnalysis analyze_listops(std::string_view source);
inline int evaluate_listops(std::string_view source) { return analyze_listops(source).value; }

// The ListOps vocabulary, as LRA tokenises a Source string (input_pipeline.py): split on
// whitespace, drop "(" and ")", keep every other token. Ids are fixed (LRA builds its id table
// from a Python set, so its order varies between runs):
//   0 <pad>   1 [MIN   2 [MAX   3 [MED   4 [SM   5 ]   6..15 the digits 0..9
struct ListOpsVocabulary {
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kMin = 1;
  static constexpr int64_t kMax = 2;
  static constexpr int64_t kMedian = 3;
  static constexpr int64_t kSumMod = 4;
  static constexpr int64_t kClose = 5;
  static constexpr int64_t kFirstDigit = 6;
  static constexpr int64_t kSize = 16;
  static constexpr int64_t kNumClasses = 10;

  // Throws attnkit::Error naming an unknown token and its position (1-based, parentheses counted).
  static std::vector<int64_t> encode(std::string_view source);
  // The same without throwing: `error` is set to that message (without the "ListOps source: "
  // prefix) and the ids read up to the unknown token are returned.
  static std::vector<int64_t> encode(std::string_view source, std::string& error);
  // Tokens joined by single spaces, without parentheses; pads are skipped. Error for an id >= kSize.
  static std::string decode(const std::vector<int64_t>& ids);
  static std::string_view token(int64_t id);  // "<pad>", "[MIN", ..., "9"; Error when out of range
};

// Writes LRA's TSV layout; throws attnkit::Error when the file cannot be written.
void write_listops_tsv(const std::vector<ListOpsExample>& examples, const std::string& path);
// Reads LRA's TSV layout. Throws attnkit::Error "PATH:LINE: ..." for a missing or wrong header, a
// row without exactly 2 tab-separated columns, a target that is not one of 0..9, or a source with
// an unknown token.
std::vector<ListOpsExample> read_listops_tsv(const std::string& path);

struct ListOpsSplitOptions {
  ListOpsOptions generator;
  size_t train_count = 96000;  // LRA's sizes
  size_t validation_count = 2000;
  size_t test_count = 2000;
  uint64_t train_seed = 0x4C52410000000001ull;  // "LRA" + split number: fixed and distinct
  uint64_t validation_seed = 0x4C52410000000002ull;
  uint64_t test_seed = 0x4C52410000000003ull;
  std::string task = "basic";  // file name prefix, as LRA's --task
};

struct ListOpsSplitFiles {
  std::string train;
  std::string validation;
  std::string test;
};

// Generates the three splits (disjoint with options.generator.unique) and streams them to
// DIRECTORY/{task}_train.tsv, {task}_val.tsv, {task}_test.tsv, creating DIRECTORY when needed.
ListOpsSplitFiles write_listops_splits(const ListOpsSplitOptions& options, const std::string& directory);

}  // namespace attnkit::data
