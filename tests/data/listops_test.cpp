// LRA ListOps: the generator's distribution and determinism, the evaluator on hand-worked
// expressions, LRA's string and TSV formats, the vocabulary and batches.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "support/test_files.h"
#include "attnkit/data/listops.h"

namespace attnkit::data {
namespace {

namespace fs = std::filesystem;

using attnkit::testing::error_of;
using attnkit::testing::read_bytes;
using attnkit::testing::write_bytes;

fs::path listops_scratch_dir() { return attnkit::testing::scratch_directory("train_test_scratch"); }

// An independent model of LRA's data structure: generate_tree builds nested pairs
// t = (op, a1); t = (t, ai) for each further argument; t = (t, "]"), and to_string writes a pair
// as "( " + left + " " + right + " )". Built here from the paren-free tokens.
struct Pair {
  std::string leaf;
  std::shared_ptr<Pair> left, right;
};
using Node = std::shared_ptr<Pair>;

Node leaf(std::string token) { return std::make_shared<Pair>(Pair{std::move(token), nullptr, nullptr}); }
Node pair(Node left, Node right) { return std::make_shared<Pair>(Pair{"", std::move(left), std::move(right)}); }

Node build(const std::vector<std::string>& tokens, size_t& pos) {
  const std::string token = tokens[pos++];
  if (token.size() == 1 && token[0] >= '0' && token[0] <= '9') return leaf(token);
  Node t = pair(leaf(token), build(tokens, pos));
  while (tokens[pos] != "]") t = pair(t, build(tokens, pos));
  ++pos;
  return pair(t, leaf("]"));
}

std::string lra_to_string(const Node& t) {
  if (!t->left) return t->leaf;
  return "( " + lra_to_string(t->left) + " " + lra_to_string(t->right) + " )";
}

std::vector<std::string> tokens_without_parentheses(const std::string& source) {
  std::istringstream in(source);
  std::vector<std::string> tokens;
  for (std::string token; in >> token;) {
    if (token != "(" && token != ")") tokens.push_back(token);
  }
  return tokens;
}

ListOpsOptions small_options() {
  ListOpsOptions options;
  options.min_length = 10;
  options.max_length = 60;
  options.max_depth = 4;
  options.max_arguments = 4;
  return options;
}

// ---------------------------------------------------------------------------------------------
TEST(ListOpsEvaluator, HandWorkedExpressions) {
  EXPECT_EQ(evaluate_listops("[MAX 2 9 [MIN 4 7 ] 0 ]"), 9);          // max(2, 9, min(4, 7), 0)
  EXPECT_EQ(evaluate_listops("[MIN 8 [MAX 3 5 ] 6 ]"), 5);            // min(8, 5, 6)
  EXPECT_EQ(evaluate_listops("[MED 3 1 4 1 5 ]"), 3);                 // sorted 1 1 3 4 5 -> 3
  EXPECT_EQ(evaluate_listops("[MED 1 2 ]"), 1);                       // int(1.5)
  EXPECT_EQ(evaluate_listops("[MED 2 9 4 7 ]"), 5);                   // sorted 2 4 7 9 -> int(5.5)
  EXPECT_EQ(evaluate_listops("[SM 9 8 7 ]"), 4);                      // 24 mod 10
  EXPECT_EQ(evaluate_listops("[SM [MAX 3 8 ] [MIN 5 6 ] 9 ]"), 2);    // 8 + 5 + 9 = 22
  EXPECT_EQ(evaluate_listops("[MED [SM 5 5 ] [MAX 1 9 ] 4 ]"), 4);    // median(0, 9, 4)
  EXPECT_EQ(evaluate_listops("7"), 7);
  // LRA's parenthesised form evaluates the same: [MAX 2 9 ] and [SM [MIN 3 4 ] 8 ].
  EXPECT_EQ(evaluate_listops("( ( ( [MAX 2 ) 9 ) ] )"), 9);
  EXPECT_EQ(evaluate_listops("( ( ( [SM ( ( ( [MIN 3 ) 4 ) ] ) ) 8 ) ] )"), 1);  // 3 + 8 = 11
}

TEST(ListOpsEvaluator, ShapeOfAnExpression) {
  const ListOpsAnalysis a = analyze_listops("[MAX 2 [MIN 4 [SM 1 2 3 ] ] 5 ]");
  EXPECT_EQ(a.value, 5);         // max(2, min(4, 1 + 2 + 3), 5) = max(2, 4, 5)
  EXPECT_EQ(a.length, 12);       // 3 operators, 6 digits, 3 "]"
  EXPECT_EQ(a.depth, 4);         // the digits of SM sit at depth 4
  EXPECT_EQ(a.max_arguments, 3);
  const ListOpsAnalysis lone = analyze_listops("3");
  EXPECT_EQ(lone.depth, 1);
  EXPECT_EQ(lone.length, 1);
  EXPECT_EQ(lone.max_arguments, 0);
}

TEST(ListOpsEvaluator, MalformedExpressionsName) {
  EXPECT_NE(error_of([] { analyze_listops("[MAX 2 9"); }).find("not closed"), std::string::npos);
  EXPECT_NE(error_of([] { analyze_listops("[MAX ]"); }).find("[MAX has no arguments"), std::string::npos);
  EXPECT_NE(error_of([] { analyze_listops("2 3"); }).find("after the end"), std::string::npos);
  EXPECT_NE(error_of([] { analyze_listops("[FOO 1 ]"); }).find("unknown token '[FOO' (token 1)"), std::string::npos);
  EXPECT_NE(error_of([] { analyze_listops("( [MAX 1 ]"); }).find("'(' not closed"), std::string::npos);
  EXPECT_NE(error_of([] { analyze_listops("[MAX 1 ] )"); }).find("')' without"), std::string::npos);
  EXPECT_NE(error_of([] { analyze_listops("] 1"); }).find("']' without an open operator"), std::string::npos);
  EXPECT_NE(error_of([] { analyze_listops("  "); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([] { analyze_listops("[MAX 12 ]"); }).find("unknown token '12'"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
TEST(ListOpsGenerator, SameSeedSameBytesOtherSeedOtherData) {
  const fs::path dir = listops_scratch_dir();
  const ListOpsOptions options = small_options();
  write_listops_tsv(generate_listops(options, 42, 50), (dir / "a.tsv").string());
  write_listops_tsv(generate_listops(options, 42, 50), (dir / "b.tsv").string());
  write_listops_tsv(generate_listops(options, 43, 50), (dir / "c.tsv").string());
  EXPECT_EQ(read_bytes(dir / "a.tsv"), read_bytes(dir / "b.tsv"));
  EXPECT_NE(read_bytes(dir / "a.tsv"), read_bytes(dir / "c.tsv"));
  // A streaming generator gives the same sequence as the batch function.
  ListOpsGenerator generator(options, 42);
  const auto batch = generate_listops(options, 42, 5);
  for (const ListOpsExample& expected : batch) EXPECT_EQ(generator.next().source, expected.source);
}

TEST(ListOpsGenerator, SplitsAreReproducibleDistinctAndDisjoint) {
  const fs::path dir = listops_scratch_dir();
  ListOpsSplitOptions options;
  options.generator = small_options();
  options.train_count = 60;
  options.validation_count = 20;
  options.test_count = 20;
  const ListOpsSplitFiles first = write_listops_splits(options, (dir / "one").string());
  const ListOpsSplitFiles second = write_listops_splits(options, (dir / "two").string());
  EXPECT_EQ(fs::path(first.train).filename(), "basic_train.tsv");
  EXPECT_EQ(fs::path(first.validation).filename(), "basic_val.tsv");
  EXPECT_EQ(fs::path(first.test).filename(), "basic_test.tsv");
  EXPECT_EQ(read_bytes(first.train), read_bytes(second.train));
  EXPECT_EQ(read_bytes(first.validation), read_bytes(second.validation));
  EXPECT_EQ(read_bytes(first.test), read_bytes(second.test));

  std::set<std::string> all;
  size_t total = 0;
  for (const std::string& path : {first.train, first.validation, first.test}) {
    for (const ListOpsExample& example : read_listops_tsv(path)) {
      all.insert(example.source);
      ++total;
    }
  }
  EXPECT_EQ(total, 100u);
  EXPECT_EQ(all.size(), 100u);  // no expression twice, within or across splits
}

TEST(ListOpsGenerator, FollowsLrasDistribution) {
  // LRA's own settings: lengths strictly between 500 and 2000, depth <= 10, 2..10 arguments.
  const ListOpsOptions lra;
  const auto examples = generate_listops(lra, 2021, 200);
  std::array<int, 10> classes{};
  std::array<int, 11> argument_counts_seen{};
  int deepest = 0;
  int64_t shortest = 1 << 30, longest = 0;
  for (const ListOpsExample& example : examples) {
    const ListOpsAnalysis a = analyze_listops(example.source);
    ASSERT_EQ(a.value, example.target) << example.source;
    ASSERT_GT(a.length, 500);
    ASSERT_LT(a.length, 2000);
    ASSERT_LE(a.depth, 10);
    ASSERT_GE(a.max_arguments, 2);
    ASSERT_LE(a.max_arguments, 10);
    ASSERT_EQ(static_cast<int64_t>(ListOpsVocabulary::encode(example.source).size()), a.length);
    // Exactly LRA's to_string of its nested-pair tree.
    const auto tokens = tokens_without_parentheses(example.source);
    size_t pos = 0;
    ASSERT_EQ(lra_to_string(build(tokens, pos)), example.source);
    ++classes[static_cast<size_t>(example.target)];
    ++argument_counts_seen[static_cast<size_t>(a.max_arguments)];
    deepest = std::max(deepest, a.depth);
    shortest = std::min(shortest, a.length);
    longest = std::max(longest, a.length);
  }
  EXPECT_EQ(deepest, 10);  // with 500+ tokens the deepest level is reached
  EXPECT_EQ(argument_counts_seen[10] > 0, true);
  EXPECT_LT(shortest, 800);
  EXPECT_GT(longest, 1500);
  // The class histogram is not degenerate: most classes occur and none dominates.
  int present = 0;
  for (int count : classes) present += count > 0;
  EXPECT_GE(present, 7);
  EXPECT_LT(*std::max_element(classes.begin(), classes.end()), 100);
}

TEST(ListOpsGenerator, OptionsAreChecked) {
  ListOpsOptions bad = small_options();
  bad.max_arguments = 1;
  EXPECT_THROW(ListOpsGenerator(bad, 1), Error);
  bad = small_options();
  bad.min_length = 10;
  bad.max_length = 11;  // no length is strictly between
  EXPECT_NE(error_of([&] { ListOpsGenerator(bad, 1); }).find("min_length"), std::string::npos);
  bad = small_options();
  bad.operator_probability = 1.0;
  EXPECT_THROW(ListOpsGenerator(bad, 1), Error);
  bad = small_options();
  bad.max_depth = 0;
  EXPECT_THROW(ListOpsGenerator(bad, 1), Error);
}

TEST(ListOpsGenerator, GivesUpWhenNoNewExpressionExists) {
  ListOpsOptions digits_only = small_options();
  digits_only.min_length = 0;
  digits_only.max_length = 2;  // only the 10 lone digits fit
  ListOpsGenerator generator(digits_only, 5);
  std::set<int> values;
  for (int i = 0; i < 10; ++i) values.insert(generator.next().target);
  EXPECT_EQ(values.size(), 10u);
  EXPECT_NE(error_of([&] { generator.next(); }).find("rejected"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
TEST(ListOpsTsv, RoundTripInLrasLayout) {
  const fs::path dir = listops_scratch_dir();
  const std::vector<ListOpsExample> examples = {{"( ( ( [MAX 2 ) 9 ) ] )", 9}, {"7", 7},
                                                {"( ( ( [SM ( ( ( [MIN 3 ) 4 ) ] ) ) 8 ) ] )", 1}};
  write_listops_tsv(examples, (dir / "basic_test.tsv").string());
  EXPECT_EQ(read_bytes(dir / "basic_test.tsv"),
            "Source\tTarget\r\n( ( ( [MAX 2 ) 9 ) ] )\t9\r\n7\t7\r\n( ( ( [SM ( ( ( [MIN 3 ) 4 ) ] ) ) 8 ) ] )\t1\r\n");
  const auto back = read_listops_tsv((dir / "basic_test.tsv").string());
  ASSERT_EQ(back.size(), examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    EXPECT_EQ(back[i].source, examples[i].source);
    EXPECT_EQ(back[i].target, examples[i].target);
  }
  // "\n" line ends read the same.
  write_bytes(dir / "unix.tsv", "Source\tTarget\n[MAX 2 9 ]\t9\n");
  const auto unix_lines = read_listops_tsv((dir / "unix.tsv").string());
  ASSERT_EQ(unix_lines.size(), 1u);
  EXPECT_EQ(unix_lines[0].source, "[MAX 2 9 ]");
}

TEST(ListOpsTsv, MalformedFilesNameFileAndLine) {
  const fs::path dir = listops_scratch_dir();
  const std::string path = (dir / "bad.tsv").string();
  auto message_for = [&](const std::string& content) {
    write_bytes(path, content);
    return error_of([&] { read_listops_tsv(path); });
  };
  EXPECT_EQ(message_for("Source\tTarget\r\n[MAX 1 2 ]\t2\r\n[MAX 1 2 ]\t2\textra\r\n"),
            path + ":3: expected 2 tab-separated columns, got 3");
  EXPECT_EQ(message_for("Source\tTarget\n[MAX 1 2 ]\n"), path + ":2: expected 2 tab-separated columns, got 1");
  EXPECT_EQ(message_for("Source\tTarget\n[MAX 1 2 ]\t12\n"), path + ":2: target '12' is not a class in 0..9");
  EXPECT_EQ(message_for("Source\tTarget\n[MAX 1 2 ]\t2\n[MAX 1 2 ]\t2\n[MAX 1 2 ]\t2\n( [MAX 1 X ] )\t2\n"),
            path + ":5: unknown token 'X' (token 4)");
  EXPECT_EQ(message_for("[MAX 1 2 ]\t2\n"), path + ":1: expected the header 'Source<TAB>Target', got '[MAX 1 2 ]\t2'");
  EXPECT_NE(message_for("").find("empty file"), std::string::npos);
  EXPECT_NE(error_of([&] { read_listops_tsv((dir / "missing.tsv").string()); }).find("missing.tsv: cannot open"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
TEST(ListOpsVocabulary, EncodesAsLraTokenises) {
  using V = ListOpsVocabulary;
  // Parentheses dropped, "]" kept, operators and digits as they are.
  EXPECT_EQ(V::encode("( ( ( [MAX 2 ) 9 ) ] )"), (std::vector<int64_t>{V::kMax, V::kFirstDigit + 2, V::kFirstDigit + 9, V::kClose}));
  EXPECT_EQ(V::encode("[MIN [MED 0 ] [SM 1 ] ]"),
            (std::vector<int64_t>{V::kMin, V::kMedian, V::kFirstDigit, V::kClose, V::kSumMod, V::kFirstDigit + 1, V::kClose, V::kClose}));
  EXPECT_EQ(V::decode({V::kMax, V::kFirstDigit + 2, V::kClose, V::kPad, V::kPad}), "[MAX 2 ]");
  EXPECT_EQ(V::token(V::kPad), "<pad>");
  EXPECT_EQ(V::token(15), "9");
  EXPECT_THROW(V::token(16), Error);
  EXPECT_NE(error_of([] { V::encode("[MAX 1 [first 2 ] ]"); }).find("unknown token '[first' (token 3)"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::data
