#include "attnkit/metrics/stats.h"

#include "attnkit/error.h"
#include "attnkit/metrics/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnkit::metrics {
namespace {

// ---- Student's t ----------------------------------------------------------------------------

// The continued fraction of the regularised incomplete beta function I_x(a, b) (modified Lentz),
// which converges fast for x < (a + 1) / (a + b + 2); y = 1 − x is passed exactly.
double beta_continued_fraction(double x, double a, double b) {
  constexpr double tiny = 1e-300;
  constexpr double epsilon = 1e-16;
  double c = 1;
  double d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double fraction = d;
  for (int m = 1; m <= 10000; ++m) {
    const double mm = m;
    // even step: m (b − m) x / ((a + 2m − 1)(a + 2m))
    double numerator = mm * (b - mm) * x / ((a + 2 * mm - 1) * (a + 2 * mm));
    d = 1 + numerator * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + numerator / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    fraction *= d * c;
    // odd step: −(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1))
    numerator = -(a + mm) * (a + b + mm) * x / ((a + 2 * mm) * (a + 2 * mm + 1));
    d = 1 + numerator * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + numerator / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double step = d * c;
    fraction *= step;
    if (std::fabs(step - 1) < epsilon) break;
  }
  return fraction;
}

// I_x(a, b) with y = 1 − x given separately (so that tails keep their relative precision).
double incomplete_beta(double x, double y, double a, double b) {
  if (x <= 0) return 0;
  if (y <= 0) return 1;
  const double log_front = a * std::log(x) + b * std::log(y) + std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b);
  if (x < (a + 1) / (a + b + 2)) return std::exp(log_front) * beta_continued_fraction(x, a, b) / a;
  return 1 - std::exp(log_front) * beta_continued_fraction(y, b, a) / b;
}

// P(T > t) for t >= 0: I_{ν/(ν+t²)}(ν/2, 1/2) / 2.
double t_upper_tail(double t, double nu) {
  const double t2 = t * t;
  return 0.5 * incomplete_beta(nu / (nu + t2), t2 / (nu + t2), nu / 2, 0.5);
}

void check_degrees_of_freedom(double nu) {
  if (!(nu > 0) || !std::isfinite(nu))
    throw Error(fmt::format("Student's t: degrees of freedom must be positive and finite, got {}", nu));
}

// ---- numpy's SeedSequence and PCG64 ---------------------------------------------------------

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;

// SeedSequence(seed).generate_state(4, uint64): the pool of four 32-bit words mixed from the
// seed's 32-bit words, then drawn out as eight 32-bit words (little-endian pairs).
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy{static_cast<uint32_t>(seed)};
  if (seed >> 32) entropy.push_back(static_cast<uint32_t>(seed >> 32));
  uint32_t hash_const = kInitA;
  auto hashmix = [&](uint32_t value) {
    value ^= hash_const;
    hash_const *= kMultA;
    value *= hash_const;
    value ^= value >> 16;
    return value;
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t result = kMixMultL * x - kMixMultR * y;
    result ^= result >> 16;
    return result;
  };
  std::array<uint32_t, 4> pool{};
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
  for (size_t source = 0; source < pool.size(); ++source)
    for (size_t target = 0; target < pool.size(); ++target)
      if (source != target) pool[target] = mix(pool[target], hashmix(pool[source]));
  // (a seed has at most two words: none is left over for the pool of four)
  uint32_t out_const = kInitB;
  std::array<uint32_t, 8> words{};
  for (size_t i = 0; i < words.size(); ++i) {
    uint32_t value = pool[i % pool.size()];
    value ^= out_const;
    out_const *= kMultB;
    value *= out_const;
    value ^= value >> 16;
    words[i] = value;
  }
  std::array<uint64_t, 4> state{};
  for (size_t i = 0; i < state.size(); ++i) state[i] = words[2 * i] | (static_cast<uint64_t>(words[2 * i + 1]) << 32);
  return state;
}

using u128 = unsigned __int128;
constexpr u128 kPcgMultiplier = (static_cast<u128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;

// ---- bootstrap helpers ----------------------------------------------------------------------

void check_item_counts(const char* what, size_t a, size_t b) {
  if (a != b) throw Error(fmt::format("{}: {} values but {} counts", what, a, b));
}

const char* verdict_code(Verdict v) {
  switch (v) {
    case Verdict::kABeatsB: return "a";
    case Verdict::kBBeatsA: return "b";
    case Verdict::kLevel: break;
  }
  return "level";
}

nlohmann::json estimate_json(const BootstrapEstimate& e) {
  return {{"score", e.score}, {"mean", e.mean}, {"low", e.interval.low}, {"high", e.interval.high},
          {"half_width", e.half_width}};
}

}  // namespace

// ---- Student's t ----------------------------------------------------------------------------

double student_t_cdf(double t, double degrees_of_freedom) {
  check_degrees_of_freedom(degrees_of_freedom);
  if (std::isnan(t)) throw Error("Student's t: t is not a number");
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  const double tail = t_upper_tail(std::fabs(t), degrees_of_freedom);
  return t >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double probability, double degrees_of_freedom) {
  check_degrees_of_freedom(degrees_of_freedom);
  if (!(probability > 0 && probability < 1))
    throw Error(fmt::format("Student's t quantile: probability must be in (0, 1), got {}", probability));
  if (probability == 0.5) return 0;
  const double tail = std::min(probability, 1 - probability);
  double low = 0, high = 1;
  while (t_upper_tail(high, degrees_of_freedom) > tail && high < 1e300) {
    low = high;
    high *= 2;
  }
  for (int i = 0; i < 2200; ++i) {  // bisection until the bracket is two adjacent doubles
    const double middle = low + (high - low) / 2;
    if (middle <= low || middle >= high) break;
    (t_upper_tail(middle, degrees_of_freedom) > tail ? low : high) = middle;
  }
  const double t = low + (high - low) / 2;
  return probability > 0.5 ? t : -t;
}

SeedSummary summarize_seeds(const std::vector<double>& values) {
  if (values.size() < 2)
    throw Error(fmt::format("a summary over seeds needs at least 2 runs, got {}", values.size()));
  SeedSummary s;
  s.runs = values.size();
  double sum = 0;
  for (double v : values) {
    if (!std::isfinite(v)) throw Error(fmt::format("a summary over seeds got a value that is not finite: {}", v));
    sum += v;
  }
  const double n = static_cast<double>(s.runs);
  s.mean = sum / n;
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.sd = std::sqrt(squares / (n - 1));
  s.half_width = student_t_quantile(0.975, n - 1) * s.sd / std::sqrt(n);
  s.interval = {s.mean - s.half_width, s.mean + s.half_width};
  return s;
}

SeedComparison compare_seeds(const std::vector<double>& a, const std::vector<double>& b) {
  SeedComparison c;
  c.a = summarize_seeds(a);
  c.b = summarize_seeds(b);
  c.difference = c.a.mean - c.b.mean;
  const double va = c.a.sd * c.a.sd / static_cast<double>(c.a.runs);
  const double vb = c.b.sd * c.b.sd / static_cast<double>(c.b.runs);
  const double variance = va + vb;
  if (variance == 0) {
    c.interval = {c.difference, c.difference};
    return c;
  }
  c.degrees_of_freedom = variance * variance / (va * va / static_cast<double>(c.a.runs - 1) +
                                                vb * vb / static_cast<double>(c.b.runs - 1));
  const double half = student_t_quantile(0.975, c.degrees_of_freedom) * std::sqrt(variance);
  c.interval = {c.difference - half, c.difference + half};
  return c;
}

// ---- PCG64 ----------------------------------------------------------------------------------

Pcg64::Pcg64(uint64_t seed) {
  const auto words = seed_sequence_state(seed);
  const u128 initial_state = (static_cast<u128>(words[0]) << 64) | words[1];
  const u128 sequence = (static_cast<u128>(words[2]) << 64) | words[3];
  increment_ = (sequence << 1) | 1;
  state_ = 0;
  state_ = state_ * kPcgMultiplier + increment_;
  state_ += initial_state;
  state_ = state_ * kPcgMultiplier + increment_;
}

uint64_t Pcg64::next64() {  // XSL-RR output of the advanced state
  state_ = state_ * kPcgMultiplier + increment_;
  const uint64_t folded = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rotation = static_cast<unsigned>(state_ >> 122);
  return (folded >> rotation) | (folded << ((64 - rotation) & 63));
}

uint32_t Pcg64::next32() {
  if (has_half_) {
    has_half_ = false;
    return half_;
  }
  const uint64_t draw = next64();
  has_half_ = true;
  half_ = static_cast<uint32_t>(draw >> 32);
  return static_cast<uint32_t>(draw);
}

uint64_t Pcg64::below(uint64_t n) {  // numpy's random_bounded_uint64_fill without mask, n <= 2^32
  if (n == 0 || n > (uint64_t{1} << 32))
    throw Error(fmt::format("Pcg64::below: n must be in [1, 2^32], got {}", n));
  if (n == 1) return 0;
  if (n == (uint64_t{1} << 32)) return next32();
  // Lemire's multiply-and-reject on 32-bit draws
  uint64_t product = static_cast<uint64_t>(next32()) * n;
  auto leftover = static_cast<uint32_t>(product);
  if (leftover < n) {
    const auto threshold = static_cast<uint32_t>((uint64_t{1} << 32) % n);
    while (leftover < threshold) {
      product = static_cast<uint64_t>(next32()) * n;
      leftover = static_cast<uint32_t>(product);
    }
  }
  return product >> 32;
}

std::vector<uint32_t> bootstrap_indices(size_t items, size_t samples, uint64_t seed) {
  if (items == 0 || samples == 0 || items > (uint64_t{1} << 32))
    throw Error(fmt::format("bootstrap: need 1 to 2^32 items and at least one resample (got {} items, {} resamples)",
                            items, samples));
  Pcg64 generator(seed);
  std::vector<uint32_t> indices(items * samples);
  for (auto& index : indices) index = static_cast<uint32_t>(generator.below(items));
  return indices;
}

// ---- summed metrics -------------------------------------------------------------------------

const char* metric_name(SummedMetric metric) {
  switch (metric) {
    case SummedMetric::kBleu: return "bleu";
    case SummedMetric::kAccuracy: return "accuracy";
    case SummedMetric::kPerplexity: break;
  }
  return "perplexity";
}

bool higher_is_better(SummedMetric metric) { return metric != SummedMetric::kPerplexity; }

ItemStatistics sacrebleu_item_statistics(const std::vector<std::string>& hypotheses,
                                         const std::vector<std::vector<std::string>>& references) {
  ItemStatistics s;
  s.metric = SummedMetric::kBleu;
  s.width = 10;
  for (const auto& segment : sacrebleu_segment_statistics(hypotheses, references)) {
    s.values.push_back(static_cast<double>(segment.hypothesis_length));
    s.values.push_back(static_cast<double>(segment.reference_length));
    for (size_t m : segment.matches) s.values.push_back(static_cast<double>(m));
    for (size_t t : segment.totals) s.values.push_back(static_cast<double>(t));
  }
  return s;
}

ItemStatistics accuracy_item_statistics(const std::vector<double>& correct, const std::vector<double>& total) {
  check_item_counts("accuracy statistics", correct.size(), total.size());
  ItemStatistics s;
  s.metric = SummedMetric::kAccuracy;
  s.width = 2;
  for (size_t i = 0; i < correct.size(); ++i) {
    if (!(total[i] > 0) || !std::isfinite(total[i]) || !(correct[i] >= 0) || correct[i] > total[i])
      throw Error(fmt::format("accuracy statistics: item {} has {} correct of {} (need 0 <= correct <= total, total > 0)",
                              i, correct[i], total[i]));
    s.values.push_back(correct[i]);
    s.values.push_back(total[i]);
  }
  return s;
}

ItemStatistics perplexity_item_statistics(const std::vector<double>& negative_log_likelihood,
                                          const std::vector<double>& tokens) {
  check_item_counts("perplexity statistics", negative_log_likelihood.size(), tokens.size());
  ItemStatistics s;
  s.metric = SummedMetric::kPerplexity;
  s.width = 2;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const double nll = negative_log_likelihood[i];
    if (!(tokens[i] > 0) || !std::isfinite(tokens[i]) || !std::isfinite(nll) || nll < 0)
      throw Error(fmt::format("perplexity statistics: item {} has negative log-likelihood {} over {} tokens "
                              "(need a finite value >= 0 and tokens > 0)",
                              i, nll, tokens[i]));
    s.values.push_back(nll);
    s.values.push_back(tokens[i]);
  }
  return s;
}

double score_from_sums(SummedMetric metric, const double* sums) {
  switch (metric) {
    case SummedMetric::kBleu: {
      BleuScore counts;
      auto count = [](double v) { return static_cast<size_t>(std::llround(v)); };
      counts.hypothesis_length = count(sums[0]);
      counts.reference_length = count(sums[1]);
      for (size_t n = 0; n < 4; ++n) {
        counts.matches[n] = count(sums[2 + n]);
        counts.totals[n] = count(sums[6 + n]);
      }
      return sacrebleu_bleu_from_statistics(counts).score;
    }
    case SummedMetric::kAccuracy: return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    case SummedMetric::kPerplexity: break;
  }
  return perplexity(sums[0], sums[1]);
}

double corpus_score(const ItemStatistics& statistics) {
  std::vector<double> sums(statistics.width, 0.0);
  for (size_t i = 0; i < statistics.values.size(); ++i) sums[i % statistics.width] += statistics.values[i];
  return score_from_sums(statistics.metric, sums.data());
}

std::vector<std::vector<double>> resampled_scores(const std::vector<const ItemStatistics*>& systems,
                                                  const PairedBootstrapOptions& options) {
  if (systems.empty()) throw Error("paired bootstrap: no systems");
  const ItemStatistics& first = *systems.front();
  for (const ItemStatistics* s : systems)
    if (s->metric != first.metric || s->width != first.width || s->items() != first.items())
      throw Error(fmt::format("paired bootstrap: the systems' statistics differ ({} with {} items vs {} with {} items)",
                              metric_name(first.metric), first.items(), metric_name(s->metric), s->items()));
  const size_t items = first.items();
  if (items == 0 || first.width == 0) throw Error("paired bootstrap: no items");
  if (options.samples == 0) throw Error("paired bootstrap: at least one resample is needed");
  if (items > (uint64_t{1} << 32)) throw Error(fmt::format("paired bootstrap: {} items are more than 2^32", items));
  const size_t width = first.width;
  std::vector<std::vector<double>> scores(systems.size(), std::vector<double>(options.samples));
  std::vector<double> sums(systems.size() * width);
  Pcg64 generator(options.seed);
  for (size_t k = 0; k < options.samples; ++k) {
    std::fill(sums.begin(), sums.end(), 0.0);
    for (size_t j = 0; j < items; ++j) {
      const size_t i = generator.below(items);
      for (size_t s = 0; s < systems.size(); ++s)
        for (size_t w = 0; w < width; ++w) sums[s * width + w] += systems[s]->values[i * width + w];
    }
    for (size_t s = 0; s < systems.size(); ++s) scores[s][k] = score_from_sums(first.metric, &sums[s * width]);
  }
  return scores;
}

BootstrapEstimate bootstrap_estimate(double score, std::vector<double> resampled) {
  if (resampled.empty()) throw Error("bootstrap estimate: no resampled values");
  BootstrapEstimate e;
  e.score = score;
  double sum = 0;
  for (double v : resampled) sum += v;
  e.mean = sum / static_cast<double>(resampled.size());
  std::sort(resampled.begin(), resampled.end());
  const size_t lower = resampled.size() / 40;
  e.interval = {resampled[lower], resampled[resampled.size() - 1 - lower]};
  e.half_width = 0.5 * (e.interval.high - e.interval.low);
  return e;
}

PairedBootstrap paired_bootstrap(const ItemStatistics& a, const ItemStatistics& b,
                                 const PairedBootstrapOptions& options) {
  const auto scores = resampled_scores({&a, &b}, options);
  PairedBootstrap result;
  result.metric = a.metric;
  result.items = a.items();
  result.samples = options.samples;
  result.seed = options.seed;
  std::vector<double> differences(options.samples);
  for (size_t k = 0; k < options.samples; ++k) differences[k] = scores[0][k] - scores[1][k];
  result.a = bootstrap_estimate(corpus_score(a), scores[0]);
  result.b = bootstrap_estimate(corpus_score(b), scores[1]);
  result.difference = bootstrap_estimate(result.a.score - result.b.score, differences);
  // sacreBLEU's p-value: centred absolute differences above the observed absolute difference
  double mean_absolute = 0;
  for (double d : differences) mean_absolute += std::fabs(d);
  mean_absolute /= static_cast<double>(options.samples);
  const double observed = std::fabs(result.difference.score);
  size_t above = 0;
  for (double d : differences) above += std::fabs(d) - mean_absolute > observed ? 1 : 0;
  result.p_value = static_cast<double>(above + 1) / static_cast<double>(options.samples + 1);
  return result;
}

// ---- verdicts and JSON ----------------------------------------------------------------------

VerdictText verdict(const Interval& difference, bool higher_is_better, std::string_view a_name,
                    std::string_view b_name) {
  const bool a_side = higher_is_better ? difference.low > 0 : difference.high < 0;
  const bool b_side = higher_is_better ? difference.high < 0 : difference.low > 0;
  if (a_side) return {Verdict::kABeatsB, fmt::format("{} beats {}", a_name, b_name)};
  if (b_side) return {Verdict::kBBeatsA, fmt::format("{} beats {}", b_name, a_name)};
  return {Verdict::kLevel, "level"};
}

VerdictText verdict(const PairedBootstrap& result, std::string_view a_name, std::string_view b_name) {
  return verdict(result.difference.interval, higher_is_better(result.metric), a_name, b_name);
}

VerdictText verdict(const SeedComparison& result, bool higher_is_better, std::string_view a_name,
                    std::string_view b_name) {
  return verdict(result.interval, higher_is_better, a_name, b_name);
}

nlohmann::json result_json(const SeedSummary& summary) {
  return {{"runs", summary.runs},           {"mean", summary.mean},         {"sd", summary.sd},
          {"half_width", summary.half_width}, {"low", summary.interval.low}, {"high", summary.interval.high}};
}

nlohmann::json result_json(const SeedComparison& result, bool higher_is_better, std::string_view a_name,
                           std::string_view b_name) {
  const auto v = verdict(result, higher_is_better, a_name, b_name);
  nlohmann::json a = result_json(result.a), b = result_json(result.b);
  a["name"] = a_name;
  b["name"] = b_name;
  return {{"a", a},
          {"b", b},
          {"higher_is_better", higher_is_better},
          {"difference", result.difference},
          {"degrees_of_freedom", result.degrees_of_freedom},
          {"low", result.interval.low},
          {"high", result.interval.high},
          {"verdict", verdict_code(v.verdict)},
          {"verdict_text", v.text}};
}

nlohmann::json result_json(const PairedBootstrap& result, std::string_view a_name, std::string_view b_name) {
  const auto v = verdict(result, a_name, b_name);
  nlohmann::json a = estimate_json(result.a), b = estimate_json(result.b);
  a["name"] = a_name;
  b["name"] = b_name;
  return {{"metric", metric_name(result.metric)},
          {"items", result.items},
          {"samples", result.samples},
          {"seed", result.seed},
          {"higher_is_better", higher_is_better(result.metric)},
          {"a", a},
          {"b", b},
          {"difference", estimate_json(result.difference)},
          {"p_value", result.p_value},
          {"verdict", verdict_code(v.verdict)},
          {"verdict_text", v.text}};
}

nlohmann::json item_statistics_json(const ItemStatistics& statistics) {
  return {{"metric", metric_name(statistics.metric)},
          {"width", statistics.width},
          {"items", statistics.items()},
          {"values", statistics.values}};
}

ItemStatistics item_statistics_from_json(const nlohmann::json& json, std::string_view source) {
  auto fail = [&](const std::string& why) {
    return Error(fmt::format("{}: not per-item statistics ({})", source, why));
  };
  if (!json.is_object()) throw fail("not a JSON object");
  for (const char* key : {"metric", "width", "values"})
    if (!json.contains(key)) throw fail(fmt::format("no \"{}\"", key));
  if (!json["metric"].is_string()) throw fail("\"metric\" is not a string");
  if (!json["width"].is_number_unsigned()) throw fail("\"width\" is not a count");
  if (!json["values"].is_array()) throw fail("\"values\" is not an array");
  const std::string metric = json["metric"].get<std::string>();
  const size_t width = json["width"].get<size_t>();
  const size_t expected_width = metric == "bleu" ? 10 : 2;
  if (metric != "bleu" && metric != "accuracy" && metric != "perplexity")
    throw fail(fmt::format("metric '{}' is none of bleu, accuracy, perplexity", metric));
  if (width != expected_width) throw fail(fmt::format("width {} for {} (need {})", width, metric, expected_width));
  std::vector<double> values;
  values.reserve(json["values"].size());
  for (const auto& value : json["values"]) {
    if (!value.is_number()) throw fail("a value is not a number");
    values.push_back(value.get<double>());
  }
  if (values.empty() || values.size() % width != 0)
    throw fail(fmt::format("{} values are not a positive multiple of width {}", values.size(), width));
  if (json.contains("items") && (!json["items"].is_number_unsigned() ||
                                 json["items"].get<size_t>() != values.size() / width))
    throw fail(fmt::format("\"items\" is not the {} items the values hold", values.size() / width));
  if (metric == "bleu") {
    for (double v : values)
      if (!(v >= 0) || v > 9007199254740992.0 || v != std::floor(v))
        throw fail("a BLEU count is not a whole number in [0, 2^53]");
    ItemStatistics s;
    s.metric = SummedMetric::kBleu;
    s.width = width;
    s.values = std::move(values);
    return s;
  }
  std::vector<double> first, second;
  for (size_t i = 0; i < values.size(); i += 2) {
    first.push_back(values[i]);
    second.push_back(values[i + 1]);
  }
  try {
    return metric == "accuracy" ? accuracy_item_statistics(first, second) : perplexity_item_statistics(first, second);
  } catch (const Error& e) {
    throw fail(e.what());
  }
}

}  // namespace attnkit::metrics
