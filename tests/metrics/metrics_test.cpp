// Metrics against hand-computed values and the published examples of seqeval, SQuAD and NLTK.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/metrics/metrics.h"
#include "support/test_files.h"

namespace attnkit::metrics {
namespace {

using attnkit::testing::error_of;
using Tags = std::vector<std::string>;
using Tokens = std::vector<std::string>;

TEST(ClassificationMetrics, Accuracy) {
  EXPECT_DOUBLE_EQ(accuracy({1, 2, 3, 4}, {1, 2, 0, 4}), 0.75);
  EXPECT_DOUBLE_EQ(accuracy({}, {}), 0.0);
  EXPECT_THROW(accuracy({1}, {1, 2}), Error);
}

// ---------------------------------------------------------------------------------------------
TEST(TaggingMetrics, EntitiesFollowSeqevalRules) {
  // seqeval's get_entities docstring: [('PER', 0, 1), ('LOC', 3, 3)] with inclusive ends.
  EXPECT_EQ(bio_entities({"B-PER", "I-PER", "O", "B-LOC"}),
            (std::vector<EntitySpan>{{"PER", 0, 2}, {"LOC", 3, 4}}));
  // An I- after O starts an entity; a type change splits; B- after B- starts a new one.
  EXPECT_EQ(bio_entities({"O", "I-PER", "I-PER"}), (std::vector<EntitySpan>{{"PER", 1, 3}}));
  EXPECT_EQ(bio_entities({"B-PER", "I-LOC"}), (std::vector<EntitySpan>{{"PER", 0, 1}, {"LOC", 1, 2}}));
  EXPECT_EQ(bio_entities({"B-PER", "B-PER", "I-PER"}), (std::vector<EntitySpan>{{"PER", 0, 1}, {"PER", 1, 3}}));
  EXPECT_EQ(bio_entities({"O", "O"}), std::vector<EntitySpan>{});
  EXPECT_THROW(bio_entities({"O", "X-PER"}), Error);
  EXPECT_THROW(bio_entities({"PER"}), Error);
}

TEST(TaggingMetrics, SeqevalDocstringExample) {
  // seqeval's f1_score / accuracy_score docstrings: F1 0.50, accuracy 0.80.
  const std::vector<Tags> gold = {{"O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"}, {"B-PER", "I-PER", "O"}};
  const std::vector<Tags> predicted = {{"O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"}, {"B-PER", "I-PER", "O"}};
  const TaggingScores s = tagging_scores(predicted, gold);
  // predicted entities MISC[2,6) PER[0,2); gold MISC[3,6) PER[0,2): 1 correct of 2 and 2.
  EXPECT_EQ(s.entities.predicted, 2u);
  EXPECT_EQ(s.entities.gold, 2u);
  EXPECT_EQ(s.entities.correct, 1u);
  EXPECT_DOUBLE_EQ(s.entities.precision, 0.5);
  EXPECT_DOUBLE_EQ(s.entities.recall, 0.5);
  EXPECT_DOUBLE_EQ(s.entities.f1, 0.5);
  EXPECT_EQ(s.tokens, 10u);
  EXPECT_EQ(s.correct_tokens, 8u);
  EXPECT_DOUBLE_EQ(s.token_accuracy, 0.8);
  EXPECT_DOUBLE_EQ(s.by_type.at("MISC").f1, 0.0);
  EXPECT_DOUBLE_EQ(s.by_type.at("PER").f1, 1.0);
}

TEST(TaggingMetrics, UnequalPrecisionAndRecall) {
  // gold: PER[0,2) LOC[3,4) ORG[5,6); predicted: PER[0,2) LOC[3,5).
  // correct 1 -> precision 1/2, recall 1/3, F1 = 2 * (1/2)(1/3) / (1/2 + 1/3) = (1/3) / (5/6) = 0.4
  const TaggingScores s = tagging_scores({{"B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O"}},
                                         {{"B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG"}});
  EXPECT_DOUBLE_EQ(s.entities.precision, 0.5);
  EXPECT_DOUBLE_EQ(s.entities.recall, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.entities.f1, 0.4);
  EXPECT_EQ(s.by_type.at("ORG").gold, 1u);
  EXPECT_EQ(s.by_type.at("ORG").predicted, 0u);
  EXPECT_THROW(tagging_scores({{"O"}}, {{"O", "O"}}), Error);
  EXPECT_THROW(tagging_scores({{"O"}}, {}), Error);
}

// ---------------------------------------------------------------------------------------------
TEST(SquadMetrics, Normalisation) {
  EXPECT_EQ(normalize_squad_answer("The  Quick, brown fox!"), "quick brown fox");
  EXPECT_EQ(normalize_squad_answer("an apple and a pear"), "apple and pear");
  EXPECT_EQ(normalize_squad_answer("Then, Theatre and Anna"), "then theatre and anna");  // whole words only
  EXPECT_EQ(normalize_squad_answer("  \t"), "");
  EXPECT_EQ(normalize_squad_answer("Ärger in the\u00A0Café"), "ärger in café");  // Unicode lower-case and spaces
  EXPECT_EQ(normalize_squad_answer("don't-stop"), "dontstop");                       // punctuation removed, not split
}

TEST(SquadMetrics, ExactMatchAndF1TakeTheBestGoldAnswer) {
  // "the cat sat" -> [cat, sat]; "a cat sat down" -> [cat, sat, down]: 2 common,
  // precision 2/2, recall 2/3, F1 = 2 * (1 * 2/3) / (1 + 2/3) = (4/3) / (5/3) = 0.8.
  EXPECT_DOUBLE_EQ(squad_f1("the cat sat", {"a cat sat down", "dog"}), 0.8);
  EXPECT_DOUBLE_EQ(squad_exact_match("the cat sat", {"a cat sat down", "dog"}), 0.0);
  EXPECT_DOUBLE_EQ(squad_exact_match("the cat sat", {"dog", "Cat sat."}), 1.0);
  EXPECT_DOUBLE_EQ(squad_f1("the cat sat", {"dog", "Cat sat."}), 1.0);
  // Repeated tokens count once per occurrence: [a, b, b] vs [b, c]: 1 common -> P 1/3, R 1/2, F1 0.4.
  EXPECT_DOUBLE_EQ(squad_f1("x b b", {"b c"}), 0.4);
  // Unanswerable (no gold answers = one empty answer): only an empty prediction scores.
  EXPECT_DOUBLE_EQ(squad_exact_match("", {}), 1.0);
  EXPECT_DOUBLE_EQ(squad_f1("", {}), 1.0);
  EXPECT_DOUBLE_EQ(squad_f1("something", {}), 0.0);

  const SquadScores scores = squad_scores({"the cat sat", "Denver Broncos", "nothing"},
                                          {{"a cat sat down"}, {"Denver Broncos", "Broncos"}, {"Carolina"}});
  EXPECT_EQ(scores.questions, 3u);
  EXPECT_DOUBLE_EQ(scores.exact_match, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(scores.f1, (0.8 + 1.0 + 0.0) / 3.0);
  EXPECT_THROW(squad_scores({"a"}, {}), Error);
}

// ---------------------------------------------------------------------------------------------
TEST(LanguageModelMetrics, Perplexity) {
  EXPECT_NEAR(perplexity(3 * std::log(5.0), 3), 5.0, 1e-12);  // every token at probability 1/5
  EXPECT_DOUBLE_EQ(perplexity(0, 10), 1.0);
  EXPECT_THROW(perplexity(1.0, 0), Error);
  EXPECT_THROW(perplexity(-1.0, 2), Error);
  EXPECT_THROW(perplexity(std::nan(""), 2), Error);
}

// The frequency baseline by hand: add-one smoothing over the ids not excluded, excluded ids
// neither counted nor predicted, the most frequent id (the smallest on a tie), bad ids refused.
TEST(LanguageModelMetrics, UnigramBaseline) {
  const std::vector<char> excluded = {1, 1, 0, 0, 0, 0, 0};  // ids 0, 1 excluded: five ids kept
  const std::vector<int64_t> a = {0, 2, 2, 3, 1}, b = {0, 2, 5, 1, 1};
  const auto baseline = unigram_baseline({&a, &b}, excluded);
  ASSERT_EQ(baseline.log_probability.size(), 7u);
  for (int id : {0, 1}) EXPECT_TRUE(std::isinf(baseline.log_probability[id]) && baseline.log_probability[id] < 0);
  // 5 kept tokens counted (id 2 three times, ids 3 and 5 once) + 5 kept ids = 10.
  EXPECT_DOUBLE_EQ(baseline.log_probability[2], std::log(4.0 / 10));
  EXPECT_DOUBLE_EQ(baseline.log_probability[3], std::log(2.0 / 10));
  EXPECT_DOUBLE_EQ(baseline.log_probability[4], std::log(1.0 / 10));
  EXPECT_DOUBLE_EQ(baseline.log_probability[5], std::log(2.0 / 10));
  EXPECT_DOUBLE_EQ(baseline.log_probability[6], std::log(1.0 / 10));
  EXPECT_EQ(baseline.most_frequent, 2);
  const std::vector<int64_t> tie = {6, 4, 4, 6};
  EXPECT_EQ(unigram_baseline({&tie}, excluded).most_frequent, 4);
  EXPECT_EQ(unigram_baseline({}, excluded).most_frequent, 2);
  // Nothing excluded: every id counts, excluded ones included.
  const auto all = unigram_baseline({&a}, std::vector<char>(7, 0));
  EXPECT_DOUBLE_EQ(all.log_probability[0], std::log(2.0 / 12));
  const std::vector<int64_t> bad = {2, 7};
  EXPECT_EQ(error_of([&] { unigram_baseline({&bad}, excluded); }),
            "unigram baseline: token id 7 is outside the vocabulary [0, 7)");
  EXPECT_EQ(error_of([&] { unigram_baseline({&a}, std::vector<char>(7, 1)); }),
            "unigram baseline: every id of the vocabulary is excluded");
}

// ---------------------------------------------------------------------------------------------
TEST(BleuMetric, NltkCorpusBleuDocstringExample) {
  const Tokens hyp1 = {"It", "is", "a", "guide", "to", "action", "which", "ensures", "that", "the", "military",
                       "always", "obeys", "the", "commands", "of", "the", "party"};
  const Tokens ref1a = {"It", "is", "a", "guide", "to", "action", "that", "ensures", "that", "the", "military",
                        "will", "forever", "heed", "Party", "commands"};
  const Tokens ref1b = {"It", "is", "the", "guiding", "principle", "which", "guarantees", "the", "military",
                        "forces", "always", "being", "under", "the", "command", "of", "the", "Party"};
  const Tokens ref1c = {"It", "is", "the", "practical", "guide", "for", "the", "army", "always", "to", "heed",
                        "the", "directions", "of", "the", "party"};
  const Tokens hyp2 = {"he", "read", "the", "book", "because", "he", "was", "interested", "in", "world", "history"};
  const Tokens ref2a = {"he", "was", "interested", "in", "world", "history", "because", "he", "read", "the", "book"};
  const BleuScore bleu = corpus_bleu({hyp1, hyp2}, {{ref1a, ref1b, ref1c}, {ref2a}});
  // Worked by hand (each hypothesis n-gram counts at most as often as in the one reference that
  // has it most often):
  // hyp1 (18 tokens) against ref1a/b/c (16, 18, 16 tokens):
  //   1-grams 17/18: only "obeys" is in no reference ("the" x3 is within ref1b's 4).
  //   2-grams 10/17: It is, is a, a guide, guide to, to action, ensures that, that the,
  //                  the military, of the, the party.
  //   3-grams  7/16: It is a, is a guide, a guide to, guide to action, ensures that the,
  //                  that the military, of the party.
  //   4-grams  4/15: It is a guide, is a guide to, a guide to action, ensures that the military.
  //   closest reference length 18 (ref1b).
  // hyp2 (11 tokens) against ref2a (the same 11 words reordered):
  //   1-grams 11/11; 2-grams 9/10 (all but "book because"); 3-grams 6/9 (he read the,
  //   read the book, he was interested, was interested in, interested in world, in world history);
  //   4-grams 4/8 (he read the book, he was interested in, was interested in world,
  //   interested in world history); closest reference length 11.
  // Corpus: p1 = 28/29, p2 = 19/27, p3 = 13/25, p4 = 8/23; c = 18 + 11 = 29 = r = 18 + 11, so
  // BP = 1 (c > r fails, exp(1 - 29/29) = 1).
  // BLEU = (28/29 * 19/27 * 13/25 * 8/23)^(1/4) = (55328 / 450225)^(1/4) = 0.1228896662779721^(1/4)
  //      = 0.5920778868801042, NLTK's doctest value.
  EXPECT_EQ(bleu.matches, (std::array<size_t, 4>{28, 19, 13, 8}));
  EXPECT_EQ(bleu.totals, (std::array<size_t, 4>{29, 27, 25, 23}));
  EXPECT_EQ(bleu.hypothesis_length, 29u);
  EXPECT_EQ(bleu.reference_length, 29u);
  EXPECT_DOUBLE_EQ(bleu.brevity_penalty, 1.0);
  EXPECT_DOUBLE_EQ(bleu.precisions[1], 19.0 / 27.0);
  EXPECT_DOUBLE_EQ(bleu.score, std::pow(55328.0 / 450225.0, 0.25));
  EXPECT_NEAR(bleu.score, 0.5920778868801042, 1e-15);
}

TEST(BleuMetric, BrevityPenaltyAndClipping) {
  // The BLEU paper's brevity example as NLTK's docstring has it: two references of 28 "a", a
  // hypothesis of 12 "a". Every n-gram matches (p_n = 1, clipped at 28 - n + 1 >= 13 - n), c = 12,
  // r = 28, BP = exp(1 - 28/12) = exp(-4/3) = 0.26359713811572677.
  const Tokens twelve(12, "a");
  const Tokens twenty_eight(28, "a");
  BleuScore bleu = corpus_bleu({twelve}, {{twenty_eight, twenty_eight}});
  EXPECT_EQ(bleu.matches, (std::array<size_t, 4>{12, 11, 10, 9}));
  EXPECT_DOUBLE_EQ(bleu.brevity_penalty, std::exp(-4.0 / 3.0));
  EXPECT_NEAR(bleu.score, 0.2635971381157267, 1e-15);
  // Closest reference length, the shorter one on a tie (13 and 11 around 12): r = 11 < c, BP = 1.
  bleu = corpus_bleu({twelve}, {{Tokens(13, "a"), Tokens(11, "a")}});
  EXPECT_EQ(bleu.reference_length, 11u);
  EXPECT_DOUBLE_EQ(bleu.brevity_penalty, 1.0);
  // Clipping, the paper's "the the the the the the the" against "the cat is on the mat" /
  // "there is a cat on the mat": "the" is clipped at 2, so p1 = 2/7; no 2-gram matches -> BLEU 0.
  bleu = corpus_bleu({Tokens(7, "the")}, {{{"the", "cat", "is", "on", "the", "mat"},
                                           {"there", "is", "a", "cat", "on", "the", "mat"}}});
  EXPECT_DOUBLE_EQ(bleu.precisions[0], 2.0 / 7.0);
  EXPECT_EQ(bleu.matches[1], 0u);
  EXPECT_DOUBLE_EQ(bleu.score, 0.0);
  // Fewer than 4 tokens: no 4-grams at all -> BLEU 0 (no smoothing).
  bleu = corpus_bleu({{"a", "b", "c"}}, {{{"a", "b", "c"}}});
  EXPECT_EQ(bleu.totals[3], 0u);
  EXPECT_DOUBLE_EQ(bleu.score, 0.0);
  EXPECT_THROW(corpus_bleu({twelve}, {{}}), Error);
  EXPECT_THROW(corpus_bleu({twelve}, {}), Error);
}

}  // namespace
}  // namespace attnkit::metrics
