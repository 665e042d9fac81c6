// Physical head pruning (Michel et al. 2019): for every attention kind in the variant table, a
// layer with heads removed gives the outputs of the unpruned layer with those heads' gates ξ at 0
// (float64, 1e-5 required; only rounding separates them). Then the models: BERT-style stacks,
// ALBERT's shared blocks (gates per depth), GPT-2 (causal), the encoder-decoder's three
// attentions, and the config's pruned_heads applied at construction.
#include "attnkit/error.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/transformer_model.h"
#include "attnkit/ops/variants.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace {

using attnkit::layers::AttentionInputs;
using attnkit::layers::AttentionSpec;
using attnkit::layers::MultiHeadAttention;
using attnkit::layers::MultiHeadAttentionOptions;
using attnkit::models::AttentionSite;
using attnkit::models::HeadIndices;
using attnkit::models::ModelInputs;
using attnkit::models::TransformerConfig;
using attnkit::models::TransformerModel;

constexpr double kTolerance = 1e-5;

double max_error(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return 1e300;
  return (a - b).abs().max().item<double>();
}

// Gates with zeros at `removed` (unpruned numbering).
at::Tensor gates_without(int64_t heads, const std::vector<int64_t>& removed) {
  at::Tensor g = torch::ones({heads}, torch::kDouble);
  for (int64_t h : removed) g[h] = 0.0;
  return g;
}

void randomize(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  module.to(torch::kDouble);
  for (auto& p : module.parameters()) p.normal_(0.0, 0.4);
}

std::vector<std::string> every_kind() {
  std::vector<std::string> kinds;
  for (const auto& v : attnkit::ops::attention_variants()) kinds.push_back(v.kind);
  return kinds;
}

TEST(HeadPruning, EveryKindMaskEqualsRemoval) {
  const int64_t hidden = 12, heads = 4, batch = 2, L = 6;
  for (const auto& kind : every_kind()) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(kind + (causal ? " causal" : ""));
      torch::manual_seed(3);
      AttentionSpec spec = AttentionSpec::parse(kind);
      spec.causal = causal;
      spec.max_length = 16;
      MultiHeadAttention mha(MultiHeadAttentionOptions(hidden, heads).spec(spec));
      randomize(*mha);
      mha->eval();
      at::Tensor x = torch::randn({batch, L, hidden}, torch::kDouble);
      AttentionInputs in;
      at::Tensor padding = torch::ones({batch, L}, torch::kBool);
      padding[1].slice(0, L - 2).fill_(false);
      in.key_padding = padding;
      in.need_weights = true;
      const std::vector<int64_t> removed = {1, 3};
      mha->set_head_gates(gates_without(heads, removed));
      const auto masked = mha->forward(x, in);
      mha->set_head_gates(at::Tensor());
      mha->prune_heads(removed);
      EXPECT_EQ(mha->heads(), 2);
      EXPECT_EQ(mha->pruned_heads(), removed);
      const auto pruned = mha->forward(x, in);
      EXPECT_LT(max_error(pruned.output, masked.output), kTolerance);
      // The kept heads' weights are the unpruned layer's heads 0 and 2.
      EXPECT_LT(max_error(pruned.weights,
                          masked.weights.index_select(1, torch::tensor({0, 2}, torch::kLong))),
                kTolerance);
      // Pruning again in the unpruned numbering: head 3 is gone already, head 2 goes now.
      mha->prune_heads({2, 3});
      EXPECT_EQ(mha->heads(), 1);
      EXPECT_EQ(mha->pruned_heads(), (std::vector<int64_t>{1, 2, 3}));
      const auto pruned_more = mha->forward(x, in);
      // Gates on the remaining head only: same as the unpruned layer with three gates at 0.
      mha->set_head_gates(torch::ones({1}, torch::kDouble));
      EXPECT_LT(max_error(mha->forward(x, in).output, pruned_more.output), kTolerance);
      // Every head removed: the output projection's bias alone.
      mha->prune_heads({0});
      EXPECT_EQ(mha->heads(), 0);
      const auto empty = mha->forward(x, in);
      EXPECT_LT(max_error(empty.output, mha->o->bias.expand({batch, L, hidden})), kTolerance);
    }
  }
}

TEST(HeadPruning, CrossAttentionMaskEqualsRemoval) {
  for (const std::string kind : {"softmax", "linear:elu", "cosformer", "talking-heads"}) {
    SCOPED_TRACE(kind);
    torch::manual_seed(4);
    AttentionSpec spec = AttentionSpec::parse(kind);
    MultiHeadAttention mha(MultiHeadAttentionOptions(8, 4).memory_hidden(6).spec(spec));
    randomize(*mha);
    at::Tensor x = torch::randn({2, 5, 8}, torch::kDouble);
    at::Tensor memory = torch::randn({2, 7, 6}, torch::kDouble);
    mha->set_head_gates(gates_without(4, {0}));
    const auto masked = mha->forward(x, {}, memory).output;
    mha->set_head_gates(at::Tensor());
    mha->prune_heads({0});
    EXPECT_LT(max_error(mha->forward(x, {}, memory).output, masked), kTolerance);
  }
}

TEST(HeadPruning, Errors) {
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 4));
  EXPECT_THROW(mha->prune_heads({4}), attnkit::Error);
  EXPECT_THROW(mha->prune_heads({-1}), attnkit::Error);
  TransformerModel model(TransformerConfig::bert(30, 8, 2, 4, 16));
  EXPECT_THROW(model->prune_heads({{2, {0}}}), attnkit::Error);
  EXPECT_THROW(model->prune_heads({{0, {0}}}, AttentionSite::Cross), attnkit::Error);
  EXPECT_THROW(model->set_head_gates({torch::ones({4})}), attnkit::Error);  // one layer of two
  auto config = TransformerConfig::bert(30, 8, 2, 4, 16);
  config.pruned_heads = {{0, {4}}};
  EXPECT_THROW(config.validate(), attnkit::Error);
  EXPECT_THROW(attnkit::models::head_indices_from_json(nlohmann::json::parse(R"({"x": [1]})"), "t"),
               attnkit::Error);
  EXPECT_THROW(attnkit::models::head_indices_from_json(nlohmann::json::parse(R"({"0": [-1]})"), "t"),
               attnkit::Error);
}

ModelInputs inputs_for(const TransformerConfig& c) {
  ModelInputs in;
  in.input_ids = torch::randint(c.vocab_size, {2, 7}, torch::kLong);
  at::Tensor mask = torch::ones({2, 7}, torch::kLong);
  mask[1].slice(0, 5).fill_(0);
  in.attention_mask = mask;
  return in;
}

// Gates per layer from {layer: removed heads} (depth numbering), for a model with `heads` heads.
std::vector<at::Tensor> layer_gates(int64_t layers, int64_t heads, const HeadIndices& removed) {
  std::vector<at::Tensor> gates;
  for (int64_t l = 0; l < layers; ++l) {
    auto it = removed.find(l);
    gates.push_back(gates_without(heads, it == removed.end() ? std::vector<int64_t>{} : it->second));
  }
  return gates;
}

TEST(HeadPruning, ModelsMaskEqualsRemoval) {
  for (const std::string family : {"bert", "gpt2", "bert-linear"}) {
    SCOPED_TRACE(family);
    torch::manual_seed(5);
    TransformerConfig c = family == "gpt2" ? TransformerConfig::gpt2(40, 12, 3, 4)
                                           : TransformerConfig::bert(40, 12, 3, 4, 24);
    if (family == "bert-linear") c.attention = AttentionSpec::parse("linear:favor:16:3");
    c.dropout = c.attention_dropout = 0.0;
    TransformerModel model(c);
    randomize(*model);
    model->eval();
    const ModelInputs in = inputs_for(c);
    const HeadIndices removed = {{0, {1}}, {2, {0, 2, 3}}};
    model->set_head_gates(layer_gates(3, 4, removed));
    const at::Tensor masked = model->forward(in).last_hidden_state;
    model->set_head_gates({});
    model->prune_heads(removed);
    EXPECT_EQ(model->heads_per_layer(), (std::vector<int64_t>{3, 4, 1}));
    EXPECT_EQ(model->config().pruned_heads, removed);
    EXPECT_LT(max_error(model->forward(in).last_hidden_state, masked), kTolerance);
    // The config records the pruning: a model built from it has the same shapes.
    TransformerModel rebuilt(model->config());
    EXPECT_EQ(rebuilt->heads_per_layer(), (std::vector<int64_t>{3, 4, 1}));
    auto from = model->named_parameters();
    for (const auto& p : rebuilt->named_parameters())
      EXPECT_EQ(p.value().sizes(), from[p.key()].sizes()) << p.key();
    // JSON round trip of the config keeps pruned_heads.
    nlohmann::json j = model->config();
    EXPECT_EQ(j.at("pruned_heads"), nlohmann::json::parse(R"({"0": [1], "2": [0, 2, 3]})"));
    EXPECT_EQ(j.get<TransformerConfig>().pruned_heads, removed);
  }
}

TEST(HeadPruning, AlbertGatesPerDepthAndSharedRemoval) {
  torch::manual_seed(6);
  auto c = TransformerConfig::albert(40, 8, 12, 3, 4, 24);
  TransformerModel model(c);
  randomize(*model);
  model->eval();
  const ModelInputs in = inputs_for(c);
  // Different gates per depth give a different output than the same gates at every depth.
  model->set_head_gates(layer_gates(3, 4, {{1, {2}}}));
  const at::Tensor depth1 = model->forward(in).last_hidden_state;
  model->set_head_gates(layer_gates(3, 4, {{0, {2}}, {1, {2}}, {2, {2}}}));
  const at::Tensor everywhere = model->forward(in).last_hidden_state;
  EXPECT_GT(max_error(depth1, everywhere), 1e-3);
  // Removing head 2 of the shared block is masking it at every depth.
  model->set_head_gates({});
  model->prune_heads({{0, {2}}});
  EXPECT_EQ(model->heads_per_layer(), (std::vector<int64_t>{3, 3, 3}));
  EXPECT_LT(max_error(model->forward(in).last_hidden_state, everywhere), kTolerance);
  // unshare() keeps the pruning, now recorded per layer.
  model->unshare();
  EXPECT_EQ(model->config().pruned_heads, (HeadIndices{{0, {2}}, {1, {2}}, {2, {2}}}));
  EXPECT_LT(max_error(model->forward(in).last_hidden_state, everywhere), kTolerance);
}

TEST(HeadPruning, EncoderDecoderThreeAttentions) {
  torch::manual_seed(7);
  auto c = attnkit::models::EncoderDecoderConfig::transformer(30, 30, 12, 2, 4, 24);
  c.encoder.dropout = c.decoder.dropout = 0.0;
  attnkit::models::EncoderDecoderModel model(c);
  randomize(*model);
  model->eval();
  at::Tensor source = torch::randint(30, {2, 6}, torch::kLong);
  at::Tensor target = torch::randint(30, {2, 5}, torch::kLong);
  const HeadIndices enc = {{1, {0}}}, dec = {{0, {3}}}, cross = {{0, {1, 2}}, {1, {0}}};
  model->encoder->set_head_gates(layer_gates(2, 4, enc));
  model->decoder->set_head_gates(layer_gates(2, 4, dec));
  model->decoder->set_head_gates(layer_gates(2, 4, cross), AttentionSite::Cross);
  const at::Tensor masked = model->forward(source, target);
  model->encoder->set_head_gates({});
  model->decoder->set_head_gates({});
  model->decoder->set_head_gates({}, AttentionSite::Cross);
  model->prune_heads(enc, dec, cross);
  EXPECT_EQ(model->decoder->heads_per_layer(AttentionSite::Cross), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(model->config().decoder.pruned_cross_heads, cross);
  EXPECT_LT(max_error(model->forward(source, target), masked), kTolerance);
  // The config (JSON) rebuilds the same shapes.
  nlohmann::json j = model->config();
  attnkit::models::EncoderDecoderModel rebuilt(j.get<attnkit::models::EncoderDecoderConfig>());
  auto from = model->named_parameters();
  for (const auto& p : rebuilt->named_parameters())
    EXPECT_EQ(p.value().sizes(), from[p.key()].sizes()) << p.key();
}

// Grouped-query attention (the Llama families): 6 query heads reading 2 key/value heads. Removing
// query heads inside groups (uneven groups), then a whole group, gives the gated outputs; the
// removed group's rows of k and v go; the uniform case stays grouped.
TEST(HeadPruning, GroupedQueryHeadsAndWholeGroups) {
  const int64_t hidden = 12, heads = 6, batch = 2, L = 7;
  AttentionSpec spec = AttentionSpec::parse("softmax");
  spec.causal = true;
  spec.kv_heads = 2;
  spec.key_size = spec.value_size = 4;
  torch::manual_seed(5);
  MultiHeadAttention full(MultiHeadAttentionOptions(hidden, heads).spec(spec));
  randomize(*full);
  MultiHeadAttention pruned(MultiHeadAttentionOptions(hidden, heads).spec(spec));
  pruned->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    auto from = full->named_parameters();
    for (auto& p : pruned->named_parameters()) p.value().copy_(from[p.key()]);
  }
  const at::Tensor x = torch::randn({batch, L, hidden}, torch::kDouble);
  EXPECT_TRUE(pruned->uniform_groups());
  // Inside groups: head 1 of group 0, head 4 of group 1 -> 2 + 2 heads, still uniform.
  pruned->prune_heads({1, 4});
  EXPECT_EQ(pruned->heads(), 4);
  EXPECT_EQ(pruned->kv_heads(), 2);
  EXPECT_TRUE(pruned->uniform_groups());
  full->set_head_gates(gates_without(heads, {1, 4}));
  EXPECT_LE(max_error(pruned->forward(x).output, full->forward(x).output), kTolerance);
  // Uneven: head 0 too (group 0 keeps one head, group 1 two).
  pruned->prune_heads({0});
  EXPECT_FALSE(pruned->uniform_groups());
  EXPECT_EQ(pruned->kv_of_head(), (std::vector<int64_t>{0, 1, 1}));
  full->set_head_gates(gates_without(heads, {0, 1, 4}));
  EXPECT_LE(max_error(pruned->forward(x).output, full->forward(x).output), kTolerance);
  AttentionInputs with_weights;  // the explicit-weights path of the uneven layer too
  with_weights.need_weights = true;
  EXPECT_LE(max_error(pruned->forward(x, with_weights).output, full->forward(x).output), kTolerance);
  // The whole of group 0 (its last head 2): k and v lose that group's rows.
  pruned->prune_heads({2});
  EXPECT_EQ(pruned->heads(), 2);
  EXPECT_EQ(pruned->kv_heads(), 1);
  EXPECT_EQ(pruned->k->weight.size(0), 4);
  EXPECT_EQ(pruned->v->weight.size(0), 4);
  EXPECT_TRUE(pruned->uniform_groups());
  full->set_head_gates(gates_without(heads, {0, 1, 2, 4}));
  EXPECT_LE(max_error(pruned->forward(x).output, full->forward(x).output), kTolerance);
  EXPECT_EQ(pruned->pruned_heads(), (std::vector<int64_t>{0, 1, 2, 4}));
  // Uneven the other way (group 0 keeps 3 heads, group 1 one): kv_of_head 0, 0, 0, 1, on both
  // the fused path and the explicit-weights path.
  MultiHeadAttention uneven(MultiHeadAttentionOptions(hidden, heads).spec(spec));
  uneven->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    auto from = full->named_parameters();
    for (auto& p : uneven->named_parameters()) p.value().copy_(from[p.key()]);
  }
  uneven->prune_heads({4, 5});
  EXPECT_EQ(uneven->kv_of_head(), (std::vector<int64_t>{0, 0, 0, 1}));
  full->set_head_gates(gates_without(heads, {4, 5}));
  const at::Tensor expected = full->forward(x).output;
  AttentionInputs explicit_weights;
  explicit_weights.need_weights = true;
  EXPECT_LE(max_error(uneven->forward(x).output, expected), kTolerance);
  EXPECT_LE(max_error(uneven->forward(x, explicit_weights).output, expected), kTolerance);
}

}  // namespace
