// Numerics at the edges (docs/robustness.md): every attention kind of the catalogue gives finite
// outputs and gradients for huge inputs (q, k, v of magnitude 1e4) and for query rows that may
// attend to no key at all (a fully masked row of a general mask, or every key padded).
#include "attnkit/ops/variants.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cctype>

namespace attnkit {
namespace {

std::vector<std::string> all_kinds() {
  std::vector<std::string> kinds;
  for (const auto& v : ops::attention_variants()) kinds.push_back(v.kind);
  return kinds;
}

std::string test_name(std::string kind) {
  for (auto& ch : kind)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return kind;
}

// Output and the gradients of q, k, v are finite; returns the output.
at::Tensor expect_finite(const ops::VariantCase& c, std::vector<at::Tensor> inputs, const std::string& what) {
  for (int i = 0; i < 3; ++i) inputs[i] = inputs[i].detach().requires_grad_(true);
  at::Tensor out = c.op(inputs);
  EXPECT_TRUE(out.isfinite().all().item<bool>()) << what << ": output";
  out.sum().backward();
  for (int i = 0; i < 3; ++i) {
    if (!inputs[i].grad().defined()) continue;  // a kind that does not read it
    EXPECT_TRUE(inputs[i].grad().isfinite().all().item<bool>()) << what << ": gradient of input " << i;
  }
  return out.detach();
}

class ExtremeInputs : public ::testing::TestWithParam<std::string> {};

TEST_P(ExtremeInputs, HugeInputsGiveFiniteOutputs) {
  const std::string& kind = GetParam();
  ops::VariantShape shape{2, 2, 9, 9, 8, 8};
  for (bool causal : {false, true}) {
    for (double magnitude : {1e4, -1e4}) {
      auto c = ops::make_variant_case(kind, shape, causal, 3, torch::kFloat);
      auto inputs = c.inputs;
      // Mixed signs and sizes up to |magnitude|, and one row all at +-magnitude.
      for (int i = 0; i < 3; ++i) {
        inputs[i] = (inputs[i].clone() * magnitude).clamp(-std::abs(magnitude), std::abs(magnitude));
        inputs[i].select(2, 0).fill_(magnitude);
      }
      expect_finite(c, inputs, kind + (causal ? " causal" : "") + " magnitude " + std::to_string(magnitude));
    }
  }
}

TEST_P(ExtremeInputs, FullyMaskedRowsGiveFiniteOutputs) {
  const std::string& kind = GetParam();
  ops::VariantShape shape{2, 2, 6, 6, 4, 4};
  // Every key of batch element 1 padded: each of its rows attends to nothing.
  auto key_valid = torch::ones({2, 6}, torch::kBool);
  key_valid[1].fill_(false);
  for (bool causal : {false, true}) {
    auto c = ops::make_variant_case(kind, shape, causal, 5, torch::kFloat, key_valid);
    const at::Tensor out = expect_finite(c, c.inputs, kind + " padded");
    EXPECT_EQ(out[1].abs().max().item<float>(), 0.0f) << kind;
  }
  if (!ops::variant_info(kind).general_mask) return;
  // A general mask with query rows 0 and 3 masked entirely.
  auto mask = torch::rand({2, 1, 6, 6}).gt(0.3);
  mask.select(2, 0).fill_(false);
  mask.select(2, 3).fill_(false);
  auto c = ops::make_variant_case(kind, shape, false, 9, torch::kFloat, c10::nullopt, mask);
  const at::Tensor out = expect_finite(c, c.inputs, kind + " masked rows");
  EXPECT_EQ(out.select(2, 0).abs().max().item<float>(), 0.0f) << kind;
  // Huge inputs and masked rows together.
  auto inputs = c.inputs;
  for (int i = 0; i < 3; ++i) inputs[i] = inputs[i].clone() * 1e4;
  expect_finite(c, inputs, kind + " masked rows, magnitude 1e4");
}

INSTANTIATE_TEST_SUITE_P(AllVariants, ExtremeInputs, ::testing::ValuesIn(all_kinds()),
                         [](const auto& info) { return test_name(info.param); });

}  // namespace
}  // namespace attnkit
