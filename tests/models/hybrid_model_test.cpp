// Hybrids (issue 45): per-layer attention specs (TransformerConfig::layer_attention_specs, and
// layer_cross_attention_specs for decoder blocks). The JSON keys appear only when set (every
// existing config file reads and writes as before), validate() names bad overrides, a model with
// mixed kinds builds them layer by layer, saves and reloads in attnkit format with equal outputs,
// trains, and the Hugging Face writers refuse it in one line. Cached decoding of hybrids:
// tests/decode/incremental_test.cpp.
#include "attnkit/error.h"
#include "attnkit/io/huggingface.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_config.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>

namespace {

using namespace attnkit;
using attnkit::layers::AttentionSpec;
using attnkit::models::TransformerConfig;
using attnkit::testing::error_of;

AttentionSpec causal(const std::string& kind) {
  AttentionSpec spec = AttentionSpec::parse(kind);
  spec.causal = true;
  return spec;
}

// GPT-2 of 4 layers: softmax, hedgehog, cosFormer, softmax.
TransformerConfig hybrid_gpt2() {
  TransformerConfig c = TransformerConfig::gpt2(31, 16, 4, 2);
  c.dropout = 0.0;
  c.max_positions = 32;
  c.layer_attention_specs[1] = causal("linear:hedgehog:4");
  c.layer_attention_specs[2] = causal("cosformer");
  return c;
}

models::HeadsConfig lm_heads() {
  models::HeadsConfig h;
  h.causal_lm = true;
  return h;
}

TEST(HybridConfig, JsonKeysOnlyWhenSetAndRoundTrip) {
  const TransformerConfig plain = TransformerConfig::gpt2(31, 16, 4, 2);
  nlohmann::json j = plain;
  EXPECT_FALSE(j.contains("layer_attention_specs"));
  EXPECT_FALSE(j.contains("layer_cross_attention_specs"));
  const TransformerConfig c = hybrid_gpt2();
  j = c;
  ASSERT_TRUE(j.contains("layer_attention_specs"));
  EXPECT_EQ(j["layer_attention_specs"]["1"]["kind"], "linear:hedgehog:4");
  EXPECT_EQ(j["layer_attention_specs"]["2"]["kind"], "cosformer");
  const TransformerConfig back = j.get<TransformerConfig>();
  EXPECT_EQ(nlohmann::json(back).dump(), j.dump());
  EXPECT_EQ(back.layer_attention(0).to_string(), "softmax");
  EXPECT_EQ(back.layer_attention(1).to_string(), "linear:hedgehog:4");
  EXPECT_EQ(back.layer_attention(2).to_string(), "cosformer");
  EXPECT_TRUE(back.layer_attention(2).causal);
  // Strict: a bad layer key or an unknown field of an override is an error naming it.
  nlohmann::json bad = j;
  bad["layer_attention_specs"]["x"] = bad["layer_attention_specs"]["1"];
  EXPECT_NE(error_of([&] { bad.get<TransformerConfig>(); }).find("layer_attention_specs: layer 'x'"),
            std::string::npos);
  bad = j;
  bad["layer_attention_specs"]["1"]["colour"] = 1;
  const std::string e = error_of([&] { bad.get<TransformerConfig>(); });
  EXPECT_NE(e.find("layer_attention_specs: layer 1"), std::string::npos) << e;
  EXPECT_NE(e.find("colour"), std::string::npos) << e;
}

TEST(HybridConfig, ValidateNamesBadOverrides) {
  TransformerConfig c = hybrid_gpt2();
  c.layer_attention_specs[4] = causal("linear:elu");
  EXPECT_NE(error_of([&] { c.validate(); }).find("layer_attention_specs: layer 4 outside [0, 4)"),
            std::string::npos);
  c = hybrid_gpt2();
  c.layer_attention_specs[3] = AttentionSpec::parse("linear:elu");  // not causal
  EXPECT_NE(error_of([&] { c.validate(); }).find("causal"), std::string::npos);
  c = hybrid_gpt2();
  c.layer_cross_attention_specs[0] = AttentionSpec::parse("linear:elu");
  EXPECT_NE(error_of([&] { c.validate(); }).find("without cross_attention"), std::string::npos);
  c = hybrid_gpt2();
  c.layer_attention_specs[0] = causal("softmax");
  c.layer_attention_specs[0].kv_heads = 3;
  EXPECT_NE(error_of([&] { c.validate(); }).find("kv_heads 3"), std::string::npos);
  EXPECT_NO_THROW(hybrid_gpt2().validate());
}

TEST(HybridModel, BuildsEachLayersKindSavesReloadsAndTrains) {
  torch::manual_seed(3);
  auto model = models::TaskModel(hybrid_gpt2(), lm_heads());
  model->eval();
  EXPECT_EQ(model->transformer->attention(0)->options().spec().to_string(), "softmax");
  EXPECT_EQ(model->transformer->attention(1)->options().spec().to_string(), "linear:hedgehog:4");
  EXPECT_EQ(model->transformer->attention(2)->options().spec().to_string(), "cosformer");
  EXPECT_EQ(model->transformer->attention(3)->options().spec().to_string(), "softmax");
  // The hedgehog layer's feature maps are parameters of that layer alone.
  int64_t maps = 0;
  for (const auto& p : model->named_parameters())
    if (p.key().find("feature_map_") != std::string::npos) {
      ++maps;
      EXPECT_NE(p.key().find("blocks.1."), std::string::npos) << p.key();
    }
  EXPECT_EQ(maps, 2);

  models::TaskInputs in;
  in.input_ids = torch::randint(31, {2, 12}, torch::kLong);
  const at::Tensor before = model->forward(in).causal_lm_logits;
  const auto dir = attnkit::testing::scratch_directory("hybrid");
  io::save_attnkit_model(model, dir.string());
  io::LoadedModel loaded = io::load_model(dir.string());
  EXPECT_EQ(nlohmann::json(loaded.config).dump(), nlohmann::json(model->config()).dump());
  EXPECT_TRUE(torch::equal(loaded.task->forward(in).causal_lm_logits, before));

  // Trains: a few Adam steps on next-token loss over one batch lower it.
  model->train();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-2));
  auto loss = [&] {
    const at::Tensor logits = model->forward(in).causal_lm_logits;
    return torch::nn::functional::cross_entropy(logits.narrow(1, 0, 11).reshape({-1, 31}),
                                                in.input_ids.narrow(1, 1, 11).reshape({-1}));
  };
  const double first = loss().item<double>();
  for (int i = 0; i < 30; ++i) {
    adam.zero_grad();
    loss().backward();
    adam.step();
  }
  EXPECT_LT(loss().item<double>(), 0.7 * first);
}

TEST(HybridModel, HuggingFaceWritersRefuseInOneLine) {
  const std::string e = error_of([] { io::config_to_huggingface(hybrid_gpt2(), lm_heads()); });
  EXPECT_NE(e.find("cannot write a Hugging Face 'gpt2' config"), std::string::npos) << e;
  EXPECT_NE(e.find("hybrid"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(HybridModel, EncoderDecoderCrossOverridesReloadEqual) {
  auto config = models::EncoderDecoderConfig::transformer(29, 29, 16, 2, 2, 32);
  config.encoder.dropout = config.decoder.dropout = 0.0;
  config.encoder.layer_attention_specs[1] = AttentionSpec::parse("linear:t2r");
  config.decoder.layer_attention_specs[0] = causal("linear:elu");
  config.decoder.layer_cross_attention_specs[1] = AttentionSpec::parse("cosformer");
  torch::manual_seed(5);
  auto model = std::make_shared<models::EncoderDecoderModelImpl>(config);
  model->eval();
  EXPECT_EQ(model->encoder->attention(1)->options().spec().to_string(), "linear:t2r");
  EXPECT_EQ(model->decoder->attention(0)->options().spec().to_string(), "linear:elu");
  EXPECT_EQ(model->decoder->attention(0, models::AttentionSite::Cross)->options().spec().to_string(), "softmax");
  EXPECT_EQ(model->decoder->attention(1, models::AttentionSite::Cross)->options().spec().to_string(), "cosformer");
  const at::Tensor source = torch::randint(1, 29, {2, 7}, torch::kLong);
  const at::Tensor target = torch::randint(1, 29, {2, 5}, torch::kLong);
  const at::Tensor before = model->forward(source, target);
  const auto dir = attnkit::testing::scratch_directory("hybrid");
  io::save_attnkit_model(*model, dir.string());
  io::LoadedModel loaded = io::load_model(dir.string());
  auto& back = loaded.model->encoder_decoder("test");
  EXPECT_EQ(nlohmann::json(back.config()).dump(), nlohmann::json(config).dump());
  EXPECT_TRUE(torch::equal(back.forward(source, target), before));
}

}  // namespace
