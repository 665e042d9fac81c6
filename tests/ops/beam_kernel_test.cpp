// The beam search step's kernels (src/ops/cpu/beam_kernel.h, private to the library; exported by
// libattnkit): log_softmax_row against a float64 log_softmax over row lengths around the 16-float
// reduction lanes; beam_candidates against at::topk over the [K·V] sum on random rows (no ties),
// on rows made of a few repeated values (ties: lower index first), with -inf entries (a forced
// token), with fewer candidates than blocks and more candidates than finite entries, and with NaN.
// scripts/test_isa.sh runs it under every instruction-set copy.
#include "../../src/ops/cpu/beam_kernel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace {

using attnkit::ops::cpu::beam_candidates;
using attnkit::ops::cpu::BeamCandidate;

TEST(BeamKernel, LogSoftmaxRowMatchesFloat64) {
  torch::manual_seed(5);
  for (int64_t n : {1, 2, 15, 16, 17, 63, 64, 65, 1000, 58101}) {
    for (double spread : {0.1, 3.0, 30.0}) {
      const auto x = (torch::randn({n}) * spread).contiguous();
      auto y = x.clone();
      attnkit::ops::cpu::log_softmax_row(y.data_ptr<float>(), n);
      const auto ref = torch::log_softmax(x.to(torch::kDouble), 0);
      const double err = (y.to(torch::kDouble) - ref).abs().max().item<double>();
      EXPECT_LT(err, 2e-5) << "n " << n << " spread " << spread;
    }
  }
}

TEST(BeamKernel, LogSoftmaxAtGivesTheRowsBitsWithoutWritingIt) {
  // A greedy step's score of its chosen token: log_softmax_row's value there, the row untouched.
  torch::manual_seed(6);
  for (int64_t n : {1, 17, 64, 1000, 58101}) {
    const auto x = (torch::randn({n}) * 4.0).contiguous();
    const auto before = x.clone();
    auto y = x.clone();
    attnkit::ops::cpu::log_softmax_row(y.data_ptr<float>(), n);
    for (int64_t index : {int64_t{0}, n / 2, n - 1}) {
      const float at = attnkit::ops::cpu::log_softmax_at(x.data_ptr<float>(), n, index);
      EXPECT_EQ(std::memcmp(&at, y.data_ptr<float>() + index, sizeof(float)), 0) << "n " << n << " at " << index;
    }
    EXPECT_TRUE(torch::equal(x, before));
  }
}

TEST(BeamKernel, ArgmaxRowIsATensArgmax) {
  // First of equal maxima, a NaN first of all, -inf rows, lengths around the 16-lane blocks.
  torch::manual_seed(8);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t n : {1, 2, 15, 16, 17, 31, 32, 33, 1000, 58101}) {
    for (int variant = 0; variant < 6; ++variant) {
      auto x = torch::randint(0, 7, {n}).to(torch::kFloat);  // many ties
      float* p = x.data_ptr<float>();
      if (variant == 1) x.fill_(-inf);
      if (variant == 2) p[n - 1] = 100.0f;
      if (variant == 3) p[n / 2] = nan;
      if (variant == 4 && n > 2) { p[1] = nan; p[n - 1] = nan; }
      if (variant == 5) { x.fill_(-inf); p[n - 1] = 0.0f; }
      EXPECT_EQ(attnkit::ops::cpu::argmax_row(p, n), x.argmax().item<int64_t>()) << "n " << n << " variant " << variant;
    }
  }
}

TEST(BeamKernel, LogSoftmaxRowKeepsMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {1.0f, -inf, 2.0f, -inf};
  attnkit::ops::cpu::log_softmax_row(x.data(), 4);
  EXPECT_EQ(x[1], -inf);
  EXPECT_EQ(x[3], -inf);
  EXPECT_NEAR(std::exp(x[0]) + std::exp(x[2]), 1.0, 1e-6);
}

// at::topk over scores [K, V] + beam [K], flattened: (value, index) in its order.
std::vector<std::pair<float, int64_t>> topk_reference(const torch::Tensor& scores,
                                                      const torch::Tensor& beam, int64_t count) {
  const auto total = (scores + beam.unsqueeze(1)).reshape({-1});
  auto [values, ids] = total.topk(count, 0, true, true);
  std::vector<std::pair<float, int64_t>> out;
  for (int64_t i = 0; i < count; ++i)
    out.emplace_back(values[i].item<float>(), ids[i].item<int64_t>());
  return out;
}

std::vector<std::pair<float, int64_t>> run(const torch::Tensor& scores, const torch::Tensor& beam,
                                           int64_t count) {
  const int64_t K = scores.size(0), V = scores.size(1);
  std::vector<std::pair<float, int64_t>> out;
  for (const BeamCandidate& c : beam_candidates(scores.data_ptr<float>(), V, K, V,
                                                beam.data_ptr<float>(), count))
    out.emplace_back(c.score, c.index);
  return out;
}

TEST(BeamKernel, CandidatesMatchTopkOnDistinctValues) {
  torch::manual_seed(7);
  for (int64_t K : {1, 2, 4, 5}) {
    for (int64_t V : {1, 3, 63, 64, 65, 200, 5000}) {
      for (int64_t count : {1, 2, 8, 10}) {
        if (count > K * V) continue;
        const auto scores = torch::log_softmax(torch::randn({K, V}) * 4, 1).contiguous();
        const auto beam = (torch::randn({K}) * 2).contiguous();
        EXPECT_EQ(run(scores, beam, count), topk_reference(scores, beam, count))
            << "K " << K << " V " << V << " count " << count;
      }
    }
  }
}

TEST(BeamKernel, EqualValuesComeInIndexOrder) {
  // Three distinct values over 4 × 300 entries: every candidate ties with many others.
  torch::manual_seed(11);
  const auto scores = (torch::randint(0, 3, {4, 300}).to(torch::kFloat) - 5).contiguous();
  const auto beam = torch::zeros({4});
  const auto got = run(scores, beam, 20);
  ASSERT_EQ(got.size(), 20u);
  const auto flat = scores.reshape({-1});
  std::vector<std::pair<float, int64_t>> expected;
  for (int64_t i = 0; i < flat.numel(); ++i) expected.emplace_back(flat[i].item<float>(), i);
  std::stable_sort(expected.begin(), expected.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  expected.resize(20);
  EXPECT_EQ(got, expected);
}

TEST(BeamKernel, ForcedTokenRowsFillWithMinusInfinity) {
  // One finite entry per row (a forced token): 2K candidates include -inf ones, lowest index first.
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t K = 3, V = 130;
  auto scores = torch::full({K, V}, -inf);
  for (int64_t k = 0; k < K; ++k) scores[k][7 + 50 * k] = 0.0f;
  const auto beam = torch::tensor({0.0f, -1e9f, -1e9f});
  const auto got = run(scores, beam, 2 * K);
  ASSERT_EQ(got.size(), static_cast<size_t>(2 * K));
  EXPECT_EQ(got[0], std::make_pair(0.0f, int64_t{7}));
  EXPECT_EQ(got[1], std::make_pair(-1e9f, int64_t{V + 57}));
  EXPECT_EQ(got[2], std::make_pair(-1e9f, int64_t{2 * V + 107}));
  for (int64_t r = 3; r < 2 * K; ++r) EXPECT_EQ(got[r].first, -inf);
  EXPECT_EQ(got[3].second, 0);
  EXPECT_EQ(got[4].second, 1);
  EXPECT_EQ(got[5].second, 2);
}

TEST(BeamKernel, NaNIsNeverSelected) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto scores = torch::full({2, 70}, nan);
  scores[0][3] = -1.0f;
  scores[1][69] = -2.0f;
  const auto beam = torch::zeros({2});
  const auto got = run(scores, beam, 4);
  ASSERT_EQ(got.size(), 2u);  // fewer than asked: the caller falls back to ATen
  EXPECT_EQ(got[0], std::make_pair(-1.0f, int64_t{3}));
  EXPECT_EQ(got[1], std::make_pair(-2.0f, int64_t{139}));
}

}  // namespace
