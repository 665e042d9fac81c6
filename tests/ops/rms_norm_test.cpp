// RMSNorm (ops/rms_norm.h) against a float64 loop reference, Llama's and Gemma's weighting;
// gradients by finite differences; bad inputs. transformers' LlamaRMSNorm / Gemma3RMSNorm are the
// peers of tests/python/test_rotary_hf.py.
#include "attnkit/error.h"
#include "attnkit/ops/rms_norm.h"
#include "support/gradcheck.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

namespace attnkit {
namespace rms_norm_test {

// y_i = x_i / sqrt(mean_j x_j² + eps) · (w_i or 1 + w_i), rows of the last axis, in double.
at::Tensor reference_rms_norm(const at::Tensor& x_in, const at::Tensor& w_in, double eps, bool gemma) {
  auto x = x_in.to(torch::kDouble).contiguous().view({-1, x_in.size(-1)});
  auto w = w_in.to(torch::kDouble).contiguous();
  auto out = torch::empty_like(x);
  const int64_t rows = x.size(0), d = x.size(1);
  auto X = x.accessor<double, 2>();
  auto W = w.accessor<double, 1>();
  auto O = out.accessor<double, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < d; ++c) sum += X[r][c] * X[r][c];
    const double inv = 1.0 / std::sqrt(sum / d + eps);
    for (int64_t c = 0; c < d; ++c) O[r][c] = X[r][c] * inv * (gemma ? 1.0 + W[c] : W[c]);
  }
  return out.view(x_in.sizes());
}

TEST(RmsNorm, MatchesTheLoopReferenceLlamaAndGemma) {
  torch::manual_seed(31);
  for (auto dtype : {torch::kFloat, torch::kDouble})
    for (auto kind : {ops::RmsNormKind::Llama, ops::RmsNormKind::Gemma})
      for (int64_t d : {1, 7, 64}) {
        auto x = torch::randn({2, 3, d}, dtype) * 3;
        auto w = torch::randn({d}, dtype);
        const double eps = d == 7 ? 1e-5 : 1e-6;
        auto out = ops::rms_norm(x, w, eps, kind);
        ASSERT_EQ(out.scalar_type(), dtype);
        ASSERT_EQ(out.sizes(), x.sizes());
        auto want = reference_rms_norm(x, w, eps, kind == ops::RmsNormKind::Gemma);
        const double err = (out.to(torch::kDouble) - want).abs().max().item<double>();
        EXPECT_LT(err, dtype == torch::kDouble ? 1e-12 : 2e-5) << "d=" << d;
      }
}

TEST(RmsNorm, EpsMattersForSmallRowsAndZeroRowsStayFinite) {
  auto x = torch::full({1, 4}, 1e-3, torch::kDouble), w = torch::ones({4}, torch::kDouble);
  auto out = ops::rms_norm(x, w, 1e-6);
  EXPECT_NEAR(out[0][0].item<double>(), 1e-3 / std::sqrt(1e-6 + 1e-6), 1e-12);
  auto zero = ops::rms_norm(torch::zeros({2, 4}), torch::ones({4}), 1e-6, ops::RmsNormKind::Gemma);
  EXPECT_TRUE(torch::equal(zero, torch::zeros({2, 4})));
}

TEST(RmsNorm, HalfPrecisionIsNormalisedInFloat32) {
  torch::manual_seed(32);
  auto x = (torch::randn({3, 16}) * 50).to(torch::kBFloat16);
  auto w = torch::randn({16}).to(torch::kBFloat16);
  // Llama: weight · cast(normalised) -- both factors bf16; Gemma: cast(normalised · (1 + w)).
  auto want_llama = w * reference_rms_norm(x, torch::ones({16}), 1e-6, false).to(torch::kFloat).to(torch::kBFloat16);
  auto want_gemma = reference_rms_norm(x, w, 1e-6, true).to(torch::kFloat).to(torch::kBFloat16);
  auto llama = ops::rms_norm(x, w, 1e-6), gemma = ops::rms_norm(x, w, 1e-6, ops::RmsNormKind::Gemma);
  EXPECT_EQ(llama.scalar_type(), torch::kBFloat16);
  EXPECT_LE((llama.to(torch::kDouble) - want_llama.to(torch::kDouble)).abs().max().item<double>(),
            0.02 * want_llama.abs().max().item<double>());
  EXPECT_LE((gemma.to(torch::kDouble) - want_gemma.to(torch::kDouble)).abs().max().item<double>(),
            0.02 * want_gemma.abs().max().item<double>());
}

TEST(RmsNorm, GradientsByFiniteDifferences) {
  torch::manual_seed(33);
  auto x = torch::randn({2, 3, 5}, torch::kDouble).requires_grad_();
  auto w = torch::randn({5}, torch::kDouble).requires_grad_();
  for (auto kind : {ops::RmsNormKind::Llama, ops::RmsNormKind::Gemma}) {
    auto r = testing::gradcheck(
        [&](const std::vector<at::Tensor>& in) { return ops::rms_norm(in[0], in[1], 1e-6, kind); }, {x, w});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(RmsNorm, BadInputsAreOneLineErrors) {
  auto x = torch::randn({2, 4});
  for (const auto& f : std::vector<std::function<void()>>{
           [&] { ops::rms_norm(x, torch::ones({5})); },
           [&] { ops::rms_norm(x, torch::ones({1, 4})); },
           [&] { ops::rms_norm(x.to(torch::kLong), torch::ones({4})); },
           [&] { ops::rms_norm(x, torch::ones({4}, torch::kLong)); },
           [&] { ops::rms_norm(x, torch::ones({4}), -1.0); },
           [&] { ops::rms_norm(x, torch::ones({4}), std::nan("")); },
           [&] { ops::rms_norm(torch::randn({2, 0}), torch::ones({0})); },
           [&] { ops::rms_norm(at::Tensor(), torch::ones({4})); },
       }) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

}  // namespace rms_norm_test
}  // namespace attnkit
