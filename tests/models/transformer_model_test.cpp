// Models built from one TransformerBlock: the families' presets run, ALBERT's unshare() keeps the
// outputs, Conditional LayerNorm equals LayerNorm at init, and every attention kind trains a step.
#include "attnkit/error.h"
#include "attnkit/layers/conditional_layer_norm.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/models/transformer_model.h"
#include "attnkit/ops/variants.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace {

using attnkit::layers::AttentionSpec;
using attnkit::models::ModelInputs;
using attnkit::models::TransformerConfig;
using attnkit::models::TransformerModel;

at::Tensor random_ids(int64_t batch, int64_t n, int64_t vocab) {
  return torch::randint(vocab, {batch, n}, torch::kLong);
}

TEST(TransformerModel, AlbertUnshareKeepsOutputs) {
  torch::manual_seed(1);
  auto config = TransformerConfig::albert(50, 8, 16, 3, 4, 24);
  TransformerModel model(config);
  model->eval();
  ModelInputs in;
  in.input_ids = random_ids(2, 7, 50);
  in.output_hidden_states = true;
  auto before = model->forward(in);
  EXPECT_EQ(model->block_count(), 1);
  model->unshare();
  EXPECT_EQ(model->block_count(), 3);
  auto after = model->forward(in);
  EXPECT_TRUE(torch::equal(before.last_hidden_state, after.last_hidden_state));
  ASSERT_EQ(after.hidden_states.size(), 4u);
  // The copies are independent: changing one layer changes only what follows it.
  {
    torch::NoGradGuard no_grad;
    model->block(2)->ffn->fc_out->bias.add_(1.0);
  }
  auto changed = model->forward(in);
  EXPECT_TRUE(torch::equal(changed.hidden_states[2], after.hidden_states[2]));
  EXPECT_FALSE(torch::equal(changed.hidden_states[3], after.hidden_states[3]));
}

TEST(TransformerModel, ConditionalLayerNormEqualsLayerNormAtInit) {
  torch::manual_seed(2);
  attnkit::layers::ConditionalLayerNorm cln(
      attnkit::layers::ConditionalLayerNormOptions(12).eps(1e-5).condition_size(5));
  {
    torch::NoGradGuard no_grad;
    cln->weight.uniform_(0.5, 1.5);
    cln->bias.uniform_(-1, 1);
  }
  at::Tensor x = torch::randn({3, 4, 12});
  at::Tensor c = torch::randn({3, 5});
  at::Tensor expected = at::layer_norm(x, {12}, cln->weight, cln->bias, 1e-5);
  EXPECT_TRUE(torch::allclose(cln->forward(x, c), expected, 1e-6, 1e-6));
  {
    torch::NoGradGuard no_grad;
    cln->condition_to_bias->weight.fill_(0.1);
  }
  EXPECT_FALSE(torch::allclose(cln->forward(x, c), expected, 1e-6, 1e-6));
  EXPECT_THROW(cln->forward(x), attnkit::Error);
}

TEST(TransformerModel, Gpt2IsCausal) {
  torch::manual_seed(3);
  TransformerModel model(TransformerConfig::gpt2(40, 16, 2, 2));
  model->eval();
  ModelInputs in;
  in.input_ids = random_ids(1, 9, 40);
  auto a = model->forward(in).last_hidden_state;
  in.input_ids[0][8] = (in.input_ids[0][8].item<int64_t>() + 1) % 40;
  auto b = model->forward(in).last_hidden_state;
  EXPECT_TRUE(torch::allclose(a.slice(1, 0, 8), b.slice(1, 0, 8), 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(a.select(1, 8), b.select(1, 8), 1e-6, 1e-6));
}

TEST(TransformerModel, EveryAttentionKindTrainsOneStep) {
  for (const std::string kind :
       {"softmax", "talking-heads", "linear:elu", "linear:relu", "linear:favor:16:3", "linear:t2r",
        "linear:hedgehog:4", "cosformer", "synthesizer-dense", "synthesizer-random",
        "synthesizer-random-fixed",
        "synthesizer-factorized-dense", "synthesizer-factorized-random",
        "mixture:synthesizer-random+softmax", "mixture:synthesizer-random-fixed+softmax"}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(kind + (causal ? " causal" : ""));
      torch::manual_seed(4);
      auto config = TransformerConfig::bert(30, 16, 2, 2, 32);
      config.attention = AttentionSpec::parse(kind);
      config.attention.causal = causal;
      config.attention.max_length = 16;
      config.attention.key_size = 6;  // independent of hidden / heads
      config.dropout = 0.0;
      TransformerModel model(config);
      torch::optim::SGD sgd(model->parameters(), 0.1);
      ModelInputs in;
      in.input_ids = random_ids(2, 10, 30);
      in.attention_mask = torch::ones({2, 10}, torch::kLong);
      in.attention_mask->slice(1, 8).select(0, 1).zero_();
      auto out = model->forward(in);
      at::Tensor loss = out.last_hidden_state.pow(2).mean();
      ASSERT_TRUE(std::isfinite(loss.item<double>()));
      sgd.zero_grad();
      loss.backward();
      sgd.step();
      auto again = model->forward(in).last_hidden_state.pow(2).mean();
      EXPECT_NE(loss.item<double>(), again.item<double>());
      // Padded keys change nothing for the real tokens of row 1.
      at::Tensor ids = in.input_ids.clone();
      ids[1][9] = (ids[1][9].item<int64_t>() + 1) % 30;
      ModelInputs other = in;
      other.input_ids = ids;
      model->eval();
      auto x = model->forward(in).last_hidden_state;
      auto y = model->forward(other).last_hidden_state;
      EXPECT_TRUE(torch::allclose(x[1].slice(0, 0, 8), y[1].slice(0, 0, 8), 1e-5, 1e-5));
    }
  }
}

// The ops catalogue's traits hold for the layer too: every catalogue kind builds through the
// grammar, has q/k projections exactly when it reads q/k, and takes a general mask exactly when
// the catalogue says so.
TEST(MultiHeadAttention, CatalogueKindsAndTraitsMatchTheLayer) {
  using attnkit::layers::AttentionInputs;
  using attnkit::layers::MultiHeadAttention;
  using attnkit::layers::MultiHeadAttentionOptions;
  ASSERT_GE(attnkit::ops::attention_variants().size(), 12u);
  for (const auto& info : attnkit::ops::attention_variants()) {
    SCOPED_TRACE(info.kind);
    torch::manual_seed(3);
    auto spec = AttentionSpec::parse(info.kind);
    EXPECT_EQ(spec.to_string(), info.kind);
    spec.max_length = 8;
    MultiHeadAttention mha(MultiHeadAttentionOptions(16, 2).spec(spec));
    EXPECT_EQ(static_cast<bool>(mha->q), info.reads_queries);
    EXPECT_EQ(static_cast<bool>(mha->k), info.reads_keys);
    auto x = torch::randn({2, 6, 16});
    AttentionInputs in;
    in.mask = torch::rand({2, 1, 6, 6}).gt(0.3);
    if (info.general_mask) {
      AttentionInputs none;
      auto masked = mha->forward(x, in).output, unmasked = mha->forward(x, none).output;
      EXPECT_TRUE(masked.isfinite().all().item<bool>());
      EXPECT_FALSE(torch::allclose(masked, unmasked));
    } else {
      EXPECT_THROW(mha->forward(x, in), attnkit::Error);
    }
  }
}

// Tay et al.'s fixed Random Synthesizer: the alignment is a seeded buffer that no optimiser
// step moves, shared by ALBERT's layers until unshare(), and it is what the layer attends with.
TEST(MultiHeadAttention, FixedRandomSynthesizerAlignmentIsNeverTrained) {
  torch::manual_seed(7);
  auto config = TransformerConfig::bert(30, 16, 2, 2, 32);
  config.attention = AttentionSpec::parse("synthesizer-random-fixed");
  config.attention.max_length = 12;
  config.dropout = 0.0;
  TransformerModel model(config);
  const std::string name = "blocks.0.attention.fixed_random_logits";
  auto buffers = model->named_buffers();
  ASSERT_TRUE(buffers.contains(name));
  EXPECT_FALSE(model->named_parameters().contains(name));
  EXPECT_FALSE(model->named_parameters().contains("blocks.0.attention.random_logits"));
  const at::Tensor alignment = buffers[name].clone();
  EXPECT_EQ(alignment.sizes(), (at::IntArrayRef{2, 12, 12}));
  EXPECT_GT(alignment.std().item<double>(), 0.5);  // far from uniform attention
  // Seeded like every initial value: the same seed draws the same alignment, another seed not.
  torch::manual_seed(7);
  TransformerModel same(config);
  EXPECT_TRUE(torch::equal(same->named_buffers()[name], alignment));
  torch::manual_seed(8);
  TransformerModel other(config);
  EXPECT_FALSE(torch::equal(other->named_buffers()[name], alignment));

  torch::optim::Adam adam(model->parameters(), 0.01);
  ModelInputs in;
  in.input_ids = random_ids(2, 10, 30);
  const at::Tensor v_before = model->named_parameters()["blocks.0.attention.v.weight"].clone();
  for (int step = 0; step < 3; ++step) {
    adam.zero_grad();
    model->forward(in).last_hidden_state.pow(2).mean().backward();
    adam.step();
  }
  EXPECT_TRUE(torch::equal(model->named_buffers()[name], alignment));
  EXPECT_FALSE(torch::equal(model->named_parameters()["blocks.0.attention.v.weight"], v_before));
  // The layer attends with it: another alignment, another output.
  model->eval();
  auto out = model->forward(in).last_hidden_state;
  {
    torch::NoGradGuard no_grad;
    model->named_buffers()[name].normal_();
  }
  EXPECT_FALSE(torch::allclose(model->forward(in).last_hidden_state, out, 1e-5, 1e-5));

  // ALBERT: unshare() copies the shared alignment into every layer.
  auto albert = TransformerConfig::albert(30, 8, 16, 3, 2, 24);
  albert.attention = config.attention;
  albert.dropout = 0.0;
  TransformerModel shared(albert);
  shared->eval();
  auto before = shared->forward(in).last_hidden_state;
  shared->unshare();
  EXPECT_TRUE(torch::equal(shared->forward(in).last_hidden_state, before));
}

TEST(TransformerModel, PathsSwitchOffSkipMlpAndNorm) {
  torch::manual_seed(5);
  auto config = TransformerConfig::bert(30, 16, 1, 2, 32);
  config.dropout = 0.0;
  config.pooler = false;
  TransformerModel model(config);
  model->eval();
  model->set_paths({/*skip=*/false, /*mlp=*/false, /*layer_norm=*/false});
  ModelInputs in;
  in.input_ids = random_ids(1, 6, 30);
  in.output_hidden_states = true;
  auto out = model->forward(in);
  // Pure attention: the layer output is the attention of the embedding output.
  auto expected = model->block(0)->attention->forward(out.hidden_states[0]).output;
  EXPECT_TRUE(torch::allclose(out.last_hidden_state, expected, 1e-6, 1e-6));
}

TEST(TransformerModel, BadInputIsAClearError) {
  TransformerModel model(TransformerConfig::bert(30, 16, 1, 2, 32));
  ModelInputs in;
  in.input_ids = torch::full({1, 4}, 30, torch::kLong);
  EXPECT_THROW(model->forward(in), attnkit::Error);
  in.input_ids = torch::zeros({1, 600}, torch::kLong);
  EXPECT_THROW(model->forward(in), attnkit::Error);
  auto config = TransformerConfig::bert(30, 15, 1, 2, 32);
  EXPECT_THROW(TransformerModel{config}, attnkit::Error);
  config = TransformerConfig::bert(30, 16, 1, 2, 32);
  config.attention = AttentionSpec::parse("cosformer");
  TransformerModel cos(config);
  in.input_ids = torch::zeros({1, 4}, torch::kLong);
  in.mask = torch::ones({1, 1, 4, 4}, torch::kBool);
  EXPECT_THROW(cos->forward(in), attnkit::Error);
  EXPECT_THROW(AttentionSpec::parse("mixture:linear+softmax"), attnkit::Error);
  EXPECT_THROW(AttentionSpec::parse("quadratic"), attnkit::Error);
}

TEST(TransformerModel, AttentionDropoutIsReproducibleAndOffInEval) {
  torch::manual_seed(11);
  auto config = TransformerConfig::bert(50, 16, 2, 4, 32);
  config.dropout = 0.0;
  config.attention_dropout = 0.5;
  TransformerModel model(config);
  ModelInputs in;
  in.input_ids = random_ids(2, 9, 50);
  model->train();
  auto run = [&](uint64_t seed) {
    torch::manual_seed(seed);
    return model->forward(in).last_hidden_state;
  };
  auto a = run(1), b = run(1), c = run(2);
  EXPECT_TRUE(torch::equal(a, b));  // the generator's state decides the dropped weights
  EXPECT_FALSE(torch::allclose(a, c, 1e-4, 1e-4));
  model->eval();
  auto e1 = run(1), e2 = run(2);
  EXPECT_TRUE(torch::equal(e1, e2));  // no dropout in eval mode
  EXPECT_FALSE(torch::allclose(a, e1, 1e-4, 1e-4));
  config.attention_dropout = 1.0;
  EXPECT_THROW(TransformerModel{config}, attnkit::Error);
}

TEST(TransformerConfig, JsonRoundTripIsStrict) {
  auto config = TransformerConfig::albert(50, 8, 16, 4, 4, 24);
  config.layer_groups = 2;
  config.attention = AttentionSpec::parse("mixture:synthesizer-random+softmax");
  config.attention.key_size = 6;
  config.attention.causal = true;
  config.attention.max_length = 33;
  nlohmann::json j = config;
  const auto back = j.get<TransformerConfig>();
  EXPECT_EQ(nlohmann::json(back), j);
  EXPECT_EQ(back.attention.mixture.size(), 2u);
  EXPECT_EQ(back.attention.key_size, 6);
  EXPECT_TRUE(back.attention.causal);
  j["attention"]["kind"] = "linear:relu";
  EXPECT_EQ(j.get<TransformerConfig>().attention.feature_map.kind, attnkit::FeatureMapKind::Relu);
  j["attention"]["kind"] = "linear:favor:32:9";
  EXPECT_EQ(j.get<TransformerConfig>().attention.to_string(), "linear:favor:32:9");
  // talking-heads is softmax with the talking_heads switch, written back as its kind.
  j["attention"]["kind"] = "talking-heads";
  j["attention"]["talking_heads"] = true;
  const auto talking = j.get<TransformerConfig>();
  EXPECT_EQ(talking.attention.kind, attnkit::AttentionKind::Softmax);
  EXPECT_TRUE(talking.attention.talking_heads);
  EXPECT_EQ(nlohmann::json(talking)["attention"]["kind"], "talking-heads");
  j["attention"]["talking_heads"] = false;
  EXPECT_THROW(j.get<TransformerConfig>(), attnkit::Error);
  j["attention"]["talking_heads"] = true;
  j["attention"]["kind"] = "linear";  // the old catalogue name is an alias
  EXPECT_EQ(j.get<TransformerConfig>().attention.to_string(), "linear:elu");
  j["attention"]["kind"] = "linear:softplus";
  EXPECT_THROW(j.get<TransformerConfig>(), attnkit::Error);
  j["attention"]["heads"] = 3;
  EXPECT_THROW(j.get<TransformerConfig>(), attnkit::Error);
  j = config;
  j["hidden"] = "wide";
  EXPECT_THROW(j.get<TransformerConfig>(), attnkit::Error);
}

// The trained feature maps (t2r, hedgehog): one weight [heads, M, key_size] and bias [heads, M]
// per attention layer, trained with the rest (they receive gradients), hedgehog with M = d
// starting at the identity; physical head pruning removes a pruned head's map with it.
TEST(TransformerModel, TrainedFeatureMapsArePerHeadParameters) {
  torch::manual_seed(5);
  auto config = TransformerConfig::bert(30, 16, 2, 2, 32);
  config.attention = AttentionSpec::parse("linear:t2r:3");
  config.attention.causal = true;
  config.dropout = 0.0;
  TransformerModel model(config);
  auto params = model->named_parameters();
  ASSERT_TRUE(params.contains("blocks.0.attention.feature_map_weight"));
  EXPECT_EQ(params["blocks.0.attention.feature_map_weight"].sizes(), (at::IntArrayRef{2, 3, 8}));
  EXPECT_EQ(params["blocks.1.attention.feature_map_bias"].sizes(), (at::IntArrayRef{2, 3}));
  ModelInputs in;
  in.input_ids = random_ids(2, 7, 30);
  model->forward(in).last_hidden_state.pow(2).mean().backward();
  EXPECT_GT(params["blocks.0.attention.feature_map_weight"].grad().abs().sum().item<double>(), 0.0);
  EXPECT_GT(params["blocks.1.attention.feature_map_bias"].grad().abs().sum().item<double>(), 0.0);

  config.attention = AttentionSpec::parse("linear:hedgehog");
  TransformerModel hedgehog(config);
  const at::Tensor w = hedgehog->named_parameters()["blocks.1.attention.feature_map_weight"];
  EXPECT_TRUE(torch::equal(w, torch::eye(8).unsqueeze(0).repeat({2, 1, 1})));

  // Pruning head 0 of layer 0 keeps head 1's map, and the outputs equal the gated model's.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : hedgehog->named_parameters())
      if (p.key().find("feature_map_") != std::string::npos) p.value().add_(torch::randn_like(p.value()) * 0.3);
  }
  hedgehog->eval();
  const std::string name = "blocks.0.attention.feature_map_weight";
  const at::Tensor kept = hedgehog->named_parameters()[name][1].clone();
  hedgehog->set_head_gates({torch::tensor({0.0f, 1.0f}), torch::ones({2})});
  const at::Tensor gated = hedgehog->forward(in).last_hidden_state;
  hedgehog->set_head_gates({});
  hedgehog->prune_heads({{0, {0}}});
  const at::Tensor pruned_w = hedgehog->named_parameters()[name];
  ASSERT_EQ(pruned_w.size(0), 1);
  EXPECT_TRUE(torch::equal(pruned_w[0], kept));
  EXPECT_TRUE(torch::allclose(hedgehog->forward(in).last_hidden_state, gated, 1e-5, 1e-5));
}

}  // namespace
