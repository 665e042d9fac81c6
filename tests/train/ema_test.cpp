// EMA of weights: the update formula, exact swap in/out, and misuse errors.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "attnkit/train/ema.h"
#include "support/test_files.h"

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;

TEST(Ema, AveragesAndSwapsExactly) {
  torch::nn::Module module;
  at::Tensor w = module.register_parameter("w", torch::tensor({1.0, 2.0}, torch::kDouble));
  ExponentialMovingAverage ema(module, 0.75);
  {
    torch::NoGradGuard no_grad;
    w.copy_(torch::tensor({5.0, -2.0}, torch::kDouble));
  }
  ema.update();  // 0.75·(1, 2) + 0.25·(5, -2) = (2, 1)
  EXPECT_TRUE(torch::equal(ema.shadow()[0].second, torch::tensor({2.0, 1.0}, torch::kDouble)));
  EXPECT_EQ(ema.shadow()[0].first, "w");
  {
    EmaSwap swap(&ema);
    EXPECT_TRUE(ema.swapped_in());
    EXPECT_TRUE(torch::equal(w, torch::tensor({2.0, 1.0}, torch::kDouble)));
    EXPECT_EQ(error_of([&] { ema.update(); }), "EMA update while the averaged weights are swapped in");
    EXPECT_EQ(error_of([&] { ema.swap_in(); }), "EMA weights are already swapped in");
  }
  EXPECT_FALSE(ema.swapped_in());
  EXPECT_TRUE(torch::equal(w, torch::tensor({5.0, -2.0}, torch::kDouble)));
  EXPECT_EQ(error_of([&] { ema.swap_out(); }), "EMA weights are not swapped in");
  EmaSwap nothing(nullptr);  // no average: no-op
}

TEST(Ema, LoadChecksNamesAndShapes) {
  torch::nn::Module module;
  module.register_parameter("w", torch::zeros({2}));
  ExponentialMovingAverage ema(module, 0.9);
  EXPECT_EQ(error_of([&] { ema.load({}, "ema.safetensors"); }), "ema.safetensors: no averaged weights for 'w'");
  EXPECT_EQ(error_of([&] { ema.load({{"w", torch::zeros({3})}}, "e"); }), "e: 'w' has shape [3], the model's is [2]");
  ema.load({{"w", torch::ones({2})}}, "e");
  EXPECT_TRUE(torch::equal(ema.shadow()[0].second, torch::ones({2})));
  EXPECT_EQ(error_of([&] { ExponentialMovingAverage(module, 1.0); }), "EMA decay must be in (0, 1), got 1");
}

}  // namespace
}  // namespace attnkit::train
