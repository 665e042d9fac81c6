// The fused decoding step's activations (src/ops/cpu/activation_kernel.h, private to the library;
// exported by libattnkit): gelu_tanh_in_place and silu_in_place against their float64 formulas
// (GPT-2's tanh form, v·σ(v)) on random values of several spreads, lengths around the vector
// widths, and extremes (±0, tiny, ±88..±1e4 where the exp saturates); +inf stays +inf, NaN stays NaN.
// scripts/test_isa.sh runs it under every instruction-set copy.
#include "../../src/ops/cpu/activation_kernel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

namespace {

// 0.5·v·(1 + tanh z) with 1 + tanh z = 2 / (1 + e^−2z): the same number without 1 + tanh's
// cancellation, which leaves float64 a few digits of the answer at v ≈ -6 and none below v ≈ -7
// (the answer ~1e-15 there).
double gelu_tanh64(double v) {
  const double z = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
  if (std::abs(v) < 1.0) EXPECT_NEAR(0.5 * v * (1.0 + std::tanh(z)), v / (1.0 + std::exp(-2.0 * z)), 1e-15);
  return v / (1.0 + std::exp(-2.0 * z));
}
double silu64(double v) { return v / (1.0 + std::exp(-v)); }

template <typename Kernel, typename Oracle>
void expect_matches(Kernel kernel, Oracle oracle, const char* name) {
  torch::manual_seed(11);
  std::vector<float> extremes = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 3.0f, -3.0f, 20.0f, -20.0f,
                                 88.0f, -88.0f, 200.0f, -200.0f, 1e4f, -1e4f};
  for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 512, 1000}) {
    for (double spread : {0.5, 3.0, 12.0}) {
      const auto t = torch::randn({n}) * spread;
      std::vector<float> x(t.data_ptr<float>(), t.data_ptr<float>() + n);
      if (n == 33) std::copy(extremes.begin(), extremes.end(), x.begin());
      std::vector<float> y = x;
      kernel(y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = oracle(static_cast<double>(x[i]));
        // Beyond |v| = 4 the exp's argument (up to ~88) carries float32's rounding of itself:
        // a relative error of the answer up to ~|argument| · 6e-8.
        const double relative = std::abs(x[i]) <= 4.0f ? 2e-6 : 1e-5;
        EXPECT_NEAR(y[i], want, relative * std::abs(want) + 1e-30) << name << " x " << x[i] << " n " << n;
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  // (-inf has no float answer both ways agree on: the limit is 0, ATen's formulas give NaN.)
  std::vector<float> special = {inf, std::numeric_limits<float>::quiet_NaN()};
  kernel(special.data(), 2);
  EXPECT_EQ(special[0], inf) << name;
  EXPECT_TRUE(std::isnan(special[1])) << name;
}

TEST(ActivationKernel, GeluTanhMatchesFloat64) {
  expect_matches(attnkit::ops::cpu::gelu_tanh_in_place, gelu_tanh64, "gelu_tanh");
}

TEST(ActivationKernel, SiluMatchesFloat64) { expect_matches(attnkit::ops::cpu::silu_in_place, silu64, "silu"); }

}  // namespace
