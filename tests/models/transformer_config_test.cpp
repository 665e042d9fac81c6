// Named TransformerConfig presets (models::preset), shared by `analyze collapse --random` and
// `train --model.family`.
#include "attnkit/models/transformer_config.h"
#include "attnkit/models/transformer_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace {

using namespace attnkit::models;
using attnkit::testing::error_of;

TEST(Presets, NamesAndDefaults) {
  EXPECT_EQ(preset_names(), (std::vector<std::string>{"bert", "albert", "gpt2", "roberta"}));
  EXPECT_TRUE(is_preset("gpt2"));
  EXPECT_FALSE(is_preset("GPT2"));
  const TransformerConfig c = preset("bert");
  EXPECT_EQ(c.family, ModelFamily::Bert);
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.layers, 12);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.intermediate, 256);  // 4 x hidden
  EXPECT_EQ(c.embedding_size, 0);
  EXPECT_FALSE(c.norm_first);
  EXPECT_FALSE(c.attention.causal);
}

TEST(Presets, FamiliesKeepTheirConventionsAtTheGivenSizes) {
  const PresetSizes sizes{50, 16, 3, 2, 40, 0};
  const TransformerConfig gpt2 = preset("gpt2", sizes);
  EXPECT_EQ(gpt2.family, ModelFamily::Gpt2);
  EXPECT_EQ(gpt2.intermediate, 40);
  EXPECT_TRUE(gpt2.norm_first);
  EXPECT_TRUE(gpt2.final_layer_norm);
  EXPECT_TRUE(gpt2.attention.causal);
  EXPECT_EQ(gpt2.type_vocab_size, 0);
  const TransformerConfig albert = preset("albert", sizes);
  EXPECT_TRUE(albert.share_layers);
  EXPECT_EQ(albert.embedding_size, 16);  // E = H unless given
  EXPECT_EQ(albert.activation, attnkit::layers::Activation::GeluTanh);
  const TransformerConfig factorised = preset("albert", {50, 16, 3, 2, 0, 8});
  EXPECT_EQ(factorised.embedding_size, 8);
  EXPECT_EQ(factorised.intermediate, 64);
  EXPECT_EQ(preset("bert", {50, 16, 3, 2, 0, 8}).embedding_size, 8);  // any family may factorise
  for (const auto& name : preset_names()) {
    const TransformerConfig c = preset(name, sizes);
    EXPECT_NO_THROW(c.validate()) << name;
    EXPECT_EQ(c.layers, 3) << name;
    EXPECT_EQ(c.heads, 2) << name;
    EXPECT_EQ(c.vocab_size, 50) << name;
  }
}

TEST(Presets, BuildModelsOfTheirSize) {
  torch::manual_seed(0);
  TransformerModel model(preset("gpt2", {30, 8, 2, 2, 0, 0}));
  ModelInputs inputs;
  inputs.input_ids = torch::randint(30, {1, 5}, torch::kLong);
  EXPECT_EQ(model->forward(inputs).last_hidden_state.sizes(), (std::vector<int64_t>{1, 5, 8}));
}

// RoBERTa's positions count the tokens that are not padding: a left-padded row gives its real
// tokens the outputs of the unpadded row, and a padding token reads position row pad_token_id.
TEST(Presets, RobertaPositionsSkipThePadding) {
  TransformerConfig c = preset("roberta", {30, 8, 2, 2, 0, 0});
  EXPECT_EQ(c.family, ModelFamily::Roberta);
  EXPECT_EQ(c.type_vocab_size, 1);
  EXPECT_EQ(c.pad_token_id, 1);
  EXPECT_EQ(c.position_id_offset, 2);
  EXPECT_TRUE(c.padding_positions);
  EXPECT_FALSE(c.pooler);
  nlohmann::json j;
  to_json(j, c);
  EXPECT_EQ(j["padding_positions"], true);
  TransformerConfig back;
  from_json(j, back);
  EXPECT_TRUE(back.padding_positions);
  EXPECT_EQ(back.position_id_offset, 2);
  torch::manual_seed(0);
  TransformerModel model(c);
  model->eval();
  torch::NoGradGuard no_grad;
  ModelInputs plain, left;
  plain.input_ids = torch::tensor({{0, 5, 6, 2}}, torch::kLong);
  left.input_ids = torch::tensor({{1, 1, 0, 5, 6, 2}}, torch::kLong);
  left.attention_mask = torch::tensor({{0, 0, 1, 1, 1, 1}}, torch::kLong);
  const auto a = model->forward(plain).last_hidden_state;
  const auto b = model->forward(left).last_hidden_state.slice(1, 2);
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-5);
  // A padding token's embedding: its word row + position row 1 + type row 0, normalised.
  auto& e = model->embeddings;
  const auto pad = e->norm->forward(e->token->weight[1] + e->position->weight[1] + e->token_type->weight[0]);
  EXPECT_LT((e->forward(left.input_ids)[0][0] - pad).abs().max().item<double>(), 1e-6);
  c.set_pad_token_id(3);
  EXPECT_EQ(c.position_id_offset, 4);
  c.position_id_offset = 2;
  EXPECT_EQ(error_of([&] { c.validate(); }),
            "config: padding_positions needs learned positions and position_id_offset = "
            "pad_token_id + 1 = 4 (got 2)");
}

TEST(Presets, UnknownNameListsThePresets) {
  EXPECT_EQ(error_of([] { preset("bart"); }), "unknown model preset 'bart' (presets: bert, albert, gpt2, roberta)");
}

// family (a name), positions and activation (enums) are written under the names checkpoints have always
// held; an unknown name is a one-line error naming the key.
TEST(ConfigJson, EnumsAreWrittenAndReadByName) {
  using attnkit::layers::Activation;
  using attnkit::layers::PositionEncoding;
  for (const auto& name : preset_names()) {
    const TransformerConfig c = preset(name);
    nlohmann::json j;
    to_json(j, c);
    EXPECT_EQ(j["family"], name);
    EXPECT_EQ(j["positions"], "learned");
    EXPECT_EQ(j["activation"], name == "bert" || name == "roberta" ? "gelu" : "gelu_new");
    TransformerConfig back;
    from_json(j, back);
    EXPECT_EQ(back.family, c.family);
    EXPECT_EQ(back.activation, c.activation);
  }
  for (const ModelFamily family :
       {ModelFamily::Bert, ModelFamily::Albert, ModelFamily::Gpt2, ModelFamily::Roberta,
        ModelFamily::Custom})
    EXPECT_EQ(parse_model_family(model_family_name(family)), family);
  // A family models/ has no preset for (a Hugging Face family's model_type) is kept by name.
  {
    TransformerConfig marian;
    marian.family = parse_model_family("marian");
    nlohmann::json j;
    to_json(j, marian);
    EXPECT_EQ(j["family"], "marian");
    TransformerConfig back;
    from_json(j, back);
    EXPECT_EQ(back.family, ModelFamily::named("marian"));
    EXPECT_NE(back.family, ModelFamily::Custom);
  }
  TransformerConfig c;
  c.family = ModelFamily::Custom;
  c.positions = PositionEncoding::Sinusoidal;
  c.activation = Activation::Relu;
  nlohmann::json j;
  to_json(j, c);
  EXPECT_EQ(j["family"], "custom");
  EXPECT_EQ(j["positions"], "sinusoidal");
  EXPECT_EQ(j["activation"], "relu");
  // Hugging Face's spelling of learned positions is read too.
  j["positions"] = "absolute";
  TransformerConfig absolute;
  from_json(j, absolute);
  EXPECT_EQ(absolute.positions, PositionEncoding::Learned);
  for (const auto& [key, expected] : std::vector<std::pair<std::string, std::string>>{
           {"family", "config: family: unknown model family 'al\\nbert' (a family name is lower-case letters, "
                      "digits, '-' and '_')"},
           {"positions", "config: positions: unknown position encoding 'al\\nbert' (known: learned, sinusoidal, none, "
                          "sinusoidal-halves)"},
           {"activation", "config: activation: unknown activation 'al\\nbert' (known: gelu, gelu_new, "
                          "gelu_tanh, gelu_pytorch_tanh, relu, silu, swish)"}}) {
    nlohmann::json bad = j;
    bad[key] = "al\nbert";
    TransformerConfig out;
    EXPECT_EQ(error_of([&] { from_json(bad, out); }), expected) << key;
  }
}

}  // namespace
