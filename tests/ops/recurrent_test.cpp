// RNN-mode decoding equals the parallel causal form token by token.
#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/recurrent.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnkit {
namespace {

TEST(Recurrent, LinearStepsEqualParallelCausal) {
  torch::manual_seed(1);
  const int64_t n = 70;  // crosses a kernel chunk boundary
  auto q = torch::randn({2, 3, n, 8}, torch::kDouble), k = torch::randn({2, 3, n, 8}, torch::kDouble);
  auto v = torch::randn({2, 3, n, 5}, torch::kDouble);
  for (const auto& fm : {ops::FeatureMap::elu(), ops::FeatureMap::relu(), ops::FeatureMap::favor(8, 16, 2)}) {
    auto parallel = ops::linear_attention(q, k, v, fm, true);
    ops::RecurrentState state;
    for (int64_t t = 0; t < n; ++t) {
      auto out = ops::linear_attention_step(state, q.narrow(2, t, 1), k.narrow(2, t, 1), v.narrow(2, t, 1), fm);
      ASSERT_TRUE(torch::allclose(out, parallel.narrow(2, t, 1), 1e-10, 1e-12)) << fm.name() << " t=" << t;
    }
    EXPECT_EQ(state.position, n);
    EXPECT_EQ(state.sums.sizes(), (at::IntArrayRef{2, 3, fm.output_dim(8), 6}));
  }
}

TEST(Recurrent, CosformerStepsEqualParallelCausal) {
  torch::manual_seed(2);
  const int64_t n = 50;
  auto q = torch::randn({1, 2, n, 6}, torch::kDouble), k = torch::randn({1, 2, n, 6}, torch::kDouble);
  auto v = torch::randn({1, 2, n, 4}, torch::kDouble);
  auto parallel = ops::cosformer_attention(q, k, v, true);  // M = n
  ops::RecurrentState state;
  for (int64_t t = 0; t < n; ++t) {
    auto out = ops::cosformer_attention_step(state, q.narrow(2, t, 1), k.narrow(2, t, 1), v.narrow(2, t, 1), n);
    ASSERT_TRUE(torch::allclose(out, parallel.narrow(2, t, 1), 1e-10, 1e-12)) << "t=" << t;
  }
  EXPECT_THROW(ops::cosformer_attention_step(state, q.narrow(2, 0, 1), k.narrow(2, 0, 1), v.narrow(2, 0, 1), n),
               Error);
}

TEST(Recurrent, RejectsMoreThanOneTokenAndMismatchedState) {
  auto x = torch::randn({1, 2, 3, 4});
  ops::RecurrentState state;
  EXPECT_THROW(ops::linear_attention_step(state, x, x, x, ops::FeatureMap::elu()), Error);
  auto one = x.narrow(2, 0, 1);
  ops::linear_attention_step(state, one, one, one, ops::FeatureMap::elu());
  auto wider = torch::randn({1, 2, 1, 7});
  EXPECT_THROW(ops::linear_attention_step(state, one, one, wider, ops::FeatureMap::elu()), Error);
}

}  // namespace
}  // namespace attnkit
