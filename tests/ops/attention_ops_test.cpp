// Op-specific behaviour beyond the shared harness: general masks, scale, feature maps, head
// gates, and the checked entry points' error messages.
#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/head_gates.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/reference.h"
#include "attnkit/ops/softmax_attention.h"
#include "attnkit/ops/synthesizer.h"
#include "attnkit/ops/talking_heads.h"
#include "support/gradcheck.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnkit {
namespace {

at::Tensor randn(at::IntArrayRef sizes, at::ScalarType dtype = torch::kFloat) {
  return torch::randn(sizes, torch::TensorOptions().dtype(dtype));
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double rtol = 1e-4,
                  double atol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(torch::allclose(got.to(torch::kDouble), want, rtol, atol))
      << "max err " << (got.to(torch::kDouble) - want).abs().max().item<double>();
}

// Runs f and expects attnkit::Error whose message contains every fragment.
template <typename F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected attnkit::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* frag : fragments)
      EXPECT_NE(msg.find(frag), std::string::npos) << "message '" << msg << "' lacks '" << frag << "'";
  }
}

TEST(SoftmaxAttention, ArbitraryBoolMaskWithFullyMaskedRows) {
  torch::manual_seed(1);
  auto q = randn({2, 3, 9, 16}), k = randn({2, 3, 11, 16}), v = randn({2, 3, 11, 5});
  auto mask = torch::rand({2, 1, 9, 11}).gt(0.4);
  mask[0][0][3].fill_(false);  // a query with no keys at all
  auto out = ops::softmax_attention(q, k, v, mask);
  ASSERT_TRUE(out.isfinite().all().item<bool>());
  EXPECT_EQ(out[0].select(1, 3).abs().max().item<float>(), 0.0f);
  expect_close(out, reference::softmax_attention(q, k, v, mask));
  // Combined with causality (bottom-right aligned, L < S).
  expect_close(ops::softmax_attention(q, k, v, mask, true),
               reference::softmax_attention(q, k, v, mask, true));
}

TEST(SoftmaxAttention, AdditiveMaskAndExplicitScale) {
  torch::manual_seed(2);
  auto q = randn({1, 2, 7, 8}), k = randn({1, 2, 7, 8}), v = randn({1, 2, 7, 8});
  auto bias = randn({1, 2, 7, 7});
  bias[0][1][2].fill_(-std::numeric_limits<float>::infinity());  // fully masked by -inf
  auto out = ops::softmax_attention(q, k, v, bias, false, 0.3);
  ASSERT_TRUE(out.isfinite().all().item<bool>());
  EXPECT_EQ(out[0][1][2].abs().max().item<float>(), 0.0f);
  expect_close(out, reference::softmax_attention(q, k, v, bias, false, 0.3));
}

TEST(SoftmaxAttention, GradientsWithMasks) {
  torch::manual_seed(3);
  auto q = randn({1, 2, 4, 3}, torch::kDouble).requires_grad_();
  auto k = randn({1, 2, 5, 3}, torch::kDouble).requires_grad_();
  auto v = randn({1, 2, 5, 2}, torch::kDouble).requires_grad_();
  auto mask = torch::rand({1, 2, 4, 5}).gt(0.3);
  mask[0][1][0].fill_(false);
  auto bias = randn({1, 1, 4, 5}, torch::kDouble).requires_grad_();
  auto r1 = testing::gradcheck(
      [&](const std::vector<at::Tensor>& x) { return ops::softmax_attention(x[0], x[1], x[2], mask, true); },
      {q, k, v});
  EXPECT_TRUE(r1.ok) << r1.message;
  auto r2 = testing::gradcheck(
      [&](const std::vector<at::Tensor>& x) { return ops::softmax_attention(x[0], x[1], x[2], x[3]); },
      {q, k, v, bias});
  EXPECT_TRUE(r2.ok) << r2.message;
}

TEST(TalkingHeads, GeneralMaskAndUnequalHeadCounts) {
  torch::manual_seed(4);
  auto q = randn({2, 3, 6, 4}), k = randn({2, 3, 8, 4}), v = randn({2, 5, 8, 2});
  auto pre = randn({3, 4}), post = randn({4, 5});
  auto mask = torch::rand({2, 4, 6, 8}).gt(0.5);
  expect_close(ops::talking_heads_attention(q, k, v, pre, post, mask),
               reference::talking_heads_attention(q, k, v, pre, post, mask));
  // Identity mixing is plain softmax attention.
  auto v3 = randn({2, 3, 8, 2});
  auto eye = torch::eye(3);
  expect_close(ops::talking_heads_attention(q, k, v3, eye, eye, mask.narrow(1, 0, 3)),
               reference::softmax_attention(q, k, v3, mask.narrow(1, 0, 3)));
}

TEST(FeatureMaps, ParseNamesAndDeterministicFavor) {
  EXPECT_EQ(ops::FeatureMap::parse("elu", 8).name(), "elu");
  EXPECT_EQ(ops::FeatureMap::parse("relu", 8).name(), "relu");
  auto a = ops::FeatureMap::parse("favor:32:7", 8);
  auto b = ops::FeatureMap::favor(8, 32, 7);
  EXPECT_EQ(a.name(), "favor:32:7");
  EXPECT_TRUE(torch::equal(a.projection(), b.projection()));
  EXPECT_EQ(a.projection().sizes(), (at::IntArrayRef{32, 8}));
  b.redraw(8);
  EXPECT_FALSE(torch::equal(a.projection(), b.projection()));
  EXPECT_EQ(b.seed(), 8u);
  // Default size m = d·ceil(ln d).
  EXPECT_EQ(ops::FeatureMap::favor(64).projection().size(0), 64 * 5);
  // Orthogonal blocks: the first d rows are mutually orthogonal.
  auto w = ops::FeatureMap::favor(8, 8, 1).projection();
  auto gram = torch::matmul(w, w.t());
  EXPECT_TRUE(torch::allclose(gram - torch::diag(torch::diag(gram)), torch::zeros({8, 8}, torch::kDouble),
                              0, 1e-10));
}

TEST(FeatureMaps, FavorApproximatesSoftmaxAttention) {
  // With many random features, φ(q)·φ(k) ≈ exp(q·k/√d): the linear attention output
  // approaches softmax attention (Performer, Choromanski et al. 2021).
  torch::manual_seed(5);
  auto q = randn({1, 1, 16, 4}, torch::kDouble) * 0.5, k = randn({1, 1, 16, 4}, torch::kDouble) * 0.5;
  auto v = randn({1, 1, 16, 3}, torch::kDouble);
  auto exact = reference::softmax_attention(q, k, v);
  auto approx = ops::linear_attention(q, k, v, ops::FeatureMap::favor(4, 8192, 3));
  EXPECT_LT((approx - exact).abs().max().item<double>(), 0.05);
  auto coarse = ops::linear_attention(q, k, v, ops::FeatureMap::favor(4, 4, 3));
  EXPECT_GT((coarse - exact).abs().max().item<double>(), (approx - exact).abs().max().item<double>());
}

TEST(Cosformer, ReweightingFavoursNearbyTokens) {
  // Identical keys: the weight of key j for query i is proportional to cos(π/2·(i−j)/M), which
  // decreases with distance, so the output for query 0 leans towards v_0.
  auto q = torch::ones({1, 1, 8, 2}, torch::kDouble), k = torch::ones({1, 1, 8, 2}, torch::kDouble);
  auto v = torch::arange(8, torch::kDouble).view({1, 1, 8, 1});
  auto out = ops::cosformer_attention(q, k, v);
  EXPECT_LT(out[0][0][0][0].item<double>(), 3.5);
  EXPECT_GT(out[0][0][7][0].item<double>(), 3.5);
  expect_close(out, reference::cosformer_attention(q, k, v), 1e-12, 1e-12);
}

TEST(HeadGates, ScaleEachHeadAndGradient) {
  auto ctx = randn({2, 3, 4, 5}, torch::kDouble);
  auto gates = torch::tensor({1.0, 0.0, 0.5}, torch::kDouble).requires_grad_();
  auto out = ops::apply_head_gates(ctx, gates);
  EXPECT_TRUE(torch::equal(out.select(1, 0), ctx.select(1, 0)));
  EXPECT_EQ(out.select(1, 1).abs().max().item<double>(), 0.0);
  out.sum().backward();
  EXPECT_NEAR(gates.grad()[1].item<double>(), ctx.select(1, 1).sum().item<double>(), 1e-9);
  auto per_batch = torch::ones({2, 3}, torch::kDouble);
  EXPECT_TRUE(torch::equal(ops::apply_head_gates(ctx, per_batch), ctx));
}

TEST(Errors, WrongRank) {
  auto q = randn({2, 3, 4}), k = randn({2, 3, 4, 8}), v = randn({2, 3, 4, 8});
  expect_error([&] { ops::softmax_attention(q, k, v); },
               {"softmax_attention", "q must have 4 dimensions", "[2, 3, 4]"});
  expect_error([&] { ops::cosformer_attention(k, q, v); }, {"cosformer_attention", "k", "[2, 3, 4]"});
}

TEST(Errors, MismatchedDims) {
  auto q = randn({2, 3, 4, 8}), k = randn({2, 3, 5, 6}), v = randn({2, 3, 5, 8});
  expect_error([&] { ops::softmax_attention(q, k, v); },
               {"k has shape [2, 3, 5, 6]", "q has shape [2, 3, 4, 8]", "dk"});
  auto k2 = randn({2, 3, 5, 8}), v2 = randn({2, 3, 6, 8});
  expect_error([&] { ops::linear_attention(q, k2, v2, "elu"); },
               {"linear_attention", "v has shape [2, 3, 6, 8]", "k has shape [2, 3, 5, 8]"});
  expect_error([&] { ops::softmax_attention(q, randn({1, 3, 5, 8}), randn({1, 3, 5, 8})); },
               {"batch and heads must match"});
  expect_error([&] { ops::softmax_attention(q, k2.to(torch::kDouble), k2); }, {"dtype"});
}

TEST(Errors, BadMasks) {
  auto q = randn({2, 3, 4, 8}), k = randn({2, 3, 5, 8}), v = randn({2, 3, 5, 8});
  expect_error([&] { ops::softmax_attention(q, k, v, torch::ones({2, 3, 4, 4}, torch::kBool)); },
               {"mask has shape [2, 3, 4, 4]", "broadcastable to [2, 3, 4, 5]"});
  expect_error([&] { ops::softmax_attention(q, k, v, torch::ones({4, 5}, torch::kLong)); },
               {"mask has dtype", "bool"});
  expect_error([&] { ops::softmax_attention(q, k, v, torch::zeros({4, 5}, torch::kDouble)); },
               {"additive mask has dtype"});
  expect_error([&] {
    ops::linear_attention(q, k, v, ops::FeatureMap::elu(), false, torch::ones({2, 4}, torch::kBool));
  }, {"key_padding_mask has shape [2, 4]", "expected [2, 5]"});
  expect_error([&] { ops::cosformer_attention(q, k, v, false, torch::ones({2, 5})); },
               {"key_padding_mask has dtype"});
}

TEST(Errors, FeatureMapsAndCausalLengths) {
  auto q = randn({1, 1, 6, 8}), k = randn({1, 1, 4, 8}), v = randn({1, 1, 4, 8});
  expect_error([&] { ops::linear_attention(k, k, v, "softplus"); },
               {"unknown feature map 'softplus'", "elu, relu, favor"});
  expect_error([&] { ops::linear_attention(k, k, v, "favor:x"); }, {"'favor:x'"});
  expect_error([&] { ops::linear_attention(q, k, v, "elu", true); },
               {"causal attention needs L <= S", "[1, 1, 6, 8]", "[1, 1, 4, 8]"});
  expect_error([&] { ops::linear_attention(k, k, v, ops::FeatureMap::favor(4), false); },
               {"favor feature map was drawn for dimension 4"});
}

TEST(Errors, SynthesizerAndTalkingHeads) {
  auto x = randn({1, 2, 5, 4});
  expect_error([&] { ops::dense_synthesizer_logits(x, randn({2, 4, 6}), randn({2, 6}), randn({2, 6, 3}), randn({2, 3}), 5); },
               {"dense_synthesizer_logits", "w2", "[2, 6, 3]", "S=5"});
  expect_error([&] { ops::random_synthesizer_logits(randn({2, 3, 3}), 5, 3); }, {"L=5"});
  expect_error([&] { ops::factorized_dense_synthesizer_logits(x, randn({2, 4, 2}), randn({2, 4, 2}), 5); },
               {"a·b = 4", "S = 5"});
  expect_error([&] { ops::mix_logits({randn({1, 2, 5, 5})}, randn({2})); },
               {"mixing has shape [2]", "1 logits"});
  auto q = randn({1, 2, 5, 4});
  expect_error([&] { ops::talking_heads_attention(q, q, q, randn({2, 2}), randn({3, 2})); },
               {"pre_mix has shape [2, 2]", "post_mix has shape [3, 2]"});
  expect_error([&] { ops::apply_head_gates(q, randn({3})); }, {"gates has shape [3]"});
}

}  // namespace
}  // namespace attnkit
