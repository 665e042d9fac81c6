// attnkit model directories (io/model_directory.h): save + load keeps what the model computes
// with, buffers included — synthesizer-random-fixed's alignment is drawn at random, not
// recomputed from the config, so a directory without it would load another model.
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <filesystem>

namespace attnkit {
namespace {

TEST(ModelDirectory, FixedRandomSynthesizerRoundTripsWithItsAlignment) {
  const auto dir = testing::scratch_directory("io") / "model";
  torch::manual_seed(12);
  auto config = models::TransformerConfig::bert(40, 16, 2, 2, 32);
  config.attention = layers::AttentionSpec::parse("synthesizer-random-fixed");
  config.attention.max_length = 10;
  models::HeadsConfig heads;
  heads.masked_lm = true;
  models::TaskModel model(config, heads);
  model->eval();
  models::TaskInputs in;
  in.input_ids = torch::randint(40, {2, 8}, torch::kLong);
  const auto expected = model->forward(in).masked_lm_logits;
  io::save_attnkit_model(model, dir.string());
  EXPECT_TRUE(io::SafetensorsFile::open((dir / "model.safetensors").string())
                  .contains("transformer.blocks.1.attention.fixed_random_logits"));

  torch::manual_seed(99);  // a fresh model would draw another alignment
  auto loaded = io::load_model(dir.string());
  EXPECT_EQ(loaded.config.attention.to_string(), "synthesizer-random-fixed");
  const std::string name = "transformer.blocks.0.attention.fixed_random_logits";
  EXPECT_TRUE(torch::equal(loaded.task->named_buffers()[name], model->named_buffers()[name]));
  EXPECT_TRUE(torch::equal(loaded.task->forward(in).masked_lm_logits, expected));
}

models::EncoderDecoderModel tiny_encoder_decoder() {
  torch::manual_seed(3);
  auto config = models::EncoderDecoderConfig::transformer(30, 30, 16, 2, 4, 32);
  models::EncoderDecoderModel model(config);
  model->eval();
  return model;
}

at::Tensor translate_logits(models::EncoderDecoderModelImpl& model) {
  torch::NoGradGuard no_grad;
  const auto source = torch::arange(3, 10, torch::kLong).unsqueeze(0);
  const auto target = torch::arange(5, 9, torch::kLong).unsqueeze(0);
  return model.forward(source, target);
}

// An encoder-decoder saved by attnkit reloads as one, with its three attention sites, from the
// directory and from the checkpoint file alone (metadata), pruned heads included.
TEST(ModelDirectory, EncoderDecoderRoundTripsWithItsSites) {
  const auto dir = testing::scratch_directory("io") / "encoder_decoder";
  auto model = tiny_encoder_decoder();
  model->prune_heads("decoder.cross", {{1, {0, 2}}});
  const auto expected = translate_logits(*model);
  io::save_attnkit_model(*model, dir.string());

  for (const auto& path : {dir.string(), (dir / "model.safetensors").string()}) {
    auto loaded = io::load_model(path);
    ASSERT_EQ(loaded.model->shape(), models::ModelShape::EncoderDecoder) << path;
    EXPECT_FALSE(loaded.task) << path;
    std::vector<std::string> names;
    for (const auto& site : loaded.model->attention_sites()) names.push_back(site.name);
    EXPECT_EQ(names, (std::vector<std::string>{"encoder.self", "decoder.self", "decoder.cross"}));
    EXPECT_EQ(loaded.model->attention_site("decoder.cross").heads_per_layer(),
              (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(loaded.model->head_count(), 4 * 2 + 4 * 2 + 6);
    auto& reloaded = loaded.model->encoder_decoder("test");
    EXPECT_TRUE(torch::equal(translate_logits(reloaded), expected)) << path;
    EXPECT_THROW(loaded.task_model("encode"), Error);
  }
}

TEST(ModelDirectory, TaskModelDescriptionIsTheEarlierLayout) {
  auto config = models::TransformerConfig::gpt2(40, 16, 2, 2);
  models::HeadsConfig heads;
  heads.causal_lm = true;
  models::TaskModel model(config, heads);
  EXPECT_EQ(model->shape(), models::ModelShape::DecoderOnly);
  EXPECT_EQ(model->attention_sites().size(), 1u);
  EXPECT_EQ(model->attention_sites()[0].name, "decoder.self");
  const auto metadata = io::attnkit_metadata(model);
  const auto description = nlohmann::json::parse(metadata.at("attnkit_config"));
  EXPECT_EQ(description.size(), 3u);  // attnkit_format, model, heads: as every earlier file
  EXPECT_EQ(description.at("attnkit_format"), 1);
  EXPECT_TRUE(description.contains("model") && description.contains("heads"));
  EXPECT_THROW(model->attention_site("decoder.cross"), Error);
  EXPECT_THROW(model->encoder_decoder("test"), Error);
}

// A run directory is a model: its best checkpoint, else its newest step checkpoint.
TEST(ModelDirectory, RunDirectoryResolvesToBestElseNewestCheckpoint) {
  namespace fs = std::filesystem;
  const auto scratch = testing::scratch_directory("io");
  const auto run = scratch / "run";
  auto model = tiny_encoder_decoder();
  for (const char* step : {"step-00000002", "step-00000010"})
    io::save_attnkit_model(*model, (run / "checkpoints" / step).string());
  fs::create_directories(run / "checkpoints" / ".tmp-step-00000020");
  EXPECT_EQ(io::resolve_model_path(run.string()), (run / "checkpoints" / "step-00000010").string());
  EXPECT_EQ(io::run_model_checkpoints(run.string()).size(), 2u);
  io::save_attnkit_model(*model, (run / "checkpoints" / "best").string());
  EXPECT_EQ(io::resolve_model_path(run.string()), (run / "checkpoints" / "best").string());
  const auto loaded = io::load_model(run.string());
  EXPECT_EQ(loaded.path, (run / "checkpoints" / "best").string());
  EXPECT_EQ(loaded.model->shape(), models::ModelShape::EncoderDecoder);
  // A directory that is neither a model nor a run: one line naming it.
  const auto empty = scratch / "not_a_model";
  fs::create_directories(empty);
  try {
    io::load_model(empty.string());
    FAIL() << "loaded an empty directory";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no config.json"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(ModelDirectory, UnknownArchitectureIsOneLine) {
  const auto dir = testing::scratch_directory("io") / "unknown_architecture";
  auto model = tiny_encoder_decoder();
  io::save_attnkit_model(*model, dir.string());
  auto config = nlohmann::json::parse(read_file((dir / "config.json").string()));
  config["architecture"] = "two\ntowers";
  io::write_file_atomically((dir / "config.json").string(), config.dump());
  try {
    io::load_model(dir.string());
    FAIL() << "loaded an unknown architecture";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("architecture"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace attnkit
