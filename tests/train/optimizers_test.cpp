// Optimisers: the decay rule, agreement with python3-torch's torch.optim on fixed tensors (the peer
// script tests/python/optimizer_reference.py), and a bit-exact state round trip.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

#include "attnkit/error.h"
#include "attnkit/train/optimizers.h"
#include "support/test_files.h"

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;

// The peer script's three parameters.
struct Toy : torch::nn::Module {
  Toy() {
    auto dense = register_module("dense", std::make_shared<torch::nn::Module>());
    auto norm = register_module("norm", std::make_shared<torch::nn::Module>());
    weight = dense->register_parameter("weight", torch::linspace(-0.5, 0.7, 12, torch::kDouble).reshape({3, 4}));
    bias = dense->register_parameter("bias", torch::linspace(0.1, -0.3, 4, torch::kDouble));
    gain = norm->register_parameter("weight", torch::linspace(0.9, 1.1, 4, torch::kDouble));
  }
  at::Tensor loss() {
    at::Tensor total = torch::zeros({}, torch::kDouble);
    for (const at::Tensor& p : parameters()) {
      total = total + (torch::sin(p) * torch::linspace(-1, 1, p.numel(), torch::kDouble).reshape(p.sizes())).sum();
    }
    return total;
  }
  at::Tensor weight, bias, gain;
};

void run_steps(Toy& toy, torch::optim::Optimizer& optimizer, int first, int last) {
  for (int step = first; step < last; ++step) {
    set_learning_rate(optimizer, 0.1 * (step + 1) / 5);
    optimizer.zero_grad();
    toy.loss().backward();
    optimizer.step();
  }
}

OptimizerOptions options_for(const std::string& name) {
  OptimizerOptions o;
  o.kind = optimizer_kind_from_string(name == "sgd-nesterov" ? "sgd" : name);
  o.learning_rate = 0.1;
  o.beta2 = 0.99;
  o.weight_decay = 0.1;
  o.nesterov = name == "sgd-nesterov";
  return o;
}

nlohmann::json python_reference() {
  const std::string command = "/usr/bin/python3 " ATTNKIT_SOURCE_DIR "/tests/python/optimizer_reference.py";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return nullptr;
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  if (::pclose(pipe) != 0) return nullptr;
  return nlohmann::json::parse(output);
}

TEST(Optimizers, DecayRuleSplitsByDimension) {
  EXPECT_TRUE(decays(torch::zeros({3, 4})));
  EXPECT_TRUE(decays(torch::zeros({2, 3, 4})));
  EXPECT_FALSE(decays(torch::zeros({4})));
  EXPECT_FALSE(decays(torch::zeros({})));
  Toy toy;
  auto optimizer = make_optimizer(toy, options_for("adamw"));
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  EXPECT_EQ(optimizer->param_groups()[0].params().size(), 1u);
  EXPECT_EQ(optimizer->param_groups()[1].params().size(), 2u);
  auto& no_decay = static_cast<torch::optim::AdamWOptions&>(optimizer->param_groups()[1].options());
  EXPECT_EQ(no_decay.weight_decay(), 0.0);
  set_learning_rate(*optimizer, 0.25);
  for (auto& group : optimizer->param_groups()) EXPECT_EQ(group.options().get_lr(), 0.25);
}

TEST(Optimizers, MatchTorchOptimInPython) {
  nlohmann::json reference = python_reference();
  ASSERT_FALSE(reference.is_null()) << "tests/python/optimizer_reference.py failed (python3-torch missing?)";
  for (const std::string name : {"adamw", "adam", "sgd", "sgd-nesterov"}) {
    SCOPED_TRACE(name);
    Toy toy;
    auto optimizer = make_optimizer(toy, options_for(name));
    run_steps(toy, *optimizer, 0, 5);
    for (const auto& item : toy.named_parameters()) {
      auto expected = reference[name][item.key()].get<std::vector<double>>();
      at::Tensor actual = item.value().detach().reshape({-1});
      ASSERT_EQ(static_cast<int64_t>(expected.size()), actual.numel());
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_NEAR(actual[static_cast<int64_t>(i)].item<double>(), expected[i], 1e-12) << item.key() << "[" << i << "]";
      }
    }
  }
}

TEST(Optimizers, StateRoundTripsBitExactly) {
  for (const std::string name : {"adamw", "adam", "sgd"}) {
    SCOPED_TRACE(name);
    Toy a;
    auto optimizer_a = make_optimizer(a, options_for(name));
    run_steps(a, *optimizer_a, 0, 3);
    const std::string bytes = save_optimizer_state(*optimizer_a);

    Toy b;
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < a.parameters().size(); ++i) b.parameters()[i].copy_(a.parameters()[i]);
    }
    auto optimizer_b = make_optimizer(b, options_for(name));
    load_optimizer_state(*optimizer_b, bytes, "state");
    run_steps(a, *optimizer_a, 3, 5);
    run_steps(b, *optimizer_b, 3, 5);
    for (size_t i = 0; i < a.parameters().size(); ++i) {
      EXPECT_TRUE(torch::equal(a.parameters()[i], b.parameters()[i])) << i;
    }
  }
}

TEST(Optimizers, ClearErrors) {
  EXPECT_EQ(error_of([] { optimizer_kind_from_string("lamb"); }),
            "unknown optimizer 'lamb' (expected adamw, adam or sgd)");
  OptimizerOptions o;
  o.beta1 = 1.0;
  EXPECT_EQ(error_of([&] { o.validate(); }), "optimizer options: beta1 must be in [0, 1), got 1");
  o = OptimizerOptions();
  o.learning_rate = -1;
  EXPECT_EQ(error_of([&] { o.validate(); }), "optimizer options: learning_rate must be >= 0, got -1");
  torch::nn::Module empty;
  EXPECT_EQ(error_of([&] { make_optimizer(empty, OptimizerOptions()); }), "make_optimizer: the module has no trainable parameters");
  Toy toy;
  auto optimizer = make_optimizer(toy, OptimizerOptions());
  EXPECT_NE(error_of([&] { load_optimizer_state(*optimizer, "garbage", "x/optimizer.pt"); }).find("x/optimizer.pt: "),
            std::string::npos);
}

}  // namespace
}  // namespace attnkit::train
