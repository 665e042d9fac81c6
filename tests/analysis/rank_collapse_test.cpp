// Rank collapse (Dong et al. 2021): residual and norms by hand, crafted attention that collapses
// in one step or keeps the residual, the bound, the fits, the short-path experiment, and the
// qualitative reproduction (pure attention collapses much faster than attention + skip).
#include "attnkit/analysis/rank_collapse.h"
#include "attnkit/error.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cfloat>
#include <cmath>

namespace {

using namespace attnkit::analysis;
using attnkit::layers::AttentionSpec;
using attnkit::layers::BlockPaths;
using attnkit::models::TransformerConfig;
using attnkit::models::TransformerModel;
using attnkit::testing::error_of;

TransformerModel tiny_model(const std::string& kind, int64_t layers, int64_t heads, int64_t hidden,
                            uint64_t seed, double std = 0.02) {
  torch::manual_seed(seed);
  auto config = TransformerConfig::bert(50, hidden, layers, heads, 2 * hidden);
  config.dropout = 0;
  const auto spec = AttentionSpec::parse(kind);
  config.attention.kind = spec.kind;
  config.attention.feature_map = spec.feature_map;
  config.attention.max_length = 64;
  TransformerModel model(config);
  model->reset_parameters(std);
  model->to(torch::kDouble);
  return model;
}

at::Tensor ids(int64_t batch, int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(50, {batch, n}, torch::kLong);
}

// q and k zero: every logit is 0, every attention row uniform.
void make_attention_uniform(TransformerModel& model) {
  torch::NoGradGuard no_grad;
  for (int64_t l = 0; l < model->config().layers; ++l) {
    auto& mha = model->block(l)->attention;
    mha->q->weight.zero_();
    mha->q->bias.zero_();
    mha->k->weight.zero_();
    mha->k->bias.zero_();
  }
}

TEST(RankCollapse, NormsByHand) {
  // Column abs sums 5, 7, 9 -> ‖·‖₁ = 9; row abs sums 6, 15 -> ‖·‖∞ = 15.
  const auto x = torch::tensor({1.0, -2.0, 3.0, -4.0, 5.0, -6.0}, torch::kDouble).view({2, 3});
  EXPECT_DOUBLE_EQ(norm_1(x), 9.0);
  EXPECT_DOUBLE_EQ(norm_inf(x), 15.0);
  EXPECT_DOUBLE_EQ(composite_norm(x), std::sqrt(135.0));
  // Mean token (-1.5, 1.5, -1.5); residual rows ±(2.5, -3.5, 4.5).
  const auto n = residual_norms(x);
  EXPECT_DOUBLE_EQ(n.frobenius, std::sqrt(2 * (2.5 * 2.5 + 3.5 * 3.5 + 4.5 * 4.5)));
  EXPECT_DOUBLE_EQ(n.composite, std::sqrt(9.0 * 10.5));
  EXPECT_DOUBLE_EQ(n.norm_frobenius, std::sqrt(91.0));
  EXPECT_DOUBLE_EQ(n.relative_composite(), std::sqrt(9.0 * 10.5) / std::sqrt(135.0));
  // float32 input is measured in float64.
  EXPECT_DOUBLE_EQ(residual_norms(x.to(torch::kFloat)).composite, n.composite);
}

TEST(RankCollapse, IdenticalTokensHaveZeroResidual) {
  const auto row = torch::tensor({1.5, -2.0, 3.25, 0.0}, torch::kDouble);
  const auto x = row.unsqueeze(0).repeat({7, 1});
  const auto n = residual_norms(x);
  EXPECT_EQ(n.composite, 0.0);
  EXPECT_EQ(n.frobenius, 0.0);
  EXPECT_EQ(n.relative_composite(), 0.0);
  EXPECT_GT(n.norm_composite, 0.0);
  // Any row (rounding of the mean only).
  torch::manual_seed(3);
  const auto y = torch::randn({1, 16}, torch::kDouble).repeat({9, 1});
  EXPECT_LT(residual_norms(y).relative_frobenius(), 1e-15);
  // A zero matrix vanished: its relative residual is undefined (NaN), not 0 (which would read as
  // collapse to rank one).
  const auto zero = residual_norms(torch::zeros({3, 2}, torch::kDouble));
  EXPECT_TRUE(zero.vanished());
  EXPECT_TRUE(std::isnan(zero.relative_composite()));
  EXPECT_TRUE(std::isnan(zero.relative_frobenius()));
  EXPECT_FALSE(n.vanished());
}

TEST(RankCollapse, BadInputsAreErrors) {
  EXPECT_NE(error_of([] { residual_norms(torch::zeros({4}, torch::kDouble)); }).find("[n, d]"),
            std::string::npos);
  EXPECT_NE(error_of([] { residual_norms(torch::zeros({2, 3}, torch::kLong)); }).find("floating"),
            std::string::npos);
  auto model = tiny_model("softmax", 2, 2, 8, 1);
  EXPECT_NE(error_of([&] { analyze_collapse(model, ids(2, 1, 1)); }).find("n >= 2"), std::string::npos);
  EXPECT_NE(error_of([&] { analyze_collapse(model, torch::full({1, 4}, 99, torch::kLong)); })
                .find("vocabulary"),
            std::string::npos);
  auto linear = tiny_model("linear:elu", 2, 2, 8, 1);
  EXPECT_NE(error_of([&] { attention_betas(linear); }).find("softmax"), std::string::npos);
  EXPECT_NE(error_of([] { parse_variant("no_such"); }).find("pure_attention"), std::string::npos);
}

TEST(RankCollapse, UniformAttentionCollapsesPureAttentionInOneStep) {
  auto model = tiny_model("softmax", 3, 2, 16, 5, 0.3);
  make_attention_uniform(model);
  const auto input = ids(4, 10, 6);
  const auto out = layer_outputs(model, input, {variant_info(Variant::PureAttention).paths});
  ASSERT_EQ(out.size(), 4u);
  for (int64_t b = 0; b < 4; ++b) {
    EXPECT_GT(residual_norms(out[0][b]).relative_composite(), 0.1);
    // Every output row is mean(X) W_V W_O + bias: one token repeated.
    EXPECT_LT(residual_norms(out[1][b]).relative_composite(), 1e-13);
    EXPECT_LT(residual_norms(out[1][b]).relative_frobenius(), 1e-13);
    EXPECT_GT(out[1][b].norm().item<double>(), 1e-3);  // not collapsed to zero
  }
}

TEST(RankCollapse, SkipConnectionKeepsTheResidualUnderUniformAttention) {
  auto model = tiny_model("softmax", 3, 2, 16, 5, 0.3);
  make_attention_uniform(model);
  const auto input = ids(4, 10, 6);
  const auto out = layer_outputs(model, input, {variant_info(Variant::AttentionSkip).paths});
  for (int64_t l = 1; l <= 3; ++l) {
    for (int64_t b = 0; b < 4; ++b) {
      const auto before = residual_norms(out[size_t(l - 1)][b]);
      const auto after = residual_norms(out[size_t(l)][b]);
      // X + 1·cᵀ: the same residual, exactly up to rounding.
      EXPECT_NEAR(after.frobenius, before.frobenius, 1e-12 * before.frobenius);
      EXPECT_NEAR(after.composite, before.composite, 1e-12 * before.composite);
      // Relative: ‖res‖ / (‖X‖ + ‖attention output‖) by the triangle inequality.
      const double added = (out[size_t(l)][b] - out[size_t(l - 1)][b]).norm().item<double>();
      EXPECT_GE(after.relative_frobenius(), before.frobenius / (before.norm_frobenius + added) - 1e-12);
      EXPECT_GT(after.relative_frobenius(), 0.05);
    }
  }
}

TEST(RankCollapse, LayerOutputsHonourPathsAndRestoreThem) {
  auto model = tiny_model("softmax", 3, 2, 16, 7);
  model->train();
  const auto input = ids(2, 6, 8);
  // Attention dropped, no MLP, no LN, skip on: every layer passes its input through.
  const BlockPaths through{true, false, false, false};
  const auto out = layer_outputs(model, input, {through});
  for (size_t l = 1; l < out.size(); ++l) EXPECT_TRUE(torch::equal(out[l], out[0]));
  EXPECT_TRUE(model->is_training());
  EXPECT_TRUE(model->block(1)->paths().attention);
  EXPECT_TRUE(model->block(1)->paths().mlp);
  // Default paths equal the model's own forward (no final LN in BERT).
  model->eval();
  attnkit::models::ModelInputs in;
  in.input_ids = input;
  const auto full = model->forward(in).last_hidden_state;
  EXPECT_TRUE(torch::allclose(layer_outputs(model, input).back(), full, 1e-12, 1e-12));
  EXPECT_NE(error_of([&] { layer_outputs(model, input, std::vector<BlockPaths>(2)); }).find("paths"),
            std::string::npos);
}

TEST(RankCollapse, BoundHoldsLayerByLayerForSoftmax) {
  auto model = tiny_model("softmax", 4, 2, 16, 11, 0.2);
  CollapseOptions options;
  options.variants = {Variant::PureAttention};
  options.short_paths = false;
  const auto r = analyze_collapse(model, ids(4, 8, 12), options);
  ASSERT_TRUE(r.bound.available);
  ASSERT_EQ(r.bound.layers.size(), 5u);
  const auto betas = attention_betas(model);
  ASSERT_EQ(betas.size(), 4u);
  // Layer 1 starts from the input's residual, far above round-off: every input is compared.
  EXPECT_EQ(r.bound.layers[1].compared, 4);
  for (size_t l = 1; l <= 4; ++l) {
    EXPECT_GT(betas[l - 1], 0.0);
    const auto& layer = r.bound.layers[l];
    EXPECT_EQ(layer.one_step_holds, layer.compared) << "layer " << l;
    EXPECT_EQ(layer.cumulative_holds, layer.compared) << "layer " << l;
    // The measured residual in the bound is the pure-attention curve's, input by input. Deep
    // layers may collapse to an exact 0 (with AVX-512 kernels they do), which the bound's log10
    // clamps at the smallest normal double.
    ASSERT_EQ(layer.log10_measured.values.size(), 4u);
    for (size_t b = 0; b < 4; ++b)
      EXPECT_NEAR(layer.log10_measured.values[b],
                  std::log10(std::max(r.curves[0].layers[l].composite.values[b], DBL_MIN)), 1e-12);
  }
  // β by hand for layer 0, head 0 vs the max over heads.
  torch::NoGradGuard no_grad;
  auto& mha = model->block(0)->attention;
  const auto q0 = mha->q->weight.narrow(0, 0, 8), k0 = mha->k->weight.narrow(0, 0, 8);
  const auto v0 = mha->v->weight.narrow(0, 0, 8), o0 = mha->o->weight.narrow(1, 0, 8);
  const double beta0 = norm_1(q0.t().mm(k0)) * composite_norm(v0.t().mm(o0.t()));
  EXPECT_GE(betas[0], beta0 * (1 - 1e-12));
}

TEST(RankCollapse, OtherKindsRunWithoutTheBound) {
  for (const char* kind : {"linear:elu", "linear:relu", "linear:favor", "cosformer",
                           "synthesizer-dense", "synthesizer-random"}) {
    auto model = tiny_model(kind, 3, 2, 16, 13, 0.2);
    CollapseOptions options;
    options.subsets = 2;
    const auto r = analyze_collapse(model, ids(2, 8, 14), options);
    EXPECT_FALSE(r.bound.available) << kind;
    EXPECT_NE(r.bound.reason.find("softmax"), std::string::npos) << kind;
    ASSERT_EQ(r.curves.size(), 5u);
    for (const auto& curve : r.curves) {
      ASSERT_EQ(curve.layers.size(), 4u);
      for (const auto& layer : curve.layers)
        for (double v : layer.relative_composite.values) EXPECT_TRUE(std::isfinite(v)) << kind;
    }
    // Pure attention averages tokens: layer 3 is closer to rank 1 than the input.
    EXPECT_LT(r.curves[0].layers[3].relative_frobenius.spread().mean,
              r.curves[0].layers[0].relative_frobenius.spread().mean)
        << kind;
    const auto j = to_json(r);
    EXPECT_EQ(j["bound"]["available"], false);
    EXPECT_EQ(j["variants"].size(), 5u);
  }
}

TEST(RankCollapse, ShortPathsRecoverTheFullOutputAtK) {
  auto model = tiny_model("softmax", 4, 2, 16, 17, 0.2);
  CollapseOptions options;
  options.variants = {Variant::FullBlock};
  options.subsets = 3;
  options.bound = false;
  int64_t passes = 0;
  options.on_forward = [&passes] { ++passes; };
  const auto r = analyze_collapse(model, ids(3, 8, 18), options);
  EXPECT_EQ(passes, forward_passes(model->config(), options));
  ASSERT_EQ(r.short_paths.size(), 5u);
  // C(4,k) capped at 3: 1, 3, 3, 3, 1 subsets.
  const int64_t expected_subsets[] = {1, 3, 3, 3, 1};
  for (int64_t k = 0; k <= 4; ++k) EXPECT_EQ(r.short_paths[size_t(k)].subsets, expected_subsets[k]);
  const auto& all = r.short_paths[4];
  EXPECT_LT(all.relative_distance.spread().max, 1e-12);
  EXPECT_NEAR(all.cosine.spread().min, 1.0, 1e-12);
  EXPECT_EQ(all.prediction_agreement.spread().min, 1.0);
  // Fewer attention layers: further from the full output.
  EXPECT_GT(r.short_paths[0].relative_distance.spread().mean, r.short_paths[3].relative_distance.spread().mean);
  EXPECT_GT(r.short_paths[0].relative_distance.spread().mean, 1e-3);
}

TEST(RankCollapse, FitsRecoverExponentialAndDoublyExponentialRates) {
  std::vector<double> exponential, doubly;
  for (int l = 0; l <= 6; ++l) {
    exponential.push_back(0.8 * std::pow(0.5, l));
    doubly.push_back(std::pow(0.9, std::pow(3.0, l)));
  }
  const auto e = fit_collapse(exponential);
  EXPECT_NEAR(e.exponential_rate, 0.5, 1e-12);
  EXPECT_NEAR(e.log_residual.r2, 1.0, 1e-12);
  const auto d = fit_collapse(doubly);
  // 0.9^(3^6) ≈ 5e-34 is below the floor 1e-13 (0.9^(3^5) ≈ 8e-12 is not): layers 0..5 are fitted.
  EXPECT_EQ(d.layers_above_floor, 6);
  EXPECT_NEAR(d.double_exponential_base, 3.0, 1e-9);
  EXPECT_EQ(fit_collapse({0.5}).log_residual.points, 1);
  EXPECT_EQ(fit_collapse({0.5}).exponential_rate, 0.0);
}

TEST(RankCollapse, MergeConcatenatesSamples) {
  auto a = tiny_model("softmax", 2, 2, 8, 21, 0.2);
  auto b = tiny_model("softmax", 2, 2, 8, 22, 0.2);
  CollapseOptions options;
  options.subsets = 1;
  auto r = analyze_collapse(a, ids(2, 6, 1), options);
  r.merge(analyze_collapse(b, ids(3, 6, 2), options));
  EXPECT_EQ(r.models, 2);
  EXPECT_EQ(r.inputs, 5);
  EXPECT_EQ(r.curves[0].layers[1].relative_composite.values.size(), 5u);
  EXPECT_EQ(r.bound.layers[1].beta.values.size(), 2u);
  EXPECT_EQ(r.short_paths[1].subsets, 2);
  auto other = tiny_model("softmax", 3, 2, 8, 23, 0.2);
  EXPECT_NE(error_of([&] { r.merge(analyze_collapse(other, ids(2, 6, 1), options)); }).find("merge"),
            std::string::npos);
}

// The paper's central finding at small size: a 12-layer random pure-attention softmax stack loses
// its relative residual much faster than the same weights with skip connections.
TEST(RankCollapse, QualitativeReproductionPureAttentionCollapsesSkipDoesNot) {
  for (uint64_t seed : {101u, 102u}) {
    auto model = tiny_model("softmax", 12, 4, 32, seed, 0.1);
    CollapseOptions options;
    options.variants = {Variant::PureAttention, Variant::AttentionSkip};
    options.short_paths = false;
    const auto r = analyze_collapse(model, ids(4, 16, seed + 1), options);
    const auto& pure = r.curves[0].layers;
    const auto& skip = r.curves[1].layers;
    const double pure_last = pure[12].relative_composite.spread().max;
    const double skip_last = skip[12].relative_composite.spread().min;
    EXPECT_LT(pure_last, 1e-6) << "seed " << seed;
    EXPECT_GT(skip_last, 0.05) << "seed " << seed;
    EXPECT_LT(pure_last, 1e-4 * skip_last) << "seed " << seed;
    // Monotone at the start (later layers may sit at round-off).
    const double r0 = pure[0].relative_composite.spread().mean, r1 = pure[1].relative_composite.spread().mean,
                 r2 = pure[2].relative_composite.spread().mean;
    EXPECT_LT(r1, r0);
    EXPECT_LT(r2, r1);
  }
}

}  // namespace
