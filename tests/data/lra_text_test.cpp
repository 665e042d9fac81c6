// The LRA byte-level text data (lra-text, lra-retrieval) on fortune files: balanced labels, splits
// by fortune, passage bounds and retrieval pairs. The tasks that read them: tests/train/
// lra_text_tasks_test.cpp.
#include "attnkit/data/lra_text.h"
#include "data/fortune_files.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace attnkit::data {
namespace {

namespace fs = std::filesystem;
using attnkit::testing::small_options;
using attnkit::testing::write_fortunes;

// The fortunes a passage holds completely (tags are cut when the passage is).
std::set<std::string> tags_of(const std::string& text) {
  static const std::regex tag("<([a-z]+-[0-9]+)>");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), tag); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1].str());
  return out;
}

TEST(LraText, SplitsAreBalancedDisjointByFortuneAndWithinBounds) {
  // Unequal categories: the smallest decides each split's count per category.
  const auto dir = write_fortunes("lra_text", {{"alpha", 300}, {"beta", 200}, {"gamma", 120}});
  const auto options = small_options(dir, {"alpha", "beta", "gamma"});
  const LraTextSplits splits = build_lra_text(options);
  std::set<std::string> seen[3];
  const std::vector<TextPassage>* parts[] = {&splits.train, &splits.val, &splits.test};
  for (int s = 0; s < 3; ++s) {
    std::map<int64_t, size_t> per_label;
    for (const auto& p : *parts[s]) {
      ++per_label[p.label];
      EXPECT_GE(p.text.size(), 400u);
      EXPECT_LE(p.text.size(), 900u);
      const auto tags = tags_of(p.text);
      ASSERT_FALSE(tags.empty());
      for (const auto& t : tags) {
        // The label is the category of every fortune in the passage.
        EXPECT_EQ(t.substr(0, t.find('-')), splits.categories[static_cast<size_t>(p.label)]);
        seen[s].insert(t);
        // Each fortune is in the split its hash names.
      }
    }
    ASSERT_EQ(per_label.size(), 3u) << "split " << s;
    for (const auto& [label, count] : per_label) EXPECT_EQ(count, per_label.begin()->second) << "split " << s;
  }
  EXPECT_GT(splits.train.size(), 3 * splits.val.size());
  for (int a = 0; a < 3; ++a)
    for (int b = a + 1; b < 3; ++b)
      for (const auto& t : seen[a]) EXPECT_EQ(seen[b].count(t), 0u) << t << " in splits " << a << " and " << b;
  // Deterministic by seed.
  EXPECT_EQ(build_lra_text(options).train.front().text, splits.train.front().text);
}

TEST(LraText, RetrievalPairsAreBalancedAndPositivesShareNoFortune) {
  const auto dir = write_fortunes("lra_text", {{"alpha", 200}, {"beta", 200}, {"gamma", 200}});
  const auto splits = build_lra_text(small_options(dir, {"alpha", "beta", "gamma"}));
  const auto pairs = make_retrieval_pairs(splits.train, 5);
  ASSERT_GT(pairs.size(), 20u);
  size_t positives = 0;
  for (const auto& p : pairs) {
    const auto left = tags_of(p.left), right = tags_of(p.right);
    ASSERT_FALSE(left.empty());
    ASSERT_FALSE(right.empty());
    const bool same = left.begin()->substr(0, 2) == right.begin()->substr(0, 2);
    EXPECT_EQ(same, p.label == 1);
    for (const auto& t : left) EXPECT_EQ(right.count(t), 0u) << "pair shares fortune " << t;
    positives += static_cast<size_t>(p.label);
  }
  EXPECT_EQ(2 * positives, pairs.size());
}

TEST(LraText, DebianFortunesGiveBalancedSplits) {
  const std::string fortunes = "/usr/share/games/fortunes";
  for (const auto& c : default_text_categories())
    if (!fs::exists(fs::path(fortunes) / c)) GTEST_SKIP() << "Debian package fortunes is not installed";
  const auto splits = build_lra_text(LraTextOptions{});
  for (const auto* part : {&splits.train, &splits.val, &splits.test}) {
    std::map<int64_t, size_t> per_label;
    for (const auto& p : *part) {
      ++per_label[p.label];
      ASSERT_GE(p.text.size(), 1024u);
      ASSERT_LE(p.text.size(), 4096u);
    }
    ASSERT_EQ(per_label.size(), 4u);
    for (const auto& [label, count] : per_label) EXPECT_EQ(count, per_label.begin()->second);
  }
}

}  // namespace
}  // namespace attnkit::data
