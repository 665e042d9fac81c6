// Masks against hand-worked examples.
#include "attnkit/error.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/softmax_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnkit {
namespace {

at::Tensor grid(std::vector<std::vector<int>> rows) {
  const int64_t n = static_cast<int64_t>(rows.size()), m = static_cast<int64_t>(rows[0].size());
  auto t = torch::zeros({n, m}, torch::kBool);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) t[i][j] = rows[i][j] != 0;
  return t;
}

void expect_mask(const at::Tensor& got, const at::Tensor& want) {
  ASSERT_EQ(got.scalar_type(), torch::kBool);
  EXPECT_TRUE(torch::equal(got, want)) << "got\n" << got << "\nwant\n" << want;
}

TEST(Masks, CausalSquareAndBottomRightAligned) {
  expect_mask(ops::causal_mask(3, 3).squeeze(), grid({{1, 0, 0}, {1, 1, 0}, {1, 1, 1}}));
  // Two queries at the end of four keys (incremental decoding): positions 2 and 3.
  expect_mask(ops::causal_mask(2, 4).squeeze(), grid({{1, 1, 1, 0}, {1, 1, 1, 1}}));
  EXPECT_EQ(ops::causal_mask(2, 4).sizes(), (at::IntArrayRef{1, 1, 2, 4}));
}

TEST(Masks, PaddingFromLengths) {
  auto m = ops::padding_mask_from_lengths(torch::tensor({2, 4}), 4);
  EXPECT_EQ(m.sizes(), (at::IntArrayRef{2, 1, 1, 4}));
  expect_mask(m.squeeze(1).squeeze(1), grid({{1, 1, 0, 0}, {1, 1, 1, 1}}));
}

TEST(Masks, PrefixLM) {
  // Prefix of 2 among 4: the prefix is bidirectional, the rest causal.
  expect_mask(ops::prefix_lm_mask(2, 4).squeeze(),
              grid({{1, 1, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}}));
}

TEST(Masks, UniLMFromSegmentIds) {
  // Source "a b c", target "x y": segment ids 0 0 0 1 1, cumsum 0 0 0 1 2.
  auto m = ops::unilm_mask(torch::tensor({{0, 0, 0, 1, 1}}));
  EXPECT_EQ(m.sizes(), (at::IntArrayRef{1, 1, 5, 5}));
  expect_mask(m.squeeze(), grid({{1, 1, 1, 0, 0},
                                 {1, 1, 1, 0, 0},
                                 {1, 1, 1, 0, 0},
                                 {1, 1, 1, 1, 0},
                                 {1, 1, 1, 1, 1}}));
  // All source (segment 0) is fully bidirectional: BERT.
  expect_mask(ops::unilm_mask(torch::zeros({1, 3}, torch::kLong)).squeeze(),
              torch::ones({3, 3}, torch::kBool));
  // All target (segment 1) is causal: GPT.
  expect_mask(ops::unilm_mask(torch::ones({1, 3}, torch::kLong)).squeeze(),
              ops::causal_mask(3, 3).squeeze());
}

TEST(Masks, XLNetContentAndQueryStreams) {
  // Factorisation order 2 -> 0 -> 3 -> 1 over positions 0..3: ranks r = [1, 3, 0, 2].
  auto masks = ops::xlnet_masks(torch::tensor({2, 0, 3, 1}));
  // content: r[j] <= r[i]
  expect_mask(masks.content.squeeze(), grid({{1, 0, 1, 0},
                                             {1, 1, 1, 1},
                                             {0, 0, 1, 0},
                                             {1, 0, 1, 1}}));
  // query: r[j] < r[i] (never itself)
  expect_mask(masks.query.squeeze(), grid({{0, 0, 1, 0},
                                           {1, 0, 1, 1},
                                           {0, 0, 0, 0},
                                           {1, 0, 1, 0}}));
  // Identity permutation gives the causal masks.
  auto id = ops::xlnet_masks(torch::arange(5));
  expect_mask(id.content.squeeze(), ops::causal_mask(5, 5).squeeze());
}

TEST(Masks, XLNetRejectsNonPermutation) {
  try {
    ops::xlnet_masks(torch::tensor({0, 0, 2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a permutation"), std::string::npos) << e.what();
  }
}

TEST(Masks, CombineIsAndWithBroadcast) {
  auto pad = ops::padding_mask_from_lengths(torch::tensor({3}), 4);  // [1,1,1,4]
  auto both = ops::combine_masks(ops::causal_mask(4, 4), pad).squeeze();
  expect_mask(both, grid({{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 0}}));
  EXPECT_THROW(ops::combine_masks(torch::ones({2, 3}, torch::kBool), torch::ones({4}, torch::kBool)),
               Error);
  EXPECT_THROW(ops::combine_masks(torch::ones({3}), torch::ones({3}, torch::kBool)), Error);
}

TEST(Masks, UniLMMaskDrivesSoftmaxAttention) {
  // A target token must not see later target tokens through softmax_attention with the mask.
  auto q = torch::randn({1, 1, 5, 4}, torch::kDouble), k = torch::randn({1, 1, 5, 4}, torch::kDouble);
  auto v = torch::randn({1, 1, 5, 4}, torch::kDouble);
  auto mask = ops::unilm_mask(torch::tensor({{0, 0, 1, 1, 1}}));
  auto out = ops::softmax_attention(q, k, v, mask);
  auto v2 = v.clone();
  v2[0][0][4].normal_();
  auto out2 = ops::softmax_attention(q, k, v2, mask);
  EXPECT_TRUE(torch::allclose(out.narrow(2, 0, 4), out2.narrow(2, 0, 4)));
  EXPECT_FALSE(torch::allclose(out.narrow(2, 4, 1), out2.narrow(2, 4, 1)));
}

}  // namespace
}  // namespace attnkit
