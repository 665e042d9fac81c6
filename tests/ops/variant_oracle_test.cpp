// The one harness every attention variant registers into (ops/variants.h): each variant is run
// against its float64 oracle over many shapes, gradient-checked in float64, and probed for
// causality and for fully padded keys.
#include "attnkit/error.h"
#include "attnkit/ops/variants.h"
#include "support/gradcheck.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fmt/format.h>

namespace attnkit {
namespace {

std::vector<std::string> all_kinds() {
  std::vector<std::string> kinds;
  for (const auto& v : ops::attention_variants()) kinds.push_back(v.kind);
  return kinds;
}

struct ShapeCase {
  int64_t L, S, dk, dv;
};

// n ∈ {1, 2, 7, 64, 257}, d ∈ {1, 16, 64, 80}, L ≠ S, dk ≠ dv.
const std::vector<ShapeCase>& shape_cases() {
  static const std::vector<ShapeCase> cases = {
      {1, 1, 1, 1},    {2, 2, 16, 16},  {7, 7, 64, 64},  {64, 64, 80, 80}, {257, 257, 16, 16},
      {1, 7, 16, 16},  {7, 2, 1, 16},   {64, 257, 80, 64}, {257, 64, 64, 1}, {7, 64, 16, 80},
      {2, 257, 64, 16}, {257, 257, 80, 80},
  };
  return cases;
}

using OracleParam = std::tuple<std::string, size_t, bool>;

class VariantOracle : public ::testing::TestWithParam<OracleParam> {};

TEST_P(VariantOracle, MatchesFloat64Reference) {
  const auto& [kind, shape_index, causal] = GetParam();
  const auto& sc = shape_cases()[shape_index];
  ops::VariantShape shape{2, 3, sc.L, sc.S, sc.dk, sc.dv};
  // Pad some keys of the second batch element (never all of them).
  auto key_valid = torch::ones({2, sc.S}, torch::kBool);
  if (sc.S > 1) key_valid[1].narrow(0, sc.S / 2 + 1, sc.S - sc.S / 2 - 1).fill_(false);
  for (bool padded : {false, true}) {
    auto c = ops::make_variant_case(kind, shape, causal, 7, torch::kFloat,
                                    padded ? c10::optional<at::Tensor>(key_valid) : c10::nullopt);
    if (causal && (kind == "linear" || kind == "linear-relu" || kind == "favor" ||
                   kind == "cosformer") && sc.L > sc.S) {
      EXPECT_THROW(c.run(), Error);
      continue;
    }
    auto out = c.run();
    auto ref = c.run_reference();
    ASSERT_EQ(out.sizes(), (at::IntArrayRef{2, 3, sc.L, sc.dv}));
    ASSERT_TRUE(out.isfinite().all().item<bool>());
    EXPECT_TRUE(torch::allclose(out.to(torch::kDouble), ref, 1e-4, 1e-5))
        << kind << " L=" << sc.L << " S=" << sc.S << " dk=" << sc.dk << " dv=" << sc.dv
        << " causal=" << causal << " padded=" << padded << " max err "
        << (out.to(torch::kDouble) - ref).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllVariants, VariantOracle,
    ::testing::Combine(::testing::ValuesIn(all_kinds()),
                       ::testing::Range<size_t>(0, shape_cases().size()), ::testing::Bool()),
    [](const ::testing::TestParamInfo<OracleParam>& info) {
      std::string name = std::get<0>(info.param);
      for (auto& ch : name)
        if (ch == '-') ch = '_';
      const auto& sc = shape_cases()[std::get<1>(info.param)];
      return fmt::format("{}_L{}_S{}_dk{}_dv{}_{}", name, sc.L, sc.S, sc.dk, sc.dv,
                         std::get<2>(info.param) ? "causal" : "full");
    });

class VariantProperty : public ::testing::TestWithParam<std::string> {};

TEST_P(VariantProperty, GradientsMatchFiniteDifferences) {
  for (bool causal : {false, true}) {
    ops::VariantShape shape{2, 2, 5, 5, 3, 2};
    auto key_valid = torch::ones({2, 5}, torch::kBool);
    key_valid[1][4] = false;
    auto c = ops::make_variant_case(GetParam(), shape, causal, 3, torch::kDouble, key_valid);
    for (auto& x : c.inputs) x.requires_grad_(true);
    auto result = testing::gradcheck(c.op, c.inputs);
    EXPECT_TRUE(result.ok) << GetParam() << " causal=" << causal << ": " << result.message;
  }
}

TEST_P(VariantProperty, CausalOutputsIgnoreFutureTokens) {
  const int64_t n = 23;
  ops::VariantShape shape{2, 2, n, n, 8, 8};
  auto c = ops::make_variant_case(GetParam(), shape, /*causal=*/true, 11, torch::kDouble);
  auto before = c.run();
  const int64_t t = 9;
  auto inputs = c.inputs;
  for (int idx = 0; idx < 3; ++idx) {  // q, k, v after position t
    inputs[idx] = inputs[idx].clone();
    inputs[idx].narrow(2, t + 1, n - t - 1).normal_();
  }
  auto after = c.op(inputs);
  EXPECT_TRUE(torch::allclose(before.narrow(2, 0, t + 1), after.narrow(2, 0, t + 1), 0, 1e-12))
      << GetParam();
  EXPECT_FALSE(torch::allclose(before.narrow(2, t + 1, n - t - 1),
                               after.narrow(2, t + 1, n - t - 1)))
      << GetParam() << ": later outputs should change with the perturbed tokens";
}

TEST_P(VariantProperty, FullyPaddedKeysGiveZerosNotNaN) {
  ops::VariantShape shape{2, 2, 6, 6, 4, 4};
  auto key_valid = torch::ones({2, 6}, torch::kBool);
  key_valid[1].fill_(false);
  for (bool causal : {false, true}) {
    auto c = ops::make_variant_case(GetParam(), shape, causal, 5, torch::kFloat, key_valid);
    auto out = c.run();
    ASSERT_TRUE(out.isfinite().all().item<bool>()) << GetParam();
    EXPECT_EQ(out[1].abs().max().item<float>(), 0.0f) << GetParam();
    EXPECT_GT(out[0].abs().max().item<float>(), 0.0f) << GetParam();
    EXPECT_TRUE(torch::allclose(out.to(torch::kDouble), c.run_reference(), 1e-4, 1e-5));
  }
}

TEST_P(VariantProperty, Float64MatchesOracleTightly) {
  ops::VariantShape shape{1, 2, 33, 33, 16, 16};
  auto c = ops::make_variant_case(GetParam(), shape, true, 13, torch::kDouble);
  EXPECT_TRUE(torch::allclose(c.run(), c.run_reference(), 1e-10, 1e-12)) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(AllVariants, VariantProperty, ::testing::ValuesIn(all_kinds()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (auto& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(VariantCatalogue, UnknownKindListsKnownOnes) {
  try {
    ops::make_variant_case("sparse", {}, false, 0, torch::kFloat);
    FAIL() << "expected attnkit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown attention kind 'sparse'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cosformer"), std::string::npos);
  }
}

}  // namespace
}  // namespace attnkit
