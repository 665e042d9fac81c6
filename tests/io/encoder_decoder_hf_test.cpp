// Marian / BART directories written by attnkit from a model it built (no config.json to keep):
// the family's config_to_json and name table, read back by io::load_model into the same model;
// a config the family cannot express is refused in one line; config.json errors name the key.
// (The peer tests against transformers are tests/python/test_marian_hf.py and test_bart_hf.py.)
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/huggingface.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/models/encoder_decoder.h"
#include "support/test_files.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

namespace attnkit {
namespace {

namespace fs = std::filesystem;

// A Marian-convention (or BART-convention) encoder-decoder of random weights.
models::EncoderDecoderConfig conventions(bool bart) {
  auto c = models::EncoderDecoderConfig::transformer(30, 30, 16, 2, 4, 32);
  for (auto* stack : {&c.encoder, &c.decoder}) {
    stack->positions = bart ? layers::PositionEncoding::Learned : layers::PositionEncoding::SinusoidalHalves;
    stack->position_id_offset = bart ? 2 : 0;
    stack->embedding_layer_norm = bart;
    stack->embedding_scale = bart ? 1.0 : 4.0;  // sqrt(16)
    stack->activation = bart ? layers::Activation::Gelu : layers::Activation::Silu;
    stack->max_positions = 24;
    stack->pad_token_id = 29;
  }
  c.final_logits_bias = true;
  c.decoder_start_token_id = bart ? 2 : 29;
  return c;
}

TEST(EncoderDecoderHf, FreshSaveReadsBackAsTheSameModel) {
  for (bool bart : {false, true}) {
    SCOPED_TRACE(bart ? "bart" : "marian");
    torch::manual_seed(bart ? 41 : 42);
    models::EncoderDecoderModel model(conventions(bart));
    model->eval();
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.normal_(0, 0.3);
      model->final_logits_bias.normal_();
    }
    const auto dir = testing::scratch_directory("io") / (bart ? "fresh-bart" : "fresh-marian");
    io::HuggingFaceModel info;  // no config.json to keep: the family writes a fresh one
    info.layout.model_type = bart ? "bart" : "marian";
    io::save_huggingface(*model, info, dir.string());
    const auto config = nlohmann::json::parse(read_file(dir / "config.json"));
    EXPECT_EQ(config["model_type"], bart ? "bart" : "marian");
    EXPECT_EQ(config["d_model"], 16);
    EXPECT_EQ(config["scale_embedding"], !bart);
    EXPECT_EQ(config["activation_function"], bart ? "gelu" : "silu");
    auto loaded = io::load_model(dir.string());
    auto& again = loaded.model->encoder_decoder("test");
    EXPECT_EQ(again.config().decoder_start_token_id, bart ? 2 : 29);
    torch::NoGradGuard no_grad;
    const auto source = torch::randint(0, 28, {2, 7}, torch::kLong);
    const auto target = torch::randint(0, 28, {2, 5}, torch::kLong);
    const auto want = model->forward(source, target);
    const auto got = again.forward(source, target);
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-5);
  }
}

TEST(EncoderDecoderHf, ConventionsTheFamilyLacksAreOneLineRefusals) {
  // attnkit's translation preset: interleaved sinusoid, no final_logits_bias.
  models::EncoderDecoderModel model(models::EncoderDecoderConfig::transformer(30, 30, 16, 1, 2, 32));
  const auto dir = testing::scratch_directory("io") / "not-marian";
  const std::string message = testing::error_of(
      [&] { io::save_huggingface(*model, io::HuggingFaceModel{}, dir.string()); });
  EXPECT_NE(message.find("cannot write a Hugging Face"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
}

TEST(EncoderDecoderHf, ConfigErrorsNameTheKey) {
  const nlohmann::json good = {{"model_type", "marian"}, {"vocab_size", 30}, {"d_model", 16},
                               {"encoder_layers", 1}, {"decoder_layers", 1},
                               {"encoder_attention_heads", 2}, {"decoder_attention_heads", 2},
                               {"encoder_ffn_dim", 32}, {"decoder_ffn_dim", 32},
                               {"max_position_embeddings", 20}, {"pad_token_id", 29}};
  EXPECT_EQ(testing::error_of([&] { io::encoder_decoder_config_from_huggingface(good); }), "");
  EXPECT_TRUE(io::is_huggingface_encoder_decoder(good));
  for (const char* key : {"d_model", "decoder_ffn_dim", "pad_token_id"}) {
    auto bad = good;
    bad.erase(key);
    EXPECT_EQ(testing::error_of([&] { io::encoder_decoder_config_from_huggingface(bad); }),
              fmt::format("config.json: missing '{}'", key));
  }
  auto bad = good;
  bad["encoder_layers"] = "two";
  EXPECT_EQ(testing::error_of([&] { io::encoder_decoder_config_from_huggingface(bad); }),
            "config.json: 'encoder_layers' must be an integer (\"two\")");
  bad = good;
  bad["decoder_start_token_id"] = 30;
  EXPECT_NE(testing::error_of([&] { io::encoder_decoder_config_from_huggingface(bad); })
                .find("decoder_start_token_id 30"),
            std::string::npos);
  // The single-stack reader points to the encoder-decoder.
  EXPECT_NE(testing::error_of([&] { io::config_from_huggingface(good); }).find("is an encoder-decoder"),
            std::string::npos);
}

}  // namespace
}  // namespace attnkit
