#pragma once
// Evaluation metrics over plain values (no tensors). Every function takes predictions first, then
// the references, and throws attnkit::Error when their counts differ. Scores are fractions in
// [0, 1] (multiply by 100 for the percentages the SQuAD and BLEU scripts print).
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::metrics {

// Fraction of predictions equal to their label; 0 for no examples.
double accuracy(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels);

// ---------------------------------------------------------------------------------------------
// Token tagging, seqeval-style (its default, conlleval-compatible mode). A tag is "O" or
// "B-TYPE", "I-TYPE" (also "E-TYPE", "S-TYPE"; a bare "B"/"I" has type "_"). An entity starts at
// B (or S), at an I/E that follows O, E or S, or where the type changes; it ends before the next
// B/S/O, after E/S, or where the type changes. So "O I-PER I-PER" is one PER entity, and
// "B-PER I-LOC" two entities.
struct EntitySpan {
  std::string type;
  size_t begin = 0;  // token positions [begin, end)
  size_t end = 0;
  bool operator==(const EntitySpan& other) const {
    return type == other.type && begin == other.begin && end == other.end;
  }
};
// Throws attnkit::Error for a tag that is not "O" and does not start with B-, I-, E- or S-.
std::vector<EntitySpan> bio_entities(const std::vector<std::string>& tags);

struct EntityScores {
  size_t predicted = 0;  // entities in the predictions
  size_t gold = 0;       // entities in the references
  size_t correct = 0;    // predicted entities with exactly the same type and span as a gold one
  double precision = 0;  // correct / predicted (0 when none predicted)
  double recall = 0;     // correct / gold (0 when none in gold)
  double f1 = 0;         // harmonic mean (0 when both are 0)
};

struct TaggingScores {
  EntityScores entities;                        // micro average over all types (seqeval's f1_score)
  std::map<std::string, EntityScores> by_type;  // every type in predictions or references
  size_t tokens = 0;
  size_t correct_tokens = 0;
  double token_accuracy = 0;  // correct_tokens / tokens (seqeval's accuracy_score)
};
// Sentences are scored one by one (entities never cross sentences); each predicted sentence must
// have as many tags as its reference.
TaggingScores tagging_scores(const std::vector<std::vector<std::string>>& predictions,
                             const std::vector<std::vector<std::string>>& references);

// ---------------------------------------------------------------------------------------------
// SQuAD (evaluate-v1.1.py / v2.0): answers are compared after lower-casing, removing ASCII
// punctuation, removing the words "a", "an", "the" and collapsing whitespace.
std::string normalize_squad_answer(std::string_view text);
// Best score over the gold answers. No gold answers counts as one empty gold answer (SQuAD 2.0's
// unanswerable questions); when the prediction or the gold answer normalises to nothing, F1 is 1
// if both do and 0 otherwise (SQuAD 2.0's rule).
double squad_exact_match(std::string_view prediction, const std::vector<std::string>& gold_answers);
double squad_f1(std::string_view prediction, const std::vector<std::string>& gold_answers);

struct SquadScores {
  double exact_match = 0;  // mean over questions
  double f1 = 0;
  size_t questions = 0;
};
SquadScores squad_scores(const std::vector<std::string>& predictions,
                         const std::vector<std::vector<std::string>>& gold_answers);

// ---------------------------------------------------------------------------------------------
// exp(total_negative_log_likelihood / token_count), natural logarithms. Throws attnkit::Error
// when token_count <= 0 or the total is negative or not finite.
double perplexity(double total_negative_log_likelihood, double token_count);

// A language model's frequency ("unigram") baseline: each target predicted from how often it
// occurs among the training targets, whatever its context. A model whose perplexity is not well
// below this one's on the same targets has learned little more than which tokens are frequent.
// excluded[id] != 0: an id that is never a target (the masked LM's special tokens), neither
// counted nor predicted; excluded.size() is the vocabulary size.
// log_probability[id] = log((count(id) + 1) / (N + V)) over the V ids not excluded (add-one
// smoothing; N: their occurrences in `rows`), -infinity for an excluded id. most_frequent: the
// id counted most often (the smallest on a tie), the baseline's prediction for its accuracy.
// Throws attnkit::Error for an id outside [0, excluded.size()) or when every id is excluded.
struct UnigramBaseline {
  std::vector<double> log_probability;
  int64_t most_frequent = 0;
};
UnigramBaseline unigram_baseline(const std::vector<const std::vector<int64_t>*>& rows,
                                 const std::vector<char>& excluded);

// ---------------------------------------------------------------------------------------------
// Corpus BLEU (Papineni et al. 2002) over given token lists, as NLTK's corpus_bleu with default
// weights and sacrebleu with tokenize="none", no smoothing: clipped n-gram matches (n = 1..4,
// each clipped by its largest count in any one reference) and hypothesis n-gram counts are summed
// over the corpus; r sums each hypothesis's closest reference length (the shorter on a tie);
// BP = 1 when c > r, else exp(1 - r/c) (0 when c = 0); BLEU = BP * exp(sum_n log(p_n) / 4),
// and 0 when any p_n is 0.
struct BleuScore {
  double score = 0;
  std::array<double, 4> precisions{};  // p_1 .. p_4 (0 where there are no n-grams)
  std::array<size_t, 4> matches{};     // clipped matches per order
  std::array<size_t, 4> totals{};      // hypothesis n-grams per order
  double brevity_penalty = 0;
  size_t hypothesis_length = 0;  // c
  size_t reference_length = 0;   // r
};
// references[i] holds the reference translations of hypotheses[i] (at least one).
BleuScore corpus_bleu(const std::vector<std::vector<std::string>>& hypotheses,
                      const std::vector<std::vector<std::vector<std::string>>>& references);

// ---------------------------------------------------------------------------------------------
// sacreBLEU (Post 2018; the `sacrebleu` package 2.x with its default settings) on detokenised
// text. references[i] holds the reference strings of hypotheses[i] (at least one each).
//
// Tokenisation "13a" (mteval-v13a.pl as sacreBLEU runs it): trailing whitespace is stripped,
// "<skipped>" and "-\n" removed, line breaks become spaces, &quot; &amp; &lt; &gt; decoded (in
// that order); the line is padded with a space on each side; then each of the ASCII punctuation
// marks { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ / gets a space on both
// sides; a period or comma after a non-digit is split off ("x." -> "x . "), then one before a
// non-digit (" . x"), and a hyphen after a digit ("3-" -> "3 - "), each rule applied left to
// right without overlaps as Python's re.sub; tokens are what stays between Unicode whitespace
// (Python's str.split()). Digits are ASCII 0-9 only.
std::vector<std::string> tokenize_13a(std::string_view line);

// sacreBLEU's BLEU (tokenize="13a", smooth_method="exp", lowercase=False, 4-grams): n-gram
// counts of every reference of a hypothesis are merged by maximum; BP as corpus_bleu; when no
// n-gram of any order matches, BLEU is 0; otherwise p_n = matches / totals, where an order with
// no match takes p_n = 1 / (2^k · totals) for the k-th such order ("exp" smoothing), and an order
// with no hypothesis n-gram at all ends the list with p_n = 0 (BLEU 0). Fractions as above:
// sacreBLEU prints 100 · score.
BleuScore sacrebleu_corpus_bleu(const std::vector<std::string>& hypotheses,
                                const std::vector<std::vector<std::string>>& references);

// The same in two steps, for resampling (metrics/stats.h): each hypothesis's statistics alone (a
// BleuScore with only matches, totals and the two lengths set: sacreBLEU's per-segment
// statistics), and the score of summed statistics (sacreBLEU's _compute_score_from_stats).
std::vector<BleuScore> sacrebleu_segment_statistics(const std::vector<std::string>& hypotheses,
                                                    const std::vector<std::vector<std::string>>& references);
BleuScore sacrebleu_bleu_from_statistics(const BleuScore& counts);

// sacreBLEU's chrF with its defaults (chrF2: character n-grams n = 1..6 of each line with its
// Unicode whitespace removed, code points, beta = 2, no word n-grams, mixed case). Per hypothesis
// the reference with the best sentence F-score counts; per order the corpus sums hypothesis,
// reference and matched n-grams (a hypothesis's n-grams count only where its reference has
// n-grams of that order); precision and recall are averaged over the orders where both sides
// have n-grams, and chrF = (1 + β²)·P·R / (β²·P + R) (0 when P + R = 0). A fraction too.
struct ChrfScore {
  double score = 0;
  std::array<size_t, 6> hypothesis_ngrams{};  // per order 1..6
  std::array<size_t, 6> reference_ngrams{};
  std::array<size_t, 6> matches{};
};
ChrfScore sacrebleu_corpus_chrf(const std::vector<std::string>& hypotheses,
                                const std::vector<std::vector<std::string>>& references);

// sacreBLEU's score strings: "BLEU = 34.12 67.1/41.0/27.3/18.2 (BP = 0.987 ratio = 0.987
// hyp_len = 1234 ref_len = 1250)" and "chrF2 = 56.78".
std::string format_sacrebleu(const BleuScore& bleu);
std::string format_chrf(const ChrfScore& chrf);

}  // namespace attnkit::metrics
