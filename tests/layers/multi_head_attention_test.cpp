// MultiHeadAttention against torch.nn.MultiheadAttention (python3-torch, float64, through the peer
// script tests/python/mha_reference.py): outputs, per-head and averaged weights, and gradients
// for inputs and every projection, on both of the layer's paths (the fused softmax kernel, and the
// explicit weights asked for with need_weights). Then finite-difference gradients of the layer
// for several attention kinds, and fully masked queries.
#include "attnkit/io/safetensors.h"
#include "attnkit/layers/multi_head_attention.h"
#include "layers/layer_checks.h"
#include "support/gradcheck.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <map>

namespace attnkit {
namespace {

using layers::AttentionInputs;
using layers::AttentionSpec;
using layers::MultiHeadAttention;
using layers::MultiHeadAttentionOptions;

enum class MaskKind { None, Bool, Additive };

struct PeerCase {
  std::string name;
  int64_t batch = 2, L = 5, S = 5, hidden = 8, heads = 2;
  bool cross = false;
  int64_t memory_hidden = 0;  // cross attention only; 0 = hidden
  int64_t key_size = 0, value_size = 0;
  bool causal = false, padding = false, bias = true;
  MaskKind mask = MaskKind::None;
};

std::ostream& operator<<(std::ostream& os, const PeerCase& c) { return os << c.name; }

// Runs the peer on `cases_file`; returns its message on failure.
std::string run_peer(const std::string& cases_file, const std::string& out_file) {
  const std::string command = "/usr/bin/python3 " ATTNKIT_SOURCE_DIR
                              "/tests/python/mha_reference.py " +
                              cases_file + " " + out_file + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  if (::pclose(pipe) != 0) return "mha_reference.py failed: " + output;
  return "";
}

class TorchPeer : public ::testing::TestWithParam<PeerCase> {};

TEST_P(TorchPeer, OutputsWeightsAndGradients) {
  const PeerCase& c = GetParam();
  torch::manual_seed(11);
  AttentionSpec spec;
  spec.causal = c.causal;
  spec.key_size = c.key_size;
  spec.value_size = c.value_size;
  spec.bias = c.bias;
  MultiHeadAttention mha(MultiHeadAttentionOptions(c.hidden, c.heads)
                             .memory_hidden(c.cross ? c.memory_hidden : 0)
                             .spec(spec)
                             .dropout(0.0));
  testing::randomize(*mha);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const int64_t S = c.cross ? c.S : c.L;
  const int64_t M = c.cross && c.memory_hidden > 0 ? c.memory_hidden : c.hidden;
  at::Tensor x = torch::randn({c.batch, c.L, c.hidden}, f64).requires_grad_();
  at::Tensor memory = c.cross ? torch::randn({c.batch, S, M}, f64).requires_grad_() : at::Tensor();
  at::Tensor grad_output = torch::randn({c.batch, c.L, c.hidden}, f64);

  AttentionInputs in;
  if (c.padding) {
    // Batch b keeps its first S - 2b keys (at least one), so rows never lose every key.
    at::Tensor valid = torch::ones({c.batch, S}, torch::kBool);
    for (int64_t b = 0; b < c.batch; ++b) valid[b].slice(0, std::max<int64_t>(1, S - 2 * b)).fill_(false);
    in.key_padding = valid;
  }
  if (c.mask == MaskKind::Bool) {
    at::Tensor mask = torch::rand({c.batch, 1, c.L, S}).gt(0.4);
    mask.select(3, 0).fill_(true);  // key 0 stays visible to every query
    in.mask = mask;
  } else if (c.mask == MaskKind::Additive) {
    at::Tensor mask = torch::randn({c.batch, c.heads, c.L, S}, f64);
    mask.select(3, S - 1).fill_(-std::numeric_limits<double>::infinity());
    in.mask = mask;
  }

  // The case for the peer.
  const auto dir = testing::scratch_directory("layers");
  io::NamedTensors tensors{{c.name + ".x", x.detach()}, {c.name + ".grad_output", grad_output}};
  if (c.cross) tensors.push_back({c.name + ".memory", memory.detach()});
  if (in.key_padding) tensors.push_back({c.name + ".key_valid", *in.key_padding});
  if (in.mask) tensors.push_back({c.name + ".mask", *in.mask});
  for (const auto& p : mha->named_parameters()) tensors.push_back({c.name + "." + p.key(), p.value().detach()});
  nlohmann::json meta = {{"heads", c.heads},           {"key_size", mha->key_size()},
                         {"value_size", mha->value_size()}, {"causal", c.causal},
                         {"bias", c.bias}};
  const std::string cases_file = (dir / "cases.safetensors").string();
  const std::string out_file = (dir / "peer.safetensors").string();
  io::save_safetensors(cases_file, tensors, {{c.name, meta.dump()}});
  const std::string failure = run_peer(cases_file, out_file);
  ASSERT_EQ(failure, "");
  auto peer = io::load_safetensors(out_file);
  auto want = [&](const std::string& name) {
    auto it = peer.find(c.name + "." + name);
    if (it == peer.end()) ADD_FAILURE() << "peer wrote no " << name;
    return it == peer.end() ? at::Tensor() : it->second;
  };
  // Torch itself unless the head sizes are outside what it supports.
  const bool torch_sizes = mha->key_size() * c.heads == c.hidden && mha->value_size() * c.heads == c.hidden;
  EXPECT_EQ(want("peer").item<int64_t>(), torch_sizes ? 1 : 0);

  std::vector<std::string> names{"x"};
  std::vector<at::Tensor> differentiable{x};
  if (c.cross) {
    names.push_back("memory");
    differentiable.push_back(memory);
  }
  for (const auto& p : mha->named_parameters()) {
    names.push_back(p.key());
    differentiable.push_back(p.value());
  }
  for (bool need_weights : {false, true}) {
    SCOPED_TRACE(need_weights ? "explicit weights" : "fused kernel");
    in.need_weights = need_weights;
    auto result = c.cross ? mha->forward(x, in, memory) : mha->forward(x, in);
    EXPECT_TRUE(testing::close(result.output, want("output")));
    if (need_weights) {
      EXPECT_TRUE(testing::close(result.weights, want("weights")));
      EXPECT_TRUE(testing::close(result.weights.mean(1), want("weights_average")));
    }
    auto grads = torch::autograd::grad({(result.output * grad_output).sum()}, differentiable);
    for (size_t i = 0; i < grads.size(); ++i)
      EXPECT_TRUE(testing::close(grads[i], want("grad." + names[i]))) << "gradient of " << names[i];
  }
}

PeerCase make(std::string name, std::function<void(PeerCase&)> edit) {
  PeerCase c;
  c.name = std::move(name);
  edit(c);
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    MultiHeadAttention, TorchPeer,
    ::testing::Values(
        make("self", [](PeerCase&) {}),
        make("self_one_sequence_four_heads", [](PeerCase& c) { c.batch = 1; c.heads = 4; c.L = 7; }),
        make("self_padding", [](PeerCase& c) { c.batch = 3; c.padding = true; }),
        make("self_causal_padding", [](PeerCase& c) { c.causal = true; c.padding = true; c.L = 6; }),
        make("self_bool_mask", [](PeerCase& c) { c.mask = MaskKind::Bool; c.padding = true; }),
        make("self_additive_mask", [](PeerCase& c) { c.mask = MaskKind::Additive; }),
        make("self_additive_mask_causal", [](PeerCase& c) { c.mask = MaskKind::Additive; c.causal = true; }),
        make("self_additive_mask_padding", [](PeerCase& c) { c.mask = MaskKind::Additive; c.padding = true; c.batch = 3; }),
        make("self_no_bias", [](PeerCase& c) { c.bias = false; c.padding = true; }),
        make("cross", [](PeerCase& c) { c.cross = true; c.L = 4; c.S = 7; c.padding = true; }),
        // kdim = vdim = 6 in torch: separate q/k/v projection weights instead of the packed one.
        make("cross_memory_width", [](PeerCase& c) { c.cross = true; c.L = 3; c.S = 6; c.memory_hidden = 6; c.padding = true; }),
        make("cross_causal_bottom_right", [](PeerCase& c) { c.cross = true; c.L = 3; c.S = 7; c.causal = true; }),
        make("cross_bool_mask", [](PeerCase& c) { c.cross = true; c.L = 6; c.S = 4; c.memory_hidden = 5; c.mask = MaskKind::Bool; }),
        // Head sizes torch cannot express: the peer's textbook formula.
        make("key_value_sizes", [](PeerCase& c) { c.key_size = 3; c.value_size = 5; c.padding = true; c.causal = true; }),
        make("key_value_sizes_cross", [](PeerCase& c) { c.cross = true; c.L = 4; c.S = 6; c.memory_hidden = 7; c.heads = 3; c.hidden = 9; c.key_size = 2; c.value_size = 4; c.mask = MaskKind::Additive; }),
        make("heads_not_dividing_hidden", [](PeerCase& c) { c.hidden = 7; c.heads = 2; c.key_size = 4; c.value_size = 3; c.mask = MaskKind::Bool; })),
    [](const ::testing::TestParamInfo<PeerCase>& info) { return info.param.name; });

// Finite differences through the whole layer (inputs and every parameter) for each kind.
TEST(MultiHeadAttentionGradients, EveryKindByFiniteDifferences) {
  for (const std::string kind : {"softmax", "linear:elu", "cosformer", "synthesizer-dense",
                                 "synthesizer-factorized-random", "mixture:synthesizer-random+softmax"}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(kind + (causal ? " causal" : ""));
      torch::manual_seed(5);
      AttentionSpec spec = AttentionSpec::parse(kind);
      spec.causal = causal;
      spec.key_size = 3;
      spec.value_size = 2;
      spec.max_length = 6;
      spec.synthesizer_hidden = 4;
      spec.factor_rank = 2;
      MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2).memory_hidden(3).spec(spec));
      testing::randomize(*mha);
      const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
      at::Tensor x = torch::randn({2, 4, 4}, f64).requires_grad_();
      at::Tensor memory = torch::randn({2, 5, 3}, f64).requires_grad_();
      AttentionInputs in;
      in.key_padding = torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, torch::kBool).view({2, 5});
      std::vector<at::Tensor> inputs{x, memory};
      for (auto& p : mha->parameters()) inputs.push_back(p);
      // The layer reads its parameters itself; gradcheck perturbs them in place.
      auto result = testing::gradcheck(
          [&](const std::vector<at::Tensor>& t) { return mha->forward(t[0], in, t[1]).output; },
          inputs);
      EXPECT_TRUE(result.ok) << result.message;
    }
  }
}

TEST(MultiHeadAttentionGradients, ExplicitWeightsAndHeadGates) {
  torch::manual_seed(6);
  AttentionSpec spec;
  spec.talking_heads = true;
  MultiHeadAttention mha(MultiHeadAttentionOptions(6, 3).spec(spec));
  testing::randomize(*mha);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  at::Tensor x = torch::randn({2, 4, 6}, f64).requires_grad_();
  at::Tensor gates = torch::rand({2, 3}, f64).requires_grad_();
  AttentionInputs in;
  in.need_weights = true;
  in.mask = torch::rand({2, 1, 4, 4}).gt(0.3).logical_or(torch::eye(4, torch::kBool));
  std::vector<at::Tensor> inputs{x, gates};
  for (auto& p : mha->parameters()) inputs.push_back(p);
  auto result = testing::gradcheck(
      [&](const std::vector<at::Tensor>& t) {
        mha->set_head_gates(t[1]);
        auto r = mha->forward(t[0], in);
        // Both outputs: the returned weights must be differentiable too.
        return torch::cat({r.output.flatten(), r.weights.flatten()});
      },
      inputs);
  EXPECT_TRUE(result.ok) << result.message;
}

// Torch gives NaN for a query that may attend nothing; attnkit gives a zero context, so the
// output is the output projection's bias, on both paths.
TEST(MultiHeadAttention, FullyMaskedQueryGivesZeroContext) {
  torch::manual_seed(7);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2));
  testing::randomize(*mha);
  at::Tensor x = torch::randn({1, 3, 8}, torch::kDouble);
  AttentionInputs in;
  at::Tensor mask = torch::ones({1, 1, 3, 3}, torch::kBool);
  mask[0][0][1].fill_(false);
  in.mask = mask;
  for (bool need_weights : {false, true}) {
    in.need_weights = need_weights;
    auto r = mha->forward(x, in);
    ASSERT_TRUE(r.output.isfinite().all().item<bool>());
    EXPECT_TRUE(testing::close(r.output[0][1], mha->o->bias));
    if (need_weights) {
      EXPECT_EQ(r.weights[0].select(1, 1).abs().max().item<double>(), 0.0);
    }
  }
}

}  // namespace
}  // namespace attnkit
