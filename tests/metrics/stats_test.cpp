// metrics/stats.h: Student t quantiles against closed forms and mpmath, summaries over seeds,
// numpy's PCG64 stream, the paired bootstrap and the verdict. sacreBLEU's own paired bootstrap is
// the peer of tests/python/test_stats_sacrebleu.py.
#include "attnkit/metrics/stats.h"

#include "attnkit/error.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace attnkit::metrics {
namespace {

const double kPi = std::acos(-1.0);

using attnkit::testing::error_of;

// Student's t has closed-form quantiles for 1, 2 and 4 degrees of freedom.
TEST(StudentT, QuantilesMatchClosedForms) {
  for (double p : {0.0005, 0.01, 0.025, 0.1, 0.3, 0.5, 0.6, 0.9, 0.975, 0.995, 0.99999}) {
    const double cauchy = std::tan(kPi * (p - 0.5));
    EXPECT_NEAR(student_t_quantile(p, 1), cauchy, 1e-9 * std::max(1.0, std::fabs(cauchy))) << p;
    const double two = (2 * p - 1) / std::sqrt(2 * p * (1 - p));
    EXPECT_NEAR(student_t_quantile(p, 2), two, 1e-9 * std::max(1.0, std::fabs(two))) << p;
    const double alpha = 4 * p * (1 - p);
    const double q = std::cos(std::acos(std::sqrt(alpha)) / 3) / std::sqrt(alpha);
    const double four = (p < 0.5 ? -2 : 2) * std::sqrt(q - 1);
    EXPECT_NEAR(student_t_quantile(p, 4), four, 1e-9 * std::max(1.0, std::fabs(four))) << p;
  }
}

// Reference values: mpmath (40 digits), bisection on 1 − betainc(ν/2, 1/2, 0, ν/(ν+t²))/2 = p:
//   mp.mp.dps = 40; cdf = lambda t, nu: 1 - mp.betainc(nu/2, 0.5, 0, nu/(nu+t*t), regularized=True)/2
// (the lower tail by symmetry), in the test venv (~/.cache/attnkit/venv-test, mpmath 1.2.1).
TEST(StudentT, QuantilesMatchMpmath) {
  struct Case {
    double nu, p, t;
  };
  const std::vector<Case> cases = {
      {3, 0.975, 3.1824463052837095927},    {3, 0.995, 5.8409093097333572607},
      {3, 0.9999, 22.203742273204182943},   {3, 0.001, -10.21453185240738655},
      {3, 0.6, 0.27667066233268991054},     {5, 0.975, 2.5705818356363155147},
      {5, 0.995, 4.0321429835552280784},    {5, 0.9999, 9.6775663008825913006},
      {5, 0.001, -5.8934295313560101276},   {5, 0.6, 0.26718086570414512673},
      {9, 0.975, 2.2621571627982055426},    {9, 0.995, 3.2498355415921262756},
      {9, 0.9999, 6.0101321290814410695},   {9, 0.001, -4.2968056627299184861},
      {9, 0.6, 0.26095533647391101148},     {29, 0.975, 2.0452296421327042982},
      {29, 0.995, 2.7563859036706054886},   {29, 0.9999, 4.253894118432280102},
      {29, 0.001, -3.3962402883568029909},  {29, 0.6, 0.25568363457125614267},
      {2.5, 0.975, 3.5746548420036832185},  {2.5, 0.995, 7.1637281389487855199},
      {2.5, 0.9999, 34.867969321114772774}, {2.5, 0.001, -13.822193110865964639},
      {2.5, 0.6, 0.28145951274854765657},   {0.7, 0.975, 36.611415031588688087},
      {0.7, 0.995, 364.93520298158536795},  {0.7, 0.9999, 97570.040178768773875},
      {0.7, 0.001, -3637.0146301057359558}, {0.7, 0.6, 0.35603136523468039516},
      {100, 0.975, 1.9839715185235522866},  {100, 0.995, 2.6258905214380179306},
      {100, 0.9999, 3.8615997909500598436}, {100, 0.001, -3.1737394937387829389},
      {100, 0.6, 0.25402218245822781657},   {10000, 0.975, 1.9602012398906262578},
      {10000, 0.995, 2.5763210466685288926}, {10000, 0.9999, 3.7203958691176402251},
      {10000, 0.001, -3.091047516030612113}, {10000, 0.6, 0.25335384344572685155},
  };
  for (const auto& c : cases) {
    const double t = student_t_quantile(c.p, c.nu);
    EXPECT_NEAR(t, c.t, 1e-9 * std::max(1.0, std::fabs(c.t))) << "nu " << c.nu << " p " << c.p;
    EXPECT_NEAR(student_t_cdf(t, c.nu), c.p, 1e-12) << "nu " << c.nu << " p " << c.p;
    EXPECT_NEAR(student_t_quantile(1 - c.p, c.nu), -t, 1e-9 * std::max(1.0, std::fabs(t)));  // symmetric
  }
  EXPECT_EQ(student_t_quantile(0.5, 7), 0.0);
  EXPECT_EQ(student_t_cdf(0, 7), 0.5);
  EXPECT_NE(error_of([] { student_t_quantile(1.0, 3); }).find("probability must be in (0, 1)"), std::string::npos);
  EXPECT_NE(error_of([] { student_t_quantile(0.5, 0); }).find("degrees of freedom must be positive"), std::string::npos);
  EXPECT_NE(error_of([] { student_t_cdf(NAN, 3); }), "");
}

TEST(SeedSummary, MeanSdAndTInterval) {
  const auto s = summarize_seeds({1, 2, 3, 4, 5});
  EXPECT_EQ(s.runs, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.sd, std::sqrt(2.5));
  const double t4 = 2.7764451051977987;  // t(0.975, 4), closed form above
  EXPECT_NEAR(s.half_width, t4 * std::sqrt(2.5) / std::sqrt(5.0), 1e-12);
  EXPECT_NEAR(s.interval.low, 3 - s.half_width, 1e-15);
  EXPECT_NEAR(s.interval.high, 3 + s.half_width, 1e-15);
  const auto two = summarize_seeds({0.5, 0.7});  // t(0.975, 1) = 12.706..., sd = 0.1414...
  EXPECT_NEAR(two.half_width, std::tan(kPi * 0.475) * std::sqrt(0.02) / std::sqrt(2.0), 1e-12);
  const auto constant = summarize_seeds({0.25, 0.25, 0.25});
  EXPECT_EQ(constant.sd, 0.0);
  EXPECT_EQ(constant.interval.low, constant.interval.high);
  EXPECT_NE(error_of([] { summarize_seeds({1.0}); }).find("at least 2 runs"), std::string::npos);
  EXPECT_NE(error_of([] { summarize_seeds({1.0, INFINITY}); }).find("not finite"), std::string::npos);
}

TEST(SeedComparison, WelchIntervalAndVerdict) {
  // var_a/n = 1/3, var_b/n = 4/3: ν = (5/3)² / ((1/9)/2 + (16/9)/2) = 50/17.
  const auto c = compare_seeds({1, 2, 3}, {4, 6, 8});
  EXPECT_DOUBLE_EQ(c.difference, -4);
  EXPECT_NEAR(c.degrees_of_freedom, 50.0 / 17.0, 1e-12);
  const double half = 3.2187586145328839044 * std::sqrt(5.0 / 3.0);  // mpmath's t(0.975, 50/17)
  EXPECT_NEAR(c.interval.low, -4 - half, 1e-9);
  EXPECT_NEAR(c.interval.high, -4 + half, 1e-9);
  EXPECT_EQ(verdict(c, true, "A", "B").verdict, Verdict::kLevel);  // -4 ± 4.16 contains 0
  const auto apart = compare_seeds({1, 1.1, 0.9}, {4, 4.2, 3.8});
  EXPECT_EQ(verdict(apart, true, "A", "B").text, "B beats A");
  EXPECT_EQ(verdict(apart, false, "A", "B").text, "A beats B");  // lower is better
  const auto flat = compare_seeds({2, 2}, {1, 1});
  EXPECT_EQ(flat.interval.low, 1.0);
  EXPECT_EQ(flat.interval.high, 1.0);
  EXPECT_EQ(verdict(flat, true, "x", "y").text, "x beats y");
  const auto json = result_json(c, true, "softmax", "linear");
  EXPECT_EQ(json["verdict"], "level");
  EXPECT_EQ(json["a"]["name"], "softmax");
  EXPECT_EQ(json["a"]["runs"], 3);
}

// numpy 1.24: [hex(x) for x in np.random.PCG64(12345).random_raw(3)], and
// np.random.default_rng(seed).choice(n, size=(rows, n)).
TEST(Pcg64, ReproducesNumpy) {
  Pcg64 g(12345);
  EXPECT_EQ(g.next64(), 0x3a32b18db2ffc19dULL);
  EXPECT_EQ(g.next64(), 0x51171315c9e4c4deULL);
  EXPECT_EQ(g.next64(), 0xcc2024823444efd9ULL);
  Pcg64 zero(0);
  EXPECT_EQ(zero.next64(), 0xa30febcfd9c2825fULL);
  EXPECT_EQ(zero.next64(), 0x4510bdf882d9d721ULL);
  const auto rows = bootstrap_indices(994, 2, 12345);
  ASSERT_EQ(rows.size(), 2u * 994u);
  EXPECT_EQ(std::vector<uint32_t>(rows.begin(), rows.begin() + 6), (std::vector<uint32_t>{695, 225, 783, 314, 202, 792}));
  EXPECT_EQ(std::vector<uint32_t>(rows.begin() + 994, rows.begin() + 1000),
            (std::vector<uint32_t>{523, 318, 780, 268, 870, 691}));
  // a seed above 2^32 (two entropy words)
  EXPECT_EQ(bootstrap_indices(7, 3, (uint64_t{1} << 40) + 7),
            (std::vector<uint32_t>{1, 5, 4, 1, 0, 1, 3, 4, 6, 5, 0, 3, 4, 0, 4, 0, 4, 0, 1, 6, 2}));
  EXPECT_EQ(bootstrap_indices(994, 2, 12345), rows);  // deterministic per seed
  EXPECT_NE(bootstrap_indices(994, 2, 12346), rows);
  EXPECT_EQ(bootstrap_indices(1, 3, 5), (std::vector<uint32_t>{0, 0, 0}));
  EXPECT_NE(error_of([] { bootstrap_indices(0, 3, 5); }), "");
}

ItemStatistics accuracy_of(const std::vector<int>& correct) {
  std::vector<double> c(correct.begin(), correct.end()), t(correct.size(), 1.0);
  return accuracy_item_statistics(c, t);
}

TEST(PairedBootstrap, ConstantMetricHasZeroWidth) {
  const auto all = accuracy_of(std::vector<int>(50, 1));
  const auto r = paired_bootstrap(all, all);
  EXPECT_EQ(r.a.score, 1.0);
  EXPECT_EQ(r.a.interval.low, 1.0);
  EXPECT_EQ(r.a.interval.high, 1.0);
  EXPECT_EQ(r.a.half_width, 0.0);
  EXPECT_EQ(r.difference.interval.low, 0.0);
  EXPECT_EQ(r.difference.interval.high, 0.0);
  EXPECT_EQ(verdict(r, "A", "B").verdict, Verdict::kLevel);
  // BLEU of hypotheses equal to their references: 1 in every resample
  const std::vector<std::string> lines = {"the cat sat on the mat .", "a dog ran far away today", "one two three four five"};
  const auto bleu = sacrebleu_item_statistics(lines, {{lines[0]}, {lines[1]}, {lines[2]}});
  const auto b = paired_bootstrap(bleu, bleu, {200, 7});
  EXPECT_DOUBLE_EQ(b.a.score, 1.0);
  EXPECT_DOUBLE_EQ(b.a.interval.low, 1.0);
  EXPECT_DOUBLE_EQ(b.a.interval.high, 1.0);
  EXPECT_EQ(b.difference.half_width, 0.0);
}

TEST(PairedBootstrap, UsesTheSameIndicesForBothSystemsAsNumpysChoice) {
  std::vector<int> a(40), b(40);
  for (int i = 0; i < 40; ++i) {
    a[i] = (i % 3) != 0;
    b[i] = (i % 5) == 0;
  }
  const size_t samples = 101;
  const auto r = paired_bootstrap(accuracy_of(a), accuracy_of(b), {samples, 99});
  const auto indices = bootstrap_indices(40, samples, 99);
  std::vector<double> sa, sb, d;
  for (size_t k = 0; k < samples; ++k) {
    double ca = 0, cb = 0;
    for (size_t j = 0; j < 40; ++j) {
      ca += a[indices[k * 40 + j]];
      cb += b[indices[k * 40 + j]];
    }
    sa.push_back(ca / 40);
    sb.push_back(cb / 40);
    d.push_back(ca / 40 - cb / 40);
  }
  double mean = 0;
  for (double v : sa) mean += v;
  EXPECT_NEAR(r.a.mean, mean / samples, 1e-12);
  std::sort(sa.begin(), sa.end());
  std::sort(d.begin(), d.end());
  EXPECT_EQ(r.a.interval.low, sa[101 / 40]);  // order statistics 2 and 98 of 101
  EXPECT_EQ(r.a.interval.high, sa[100 - 2]);
  EXPECT_EQ(r.difference.interval.low, d[2]);
  EXPECT_EQ(r.difference.interval.high, d[98]);
  EXPECT_DOUBLE_EQ(r.a.score, 26.0 / 40);
  EXPECT_DOUBLE_EQ(r.b.score, 8.0 / 40);
  EXPECT_DOUBLE_EQ(r.difference.score, 26.0 / 40 - 8.0 / 40);
}

TEST(PairedBootstrap, VerdictFollowsTheDifferenceInterval) {
  std::vector<int> good(200), bad(200), near(200);
  for (int i = 0; i < 200; ++i) {
    good[i] = i % 10 != 0;  // 90%
    bad[i] = i % 2;         // 50%
    near[i] = i % 10 != 5 && i != 1;  // 89.5%, wrong on other items than good
  }
  const auto ab = paired_bootstrap(accuracy_of(good), accuracy_of(bad));
  EXPECT_GT(ab.difference.interval.low, 0);
  EXPECT_EQ(verdict(ab, "good", "bad").text, "good beats bad");
  EXPECT_EQ(verdict(ab, "good", "bad").verdict, Verdict::kABeatsB);
  const auto ba = paired_bootstrap(accuracy_of(bad), accuracy_of(good));
  EXPECT_EQ(verdict(ba, "bad", "good").verdict, Verdict::kBBeatsA);
  EXPECT_EQ(verdict(ba, "bad", "good").text, "good beats bad");
  EXPECT_LT(ab.p_value, 0.01);
  const auto close = paired_bootstrap(accuracy_of(good), accuracy_of(near));
  EXPECT_LT(close.difference.interval.low, 0);  // 41 of the 200 items differ, in both directions
  EXPECT_GT(close.difference.interval.high, 0);
  EXPECT_EQ(verdict(close, "good", "near").text, "level");
  // the same seed gives the same result, another seed another interval
  const auto again = paired_bootstrap(accuracy_of(good), accuracy_of(near));
  EXPECT_EQ(again.difference.interval.low, close.difference.interval.low);
  EXPECT_EQ(again.a.mean, close.a.mean);
  const auto other = paired_bootstrap(accuracy_of(good), accuracy_of(near), {1000, 1});
  EXPECT_NE(other.a.mean, close.a.mean);
}

TEST(Verdict, FlipsWhenTheIntervalCrossesZero) {
  EXPECT_EQ(verdict(Interval{0.01, 0.3}, true, "A", "B").verdict, Verdict::kABeatsB);
  EXPECT_EQ(verdict(Interval{-0.01, 0.3}, true, "A", "B").verdict, Verdict::kLevel);
  EXPECT_EQ(verdict(Interval{0.0, 0.3}, true, "A", "B").verdict, Verdict::kLevel);  // touches 0
  EXPECT_EQ(verdict(Interval{-0.3, -0.01}, true, "A", "B").verdict, Verdict::kBBeatsA);
  EXPECT_EQ(verdict(Interval{-0.3, -0.01}, false, "A", "B").text, "A beats B");  // lower is better
  EXPECT_EQ(verdict(Interval{0.01, 0.3}, false, "A", "B").text, "B beats A");
  EXPECT_EQ(verdict(Interval{-0.3, 0.01}, false, "A", "B").text, "level");
}

TEST(PairedBootstrap, PerplexityLowerIsBetter) {
  std::vector<double> low_nll, high_nll, tokens;
  for (int i = 0; i < 60; ++i) {
    tokens.push_back(5 + i % 7);
    low_nll.push_back(tokens.back() * (1.0 + 0.1 * (i % 3)));
    high_nll.push_back(tokens.back() * (2.0 + 0.1 * (i % 4)));
  }
  const auto a = perplexity_item_statistics(low_nll, tokens);
  const auto b = perplexity_item_statistics(high_nll, tokens);
  const auto r = paired_bootstrap(a, b);
  double nll = 0, count = 0;
  for (int i = 0; i < 60; ++i) {
    nll += low_nll[i];
    count += tokens[i];
  }
  EXPECT_NEAR(r.a.score, std::exp(nll / count), 1e-12);
  EXPECT_LT(r.difference.interval.high, 0);
  EXPECT_EQ(verdict(r, "A", "B").text, "A beats B");
  const auto json = result_json(r, "A", "B");
  EXPECT_EQ(json["metric"], "perplexity");
  EXPECT_EQ(json["higher_is_better"], false);
  EXPECT_EQ(json["verdict"], "a");
  EXPECT_EQ(json["samples"], 1000);
  EXPECT_EQ(json["seed"], 12345);
  EXPECT_DOUBLE_EQ(json["a"]["low"].get<double>(), r.a.interval.low);
  EXPECT_DOUBLE_EQ(json["difference"]["high"].get<double>(), r.difference.interval.high);
}

TEST(PairedBootstrap, RejectsMismatchedOrBadStatistics) {
  EXPECT_NE(error_of([] { paired_bootstrap(accuracy_of({1, 0}), accuracy_of({1})); }).find("differ"), std::string::npos);
  EXPECT_NE(error_of([] { paired_bootstrap(accuracy_of({}), accuracy_of({})); }).find("no items"), std::string::npos);
  EXPECT_NE(error_of([] { accuracy_item_statistics({2}, {1}); }).find("item 0 has 2 correct of 1"), std::string::npos);
  EXPECT_NE(error_of([] { perplexity_item_statistics({1}, {0}); }).find("tokens > 0"), std::string::npos);
  EXPECT_NE(error_of([] { perplexity_item_statistics({1, 2}, {3}); }).find("2 values but 1 counts"), std::string::npos);
  const auto ppl = perplexity_item_statistics({1, 2}, {3, 4});
  EXPECT_NE(error_of([&] { paired_bootstrap(accuracy_of({1, 0}), ppl); }).find("differ"), std::string::npos);
}

TEST(ItemStatisticsJson, RoundTripsEveryMetricExactly) {
  const auto ppl = perplexity_item_statistics({0.1, 2.0 / 3.0, 1e-300}, {3, 4, 7});
  const auto acc = accuracy_item_statistics({1, 0, 2}, {1, 1, 5});
  const auto bleu = sacrebleu_item_statistics({"a b c", "d e"}, {{"a b c"}, {"d f"}});
  for (const ItemStatistics* s : {&ppl, &acc, &bleu}) {
    // through text, as the files hold them: every double comes back bit for bit
    const auto text = item_statistics_json(*s).dump();
    const auto back = item_statistics_from_json(nlohmann::json::parse(text), "f.json");
    EXPECT_EQ(back.metric, s->metric);
    EXPECT_EQ(back.width, s->width);
    EXPECT_EQ(back.values, s->values);
    EXPECT_EQ(nlohmann::json::parse(text)["items"], s->items());
  }
}

TEST(ItemStatisticsJson, RejectsMalformedFilesNamingThem) {
  auto from = [](const char* text) {
    return error_of([&] { item_statistics_from_json(nlohmann::json::parse(text), "base.json"); });
  };
  EXPECT_NE(from("[1, 2]").find("base.json: not per-item statistics (not a JSON object)"), std::string::npos);
  EXPECT_NE(from(R"({"width": 2, "values": [1, 2]})").find("no \"metric\""), std::string::npos);
  EXPECT_NE(from(R"({"metric": "loss", "width": 2, "values": [1, 2]})").find("none of bleu"), std::string::npos);
  EXPECT_NE(from(R"({"metric": "perplexity", "width": 3, "values": [1, 2, 3]})").find("width 3 for perplexity (need 2)"),
            std::string::npos);
  EXPECT_NE(from(R"({"metric": "perplexity", "width": -2, "values": [1, 2]})").find("not a count"), std::string::npos);
  EXPECT_NE(from(R"({"metric": "perplexity", "width": 2, "values": []})").find("not a positive multiple"),
            std::string::npos);
  EXPECT_NE(from(R"({"metric": "perplexity", "width": 2, "values": [1, "2"]})").find("not a number"), std::string::npos);
  EXPECT_NE(from(R"({"metric": "perplexity", "width": 2, "items": 2, "values": [1, 2]})").find("not the 1 items"),
            std::string::npos);
  EXPECT_NE(from(R"({"metric": "perplexity", "width": 2, "values": [-1, 2]})").find("item 0"), std::string::npos);
  EXPECT_NE(from(R"({"metric": "accuracy", "width": 2, "values": [3, 2]})").find("3 correct of 2"), std::string::npos);
  EXPECT_NE(from(R"({"metric": "bleu", "width": 10, "values": [1, 1, 1, 1, 1, 1, 1, 1, 1, -1]})").find("whole number"),
            std::string::npos);
  EXPECT_NE(from(R"({"metric": "bleu", "width": 10, "values": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0.5]})").find("whole number"),
            std::string::npos);
}

}  // namespace
}  // namespace attnkit::metrics
