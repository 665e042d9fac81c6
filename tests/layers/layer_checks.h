#pragma once
// Helpers shared by the layer tests: float64 comparisons with a reported maximum error, and
// random parameters large enough that attention is far from uniform (so a wrong mask or scale
// shows).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace attnkit::testing {

// Layers in float64 against a float64 reference: only rounding separates them.
constexpr double kFloat64Tolerance = 1e-10;

inline ::testing::AssertionResult close(const at::Tensor& got, const at::Tensor& want,
                                        double tolerance = kFloat64Tolerance) {
  if (!got.defined() || !want.defined())
    return ::testing::AssertionFailure() << "undefined tensor";
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "shape " << got.sizes() << " vs " << want.sizes();
  const at::Tensor a = got.detach().to(at::kDouble), b = want.detach().to(at::kDouble);
  if (!a.isfinite().all().item<bool>() || !b.isfinite().all().item<bool>())
    return ::testing::AssertionFailure() << "non-finite values";
  if (a.numel() == 0) return ::testing::AssertionSuccess();
  const double err = (a - b).abs().max().item<double>();
  const double scale = std::max(1.0, b.abs().max().item<double>());
  if (err <= tolerance * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max abs error " << err << " (scale " << scale
                                       << ", tolerance " << tolerance << ")";
}

// Every parameter of `module` drawn from N(0, std²) in float64.
inline void randomize(torch::nn::Module& module, double std = 0.5) {
  torch::NoGradGuard no_grad;
  module.to(torch::kDouble);
  for (auto& p : module.parameters()) p.normal_(0.0, std);
}

}  // namespace attnkit::testing
