#pragma once
// Statistics for experiment results (no LibTorch): summaries over seeds with Student t intervals,
// paired bootstrap intervals over the items of an evaluation set (sacreBLEU's paired bootstrap),
// and the one verdict every table states ("A beats B", "B beats A" or "level").
//
// Over seeds: mean, sample standard deviation and the interval mean ± t(0.975, n − 1)·sd/√n, with
// t computed from Student's distribution (student_t_quantile), not a table.
//
// Over items: a metric whose corpus score is a function of per-item statistics summed over the
// items (BLEU: sacreBLEU's per-sentence n-gram matches, totals and lengths; accuracy: correct and
// total; perplexity: negative log-likelihood and tokens). A resample draws the item indices with
// replacement and scores the summed statistics of the drawn items. The resampling is sacreBLEU's
// `--paired-bs` (sacrebleu/significance.py, 2.x) exactly: the indices are numpy's
// `default_rng(seed).choice(items, size=(samples, items))` (PCG64 seeded by numpy's SeedSequence,
// Lemire's bounded integers on 32-bit draws, reimplemented here: deterministic on every machine),
// the same indices for both systems; a system's interval is the order statistics
// sorted[samples / 40] and sorted[samples − 1 − samples / 40] of its resampled scores, its mean
// their mean, and sacreBLEU's "± ci" half their distance; the p-value is sacreBLEU's:
// d_k = |score_A,k − score_B,k|, p = (1 + #{k : d_k − mean(d) > |score_A − score_B|}) / (samples + 1).
// The difference's interval (which sacreBLEU does not print) takes the same order statistics of
// score_A,k − score_B,k.
//
// Scores are fractions as in metrics.h (sacreBLEU prints 100 · BLEU).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnkit::metrics {

// ---------------------------------------------------------------------------------------------
// Student's t distribution with `degrees_of_freedom` > 0 (not necessarily an integer): P(T <= t),
// and its inverse for probability in (0, 1). Error for arguments outside those ranges. Computed
// from the regularised incomplete beta function (continued fraction); the quantile is found by
// bisection to the last bits of a double.
double student_t_cdf(double t, double degrees_of_freedom);
double student_t_quantile(double probability, double degrees_of_freedom);

struct Interval {
  double low = 0;
  double high = 0;
};

struct SeedSummary {
  size_t runs = 0;
  double mean = 0;
  double sd = 0;          // sample standard deviation (divisor runs − 1)
  double half_width = 0;  // t(0.975, runs − 1) · sd / √runs
  Interval interval;      // mean ∓ half_width: the 95% t interval of the mean
};
// Error when fewer than two values are given or a value is not finite.
SeedSummary summarize_seeds(const std::vector<double>& values);

// Welch's t interval (95%) for mean(a) − mean(b) over independent runs (each side >= 2 runs):
// difference ± t(0.975, ν)·√(sd_a²/n_a + sd_b²/n_b), ν by Welch–Satterthwaite. When both sides
// have sd 0 the interval is the difference itself (ν reported as 0).
struct SeedComparison {
  SeedSummary a, b;
  double difference = 0;
  double degrees_of_freedom = 0;
  Interval interval;
};
SeedComparison compare_seeds(const std::vector<double>& a, const std::vector<double>& b);

// ---------------------------------------------------------------------------------------------
// numpy's PCG64 bit generator seeded as numpy.random.default_rng(seed) seeds it (SeedSequence with
// the seed's 32-bit words as entropy, pool size 4): next64() equals PCG64(seed).random_raw(), and
// below(n) equals one draw of Generator.integers(0, n) (n >= 1; n = 1 draws nothing).
class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed);
  uint64_t next64();
  uint32_t next32();  // the low half of a 64-bit draw, then its high half
  uint64_t below(uint64_t n);

 private:
  unsigned __int128 state_ = 0;
  unsigned __int128 increment_ = 0;
  bool has_half_ = false;
  uint32_t half_ = 0;
};

// numpy.random.default_rng(seed).choice(items, size=(samples, items), replace=True), row by row
// (samples rows of items indices). Error when items or samples is 0 or items exceeds 2^32.
std::vector<uint32_t> bootstrap_indices(size_t items, size_t samples, uint64_t seed);

// ---------------------------------------------------------------------------------------------
enum class SummedMetric { kBleu, kAccuracy, kPerplexity };
const char* metric_name(SummedMetric metric);  // "bleu", "accuracy", "perplexity"
bool higher_is_better(SummedMetric metric);    // false for perplexity only

// Per-item sufficient statistics: `width` numbers per item, row by row.
//   kBleu: hypothesis length, reference length, matches 1..4, totals 1..4 (sacreBLEU's order);
//   kAccuracy: correct, total;  kPerplexity: negative log-likelihood (natural log), tokens.
struct ItemStatistics {
  SummedMetric metric = SummedMetric::kAccuracy;
  size_t width = 0;
  std::vector<double> values;
  size_t items() const { return width == 0 ? 0 : values.size() / width; }
};
ItemStatistics sacrebleu_item_statistics(const std::vector<std::string>& hypotheses,
                                         const std::vector<std::vector<std::string>>& references);
// correct[i] of total[i] (e.g. 1 of 1 for a classified example, k of n tokens of a sentence).
// Error when the counts differ, a total is not positive or correct is outside [0, total].
ItemStatistics accuracy_item_statistics(const std::vector<double>& correct, const std::vector<double>& total);
// Error when the counts differ, a token count is not positive or a likelihood not finite and >= 0.
ItemStatistics perplexity_item_statistics(const std::vector<double>& negative_log_likelihood,
                                          const std::vector<double>& tokens);
// The score of statistics summed over items (`width` numbers): sacreBLEU's BLEU, correct / total,
// exp(nll / tokens) (metrics::perplexity; perplexity of 0 tokens is an error).
double score_from_sums(SummedMetric metric, const double* sums);
double corpus_score(const ItemStatistics& statistics);  // all items

// ---------------------------------------------------------------------------------------------
struct BootstrapEstimate {
  double score = 0;       // on all items (for the difference: score_A − score_B)
  double mean = 0;        // mean over the resamples
  Interval interval;      // order statistics sorted[samples / 40], sorted[samples − 1 − samples / 40]
  double half_width = 0;  // (interval.high − interval.low) / 2: sacreBLEU's "± ci"
};

struct PairedBootstrapOptions {
  size_t samples = 1000;  // sacreBLEU's default for --paired-bs
  uint64_t seed = 12345;  // sacreBLEU's default (SACREBLEU_SEED)
};

struct PairedBootstrap {
  SummedMetric metric = SummedMetric::kAccuracy;
  size_t items = 0;
  size_t samples = 0;
  uint64_t seed = 0;
  BootstrapEstimate a, b;
  BootstrapEstimate difference;  // of score_A − score_B, resample by resample
  double p_value = 1;            // sacreBLEU's (see above)
};
// Error when the two statistics differ in metric, width or items, or there are no items.
PairedBootstrap paired_bootstrap(const ItemStatistics& a, const ItemStatistics& b,
                                 const PairedBootstrapOptions& options = {});

// The resampled scores of several systems on paired_bootstrap's resamples (the same item indices
// for every system, drawn as paired_bootstrap draws them): scores[s][k] is system s on resample k.
// paired_bootstrap(a, b, options) is built on it. Error as paired_bootstrap's for systems whose
// statistics differ, no systems or no items.
std::vector<std::vector<double>> resampled_scores(const std::vector<const ItemStatistics*>& systems,
                                                  const PairedBootstrapOptions& options = {});
// The estimate of `score` from resampled values (mean and the order-statistics interval above).
// Error when `resampled` is empty.
BootstrapEstimate bootstrap_estimate(double score, std::vector<double> resampled);

// ---------------------------------------------------------------------------------------------
// The verdict of every table: A beats B only when the whole interval of A − B lies on A's better
// side of 0 (above 0 when higher is better, below when lower is), B beats A in the mirror case,
// and "level" otherwise (an interval that touches or contains 0).
enum class Verdict { kABeatsB, kBBeatsA, kLevel };
struct VerdictText {
  Verdict verdict = Verdict::kLevel;
  std::string text;  // "NAME_A beats NAME_B", "NAME_B beats NAME_A" or "level"
};
VerdictText verdict(const Interval& difference, bool higher_is_better, std::string_view a_name,
                    std::string_view b_name);
VerdictText verdict(const PairedBootstrap& result, std::string_view a_name, std::string_view b_name);
VerdictText verdict(const SeedComparison& result, bool higher_is_better, std::string_view a_name,
                    std::string_view b_name);

// ---------------------------------------------------------------------------------------------
// JSON for the drivers' result files:
//   seed summary: {"runs", "mean", "sd", "half_width", "low", "high"};
//   seed comparison: {"a": summary, "b": summary, "difference", "degrees_of_freedom", "low", "high",
//                     "verdict", "verdict_text"} (with the names given);
//   paired bootstrap: {"metric", "items", "samples", "seed", "higher_is_better",
//                      "a": {"name", "score", "mean", "low", "high", "half_width"}, "b": {...},
//                      "difference": {"score", "mean", "low", "high", "half_width"}, "p_value",
//                      "verdict" ("a", "b" or "level"), "verdict_text"}.
nlohmann::json result_json(const SeedSummary& summary);
nlohmann::json result_json(const SeedComparison& result, bool higher_is_better, std::string_view a_name,
                       std::string_view b_name);
nlohmann::json result_json(const PairedBootstrap& result, std::string_view a_name, std::string_view b_name);

// Per-item statistics as a file: {"metric": "perplexity" | "accuracy" | "bleu", "width", "items",
// "values": [items × width numbers, row by row]}, and back. Reading checks what the constructors
// above check (perplexity: nll finite >= 0, tokens > 0; accuracy: 0 <= correct <= total; bleu:
// finite counts >= 0) and that width and values fit the metric; Error naming `source` otherwise.
nlohmann::json item_statistics_json(const ItemStatistics& statistics);
ItemStatistics item_statistics_from_json(const nlohmann::json& json, std::string_view source);

}  // namespace attnkit::metrics
