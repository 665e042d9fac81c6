// sacreBLEU's corpus BLEU and chrF on hand-worked cases (the package itself is the peer of
// tests/python/test_bleu_sacrebleu.py).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/metrics/metrics.h"

namespace attnkit::metrics {
namespace {

using Tokens = std::vector<std::string>;

TEST(Tokenize13a, PunctuationNumbersAndEntities) {
  EXPECT_EQ(tokenize_13a("Hello, world!"), (Tokens{"Hello", ",", "world", "!"}));
  // Comma and period stay inside numbers; '$' and parentheses go.
  EXPECT_EQ(tokenize_13a("It costs $1,000.50 (approx.)"),
            (Tokens{"It", "costs", "$", "1,000.50", "(", "approx", ".", ")"}));
  // A hyphen splits after a digit only; apostrophes stay.
  EXPECT_EQ(tokenize_13a("3-4 well-known don't"), (Tokens{"3", "-", "4", "well-known", "don't"}));
  EXPECT_EQ(tokenize_13a("e.g. U.S.A."), (Tokens{"e", ".", "g", ".", "U", ".", "S", ".", "A", "."}));
  // The padding space makes a leading period a token; "5." splits, "a.b" too.
  EXPECT_EQ(tokenize_13a(".5 and 5. and a.b"), (Tokens{".", "5", "and", "5", ".", "and", "a", ".", "b"}));
  EXPECT_EQ(tokenize_13a("A &amp; B &lt;c&gt; &quot;x&quot;"),
            (Tokens{"A", "&", "B", "<", "c", ">", "\"", "x", "\""}));
  EXPECT_EQ(tokenize_13a("x-\ny<skipped>z"), (Tokens{"xyz"}));
  // Non-ASCII punctuation is left alone; Unicode spaces separate.
  EXPECT_EQ(tokenize_13a("café, naïve… “quoted”\u3000end\u00a0"),
            (Tokens{"café", ",", "naïve…", "“quoted”", "end"}));
  EXPECT_TRUE(tokenize_13a("   ").empty());
}

TEST(SacreBleu, HandWorkedExpSmoothing) {
  // p1 = 3/4, p2 = 1/3, p3 = 0/2 -> 1/(2·2), p4 = 0/1 -> 1/(4·1); BP = 1.
  const auto bleu = sacrebleu_corpus_bleu({"a b c d"}, {{"a b x d"}});
  EXPECT_NEAR(bleu.score, std::pow(0.75 / 3 * 0.25 * 0.25, 0.25), 1e-12);
  EXPECT_EQ(bleu.matches, (std::array<size_t, 4>{3, 1, 0, 0}));
  EXPECT_EQ(bleu.totals, (std::array<size_t, 4>{4, 3, 2, 1}));
  EXPECT_EQ(format_sacrebleu(bleu),
            "BLEU = 35.36 75.0/33.3/25.0/25.0 (BP = 1.000 ratio = 1.000 hyp_len = 4 ref_len = 4)");
  EXPECT_EQ(format_sacrebleu(sacrebleu_corpus_bleu({"the cat sat on the mat"}, {{"the cat sat on a mat"}})),
            "BLEU = 53.73 83.3/60.0/50.0/33.3 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)");
}

TEST(SacreBleu, EdgeCases) {
  // No match at all: 0, precisions 0, BP still computed.
  const auto none = sacrebleu_corpus_bleu({"x y"}, {{"a b c d"}});
  EXPECT_EQ(none.score, 0.0);
  EXPECT_NEAR(none.brevity_penalty, std::exp(1 - 4.0 / 2), 1e-12);
  // Empty hypothesis: BP 0, score 0.
  EXPECT_EQ(sacrebleu_corpus_bleu({""}, {{"a b"}}).score, 0.0);
  // A corpus with no 4-gram in any hypothesis scores 0 even with matches.
  EXPECT_EQ(sacrebleu_corpus_bleu({"a b c"}, {{"a b c"}}).score, 0.0);
  // Identical text: 1. Several references: n-gram counts merge by maximum, closest length.
  EXPECT_NEAR(sacrebleu_corpus_bleu({"a b c d e"}, {{"a b c d e"}}).score, 1.0, 1e-12);
  const auto multi = sacrebleu_corpus_bleu({"a a b c d"}, {{"a b c d", "a a x"}});
  EXPECT_EQ(multi.matches[0], 5u);
  EXPECT_EQ(multi.reference_length, 4u);  // |5-4| = 1 < |5-3| = 2
  EXPECT_THROW(sacrebleu_corpus_bleu({"a"}, {}), Error);
  EXPECT_THROW(sacrebleu_corpus_bleu({"a"}, {{}}), Error);
}

TEST(SacreChrf, HandWorked) {
  // Orders 1..3 have n-grams: P = R = (2/3 + 1/2 + 0) / 3.
  const auto chrf = sacrebleu_corpus_chrf({"abc"}, {{"abd"}});
  EXPECT_NEAR(chrf.score, (2.0 / 3 + 0.5) / 3, 1e-12);
  EXPECT_EQ(format_chrf(chrf), "chrF2 = 38.89");
  EXPECT_EQ(sacrebleu_corpus_chrf({"a b"}, {{"ab"}}).score, 1.0);  // whitespace is not counted
  EXPECT_EQ(sacrebleu_corpus_chrf({""}, {{"ab"}}).score, 0.0);
  // The best reference per segment counts.
  EXPECT_EQ(sacrebleu_corpus_chrf({"héllo"}, {{"xyz", "héllo"}}).score, 1.0);
}

}  // namespace
}  // namespace attnkit::metrics
