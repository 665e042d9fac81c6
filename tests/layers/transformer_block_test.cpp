// TransformerBlock against the block equations written out with textbook float64 formulas
// (layers/textbook.h): post-LN and pre-LN, every combination of the run-time path switches
// (skip, MLP, LayerNorm, attention), key padding, causality, conditional LayerNorm, and decoder
// blocks with cross attention and their per-head contexts; the sub-layer callbacks
// (BlockSublayers) the incremental decoder passes; finite-difference gradients; errors.
// (The full BERT / GPT-2 blocks against torch.nn.TransformerEncoderLayer are in
// tests/python/test_hf_interop.py.)
#include "attnkit/layers/transformer_block.h"
#include "layers/layer_checks.h"
#include "layers/textbook.h"
#include "support/gradcheck.h"
#include "support/test_files.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnkit {
namespace {

using layers::Activation;
using layers::BlockInputs;
using layers::BlockPaths;
using layers::TransformerBlock;
using layers::TransformerBlockOptions;

struct Setting {
  bool norm_first = false;
  bool causal = false;
  bool conditional = false;
  bool cross = false;
  Activation activation = Activation::Gelu;
};

// The header's equations, sub-layer by sub-layer:
//   post-LN: h = LN(x + Att(x)),  pre-LN: h = x + Att(LN(x));  skip off drops "x +", LN off is
//   the identity, attention off makes Att = 0, MLP off skips the feed-forward sub-layer.
struct Reference {
  at::Tensor hidden, weights;
};

Reference textbook_block(TransformerBlock& block, const at::Tensor& x, const BlockInputs& in,
                         const Setting& s) {
  const BlockPaths& paths = block->paths();
  auto ln = [&](layers::ConditionalLayerNorm& norm, const at::Tensor& t) {
    return paths.layer_norm ? textbook::layer_norm(t, norm, in.condition) : t;
  };
  auto sublayer = [&](const at::Tensor& t, layers::ConditionalLayerNorm& norm, auto&& f) {
    at::Tensor y = f(s.norm_first ? ln(norm, t) : t);
    if (paths.skip) y = t + y;
    return s.norm_first ? y : ln(norm, y);
  };
  Reference ref;
  at::Tensor h = sublayer(x, block->ln_attention, [&](const at::Tensor& t) {
    if (!paths.attention) return torch::zeros_like(t);
    auto a = textbook::softmax_attention(
        block->attention, t, t,
        in.self.key_padding ? textbook::keys(*in.self.key_padding) : at::Tensor(), s.causal);
    ref.weights = a.weights;
    return a.output;
  });
  if (s.cross)
    h = sublayer(h, block->ln_cross, [&](const at::Tensor& t) {
      return textbook::softmax_attention(block->cross_attention, t, *in.memory,
                                         textbook::keys(*in.memory_padding), false)
          .output;
    });
  if (paths.mlp)
    h = sublayer(h, block->ln_ffn, [&](const at::Tensor& t) {
      return textbook::feed_forward(t, block->ffn, s.activation);
    });
  ref.hidden = h;
  return ref;
}

TransformerBlock make_block(const Setting& s) {
  layers::AttentionSpec spec;
  spec.causal = s.causal;
  TransformerBlock block(TransformerBlockOptions(8, 2, 12)
                             .norm_first(s.norm_first)
                             .activation(s.activation)
                             .layer_norm_eps(1e-5)
                             .attention(spec)
                             .cross_attention(s.cross)
                             .memory_hidden(s.cross ? 6 : 0)
                             .condition_size(s.conditional ? 3 : 0));
  // Random LayerNorm gains and condition maps too (the latter start at zero).
  testing::randomize(*block);
  {
    torch::NoGradGuard no_grad;  // LayerNorm gains around 1
    for (auto* ln : {&block->ln_attention, &block->ln_cross, &block->ln_ffn})
      if (*ln) (*ln)->weight.add_(1.0);
  }
  return block;
}

BlockInputs make_inputs(const Setting& s, int64_t batch, int64_t n) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  BlockInputs in;
  // Sequence b has n - b real tokens.
  in.self.key_padding = torch::arange(n).unsqueeze(0).lt(torch::arange(n, n - batch, -1).unsqueeze(1));
  if (s.cross) {
    in.memory = torch::randn({batch, 5, 6}, f64);
    in.memory_padding = torch::arange(5).unsqueeze(0).lt(torch::arange(5, 5 - batch, -1).unsqueeze(1));
  }
  if (s.conditional) in.condition = torch::randn({batch, 3}, f64);
  return in;
}

std::string describe(const Setting& s, const BlockPaths& p) {
  return fmt::format("{} causal={} conditional={} cross={} | skip={} mlp={} ln={} attention={}",
                     s.norm_first ? "pre-LN" : "post-LN", s.causal, s.conditional, s.cross, p.skip,
                     p.mlp, p.layer_norm, p.attention);
}

std::vector<Setting> settings() {
  return {{false, false, false, false, Activation::Gelu},
          {true, true, false, false, Activation::GeluTanh},
          {false, true, true, false, Activation::Relu},
          {true, false, true, false, Activation::Gelu},
          {false, true, false, true, Activation::GeluTanh},
          {true, true, true, true, Activation::Gelu}};
}

TEST(TransformerBlock, EveryPathSwitchMatchesTheEquations) {
  torch::manual_seed(21);
  for (const Setting& s : settings()) {
    TransformerBlock block = make_block(s);
    const at::Tensor x = torch::randn({3, 6, 8}, torch::kDouble);
    BlockInputs in = make_inputs(s, 3, 6);
    for (int bits = 0; bits < 16; ++bits) {
      BlockPaths paths;
      paths.skip = bits & 1;
      paths.mlp = bits & 2;
      paths.layer_norm = bits & 4;
      paths.attention = bits & 8;
      block->set_paths(paths);
      SCOPED_TRACE(describe(s, paths));
      // Both attention paths: the fused kernel, and explicit weights when they are asked for.
      in.self.need_weights = bits % 3 == 0;
      auto out = block->forward(x, in);
      Reference ref = textbook_block(block, x, in, s);
      EXPECT_TRUE(testing::close(out.hidden, ref.hidden));
      if (in.self.need_weights && paths.attention) {
        EXPECT_TRUE(testing::close(out.weights, ref.weights));
      }
    }
  }
}

// Exact identities of the switches, independent of any reference arithmetic.
TEST(TransformerBlock, SwitchedOffPathsAreExactIdentities) {
  torch::manual_seed(22);
  const at::Tensor x = torch::randn({2, 5, 8}, torch::kDouble);
  for (bool norm_first : {false, true}) {
    Setting s;
    s.norm_first = norm_first;
    TransformerBlock block = make_block(s);
    BlockPaths paths;
    paths.attention = false;
    paths.mlp = false;
    paths.layer_norm = false;
    block->set_paths(paths);  // skip only: y = x
    EXPECT_TRUE(block->forward(x).hidden.equal(x));
    paths.skip = false;
    block->set_paths(paths);  // nothing at all: y = 0
    EXPECT_EQ(block->forward(x).hidden.abs().max().item<double>(), 0.0);
    paths.layer_norm = true;
    block->set_paths(paths);
    // Post-LN normalises the zero sum: every row is the LayerNorm bias. Pre-LN stays 0.
    at::Tensor want = norm_first ? torch::zeros_like(x) : block->ln_attention->bias.expand_as(x);
    EXPECT_TRUE(testing::close(block->forward(x).hidden, want));
  }
}

// Causal blocks: changing the last token leaves the earlier outputs bit-identical.
TEST(TransformerBlock, CausalBlockIgnoresFutureTokens) {
  torch::manual_seed(23);
  for (bool norm_first : {false, true}) {
    Setting s;
    s.norm_first = norm_first;
    s.causal = true;
    TransformerBlock block = make_block(s);
    at::Tensor x = torch::randn({2, 7, 8}, torch::kDouble);
    at::Tensor y = x.clone();
    y.select(1, 6).normal_();
    auto a = block->forward(x).hidden, b = block->forward(y).hidden;
    EXPECT_TRUE(a.slice(1, 0, 6).equal(b.slice(1, 0, 6)));
    EXPECT_FALSE(a.select(1, 6).equal(b.select(1, 6)));
  }
}

// The cross-attention sub-layer's per-head contexts come back when asked, and asking changes
// nothing else; they are those of the cross attention run on the sub-layer's input.
TEST(TransformerBlock, CrossHeadContextsWhenAsked) {
  torch::manual_seed(25);
  for (bool norm_first : {false, true}) {
    Setting s;
    s.norm_first = norm_first;
    s.cross = true;
    TransformerBlock block = make_block(s);
    const at::Tensor x = torch::randn({2, 4, 8}, torch::kDouble);
    BlockInputs in = make_inputs(s, 2, 4);
    const auto plain = block->forward(x, in);
    EXPECT_FALSE(plain.cross_head_contexts.defined());
    in.need_cross_head_contexts = true;
    const auto asked = block->forward(x, in);
    EXPECT_TRUE(asked.hidden.equal(plain.hidden));
    ASSERT_TRUE(asked.cross_head_contexts.defined());
    EXPECT_EQ(asked.cross_head_contexts.sizes(), (std::vector<int64_t>{2, 2, 4, 4}));
    // The contexts the block's sub-layers saw, recomputed from the same input.
    at::Tensor cross_input;
    layers::BlockSublayers sublayers;
    sublayers.self_attention = [&](const at::Tensor& t) { return block->attention->forward(t, in.self); };
    sublayers.cross_attention = [&](const at::Tensor& t) {
      cross_input = t;
      layers::AttentionInputs cross;
      cross.key_padding = in.memory_padding;
      cross.need_head_contexts = true;
      return block->cross_attention->forward(t, cross, in.memory);
    };
    sublayers.feed_forward = [&](const at::Tensor& t) { return block->ffn->forward(t); };
    const auto by_sublayers = block->forward(x, in, sublayers);
    EXPECT_TRUE(by_sublayers.hidden.equal(plain.hidden));
    EXPECT_TRUE(by_sublayers.cross_head_contexts.equal(asked.cross_head_contexts));
    EXPECT_EQ(cross_input.sizes(), x.sizes());
  }
}

// With the attention path off, the block calls skipped_self_attention (a cache still takes the
// columns) and not self_attention; the output is as without sub-layer callbacks.
TEST(TransformerBlock, SkippedSelfAttentionIsCalledWhenTheAttentionPathIsOff) {
  torch::manual_seed(26);
  Setting s;
  TransformerBlock block = make_block(s);
  BlockPaths paths;
  paths.attention = false;
  block->set_paths(paths);
  const at::Tensor x = torch::randn({2, 4, 8}, torch::kDouble);
  int self_calls = 0, skipped_calls = 0;
  layers::BlockSublayers sublayers;
  sublayers.self_attention = [&](const at::Tensor& t) {
    ++self_calls;
    return block->attention->forward(t);
  };
  sublayers.skipped_self_attention = [&](const at::Tensor&) { ++skipped_calls; };
  sublayers.feed_forward = [&](const at::Tensor& t) { return block->ffn->forward(t); };
  EXPECT_TRUE(block->forward(x, {}, sublayers).hidden.equal(block->forward(x).hidden));
  EXPECT_EQ(self_calls, 0);
  EXPECT_EQ(skipped_calls, 1);
}

TEST(TransformerBlock, GradientsByFiniteDifferences) {
  torch::manual_seed(24);
  for (const Setting& s : {settings()[0], settings()[5]}) {
    SCOPED_TRACE(describe(s, BlockPaths{}));
    TransformerBlock block = make_block(s);
    at::Tensor x = torch::randn({2, 4, 8}, torch::kDouble).requires_grad_();
    BlockInputs in = make_inputs(s, 2, 4);
    std::vector<at::Tensor> inputs{x};
    if (s.cross) inputs.push_back(in.memory->requires_grad_());
    if (s.conditional) inputs.push_back(in.condition->requires_grad_());
    for (auto& p : block->parameters()) inputs.push_back(p);
    // The inputs list shares storage with x, memory, condition and the parameters.
    auto result = testing::gradcheck(
        [&](const std::vector<at::Tensor>& t) { return block->forward(t[0], in).hidden; }, inputs);
    EXPECT_TRUE(result.ok) << result.message;
  }
}

TEST(TransformerBlock, MissingInputsAreOneLineErrors) {
  Setting s;
  s.cross = true;
  s.conditional = true;
  TransformerBlock block = make_block(s);
  const at::Tensor x = torch::randn({2, 4, 8}, torch::kDouble);
  BlockInputs in = make_inputs(s, 2, 4);
  BlockInputs no_memory = in;
  no_memory.memory.reset();
  std::string message = testing::error_of([&] { block->forward(x, no_memory); });
  EXPECT_NE(message.find("cross attention needs the encoder memory"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  BlockInputs no_condition = in;
  no_condition.condition.reset();
  message = testing::error_of([&] { block->forward(x, no_condition); });
  EXPECT_NE(message.find("conditional layer norm: a condition [batch, 3] is required"), std::string::npos)
      << message;
  BlockInputs bad_condition = in;
  bad_condition.condition = torch::randn({2, 4}, torch::kDouble);
  message = testing::error_of([&] { block->forward(x, bad_condition); });
  EXPECT_NE(message.find("condition must be [2, 3], got [2, 4]"), std::string::npos) << message;
}

}  // namespace
}  // namespace attnkit
