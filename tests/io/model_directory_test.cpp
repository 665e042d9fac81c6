// attnkit model directories (io/model_directory.h): save + load keeps what the model computes
// with, buffers included — synthesizer-random-fixed's alignment is drawn at random, not
// recomputed from the config, so a directory without it would load another model.
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/decode/generation_run.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sys/wait.h>
#include <tuple>

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

// A trained feature map's weights are parameters of each attention layer: saved, and loaded back
// over whatever the fresh model drew (t2r draws at random; hedgehog with M = d starts at I).
TEST(ModelDirectory, TrainedFeatureMapsRoundTrip) {
  for (const std::string kind : {"linear:t2r:5", "linear:hedgehog"}) {
    SCOPED_TRACE(kind);
    const auto dir = testing::scratch_directory("io") / ("model-" + kind.substr(7, 3));
    torch::manual_seed(12);
    auto config = models::TransformerConfig::bert(40, 16, 2, 2, 32);
    config.attention = layers::AttentionSpec::parse(kind);
    config.attention.causal = true;
    models::HeadsConfig heads;
    heads.masked_lm = true;
    models::TaskModel model(config, heads);
    {  // move the map away from its initial value, as training would
      torch::NoGradGuard no_grad;
      for (auto& p : model->named_parameters())
        if (p.key().find("feature_map_") != std::string::npos) p.value().add_(torch::randn_like(p.value()) * 0.2);
    }
    model->eval();
    models::TaskInputs in;
    in.input_ids = torch::randint(40, {2, 8}, torch::kLong);
    const auto expected = model->forward(in).masked_lm_logits;
    io::save_attnkit_model(model, dir.string());
    const auto file = io::SafetensorsFile::open((dir / "model.safetensors").string());
    EXPECT_TRUE(file.contains("transformer.blocks.1.attention.feature_map_weight"));
    EXPECT_TRUE(file.contains("transformer.blocks.1.attention.feature_map_bias"));
    torch::manual_seed(99);
    auto loaded = io::load_model(dir.string());
    EXPECT_EQ(loaded.config.attention.to_string(), kind);
    EXPECT_TRUE(torch::equal(loaded.task->forward(in).masked_lm_logits, expected));
  }
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

// Loading `path` fails with one line that contains `part`.
void expect_one_line_load_error(const std::filesystem::path& path, const std::string& part) {
  try {
    io::load_model(path.string());
    ADD_FAILURE() << "loaded " << path;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(part), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
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
  expect_one_line_load_error(empty, "no config.json");
}

// The CLI's output and exit code for `args` (stderr folded into the output).
std::pair<int, std::string> run_cli(const std::string& args) {
  const std::string command = std::string(ATTNKIT_BINARY_DIR) + "/attnkit --threads 1 " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// An encoder-decoder directory written by attnkit works in every command that takes --model.
TEST(ModelDirectory, EncoderDecoderDirectoryWorksInTheCommands) {
  const auto scratch = testing::scratch_directory("io");
  const auto dir = scratch / "model";
  auto model = tiny_encoder_decoder();
  io::save_attnkit_model(*model, dir.string());
  const std::string m = " --model " + dir.string();

  auto [rc, out] = run_cli("encode" + m + " --ids \"3 4 5 6\" --decoder-ids \"0 7 8\"");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.rfind("logits [1, 3, 30] sum ", 0), 0u) << out;
  std::tie(rc, out) = run_cli("encode" + m + " --ids \"3 4 5 6\"");
  EXPECT_EQ(out.rfind("encoder_last_hidden_state [1, 4, 16] sum ", 0), 0u) << out;

  // generate: the prompt is the source; the same ids as the encoder-decoder's decoding session's greedy search here.
  std::tie(rc, out) = run_cli("generate" + m + " --prompt-ids \"3 4 5 6\" --max-new-tokens 3 --no-eos --json");
  ASSERT_EQ(rc, 0) << out;
  const auto ids = nlohmann::json::parse(out).at("results").at(0).at("sequences").at(0).at("ids");
  decode::GenerationConfig config;
  config.max_new_tokens = 3;
  decode::GenerationRequest request;
  request.model = model.ptr();
  request.prompts = {{3, 4, 5, 6}};
  request.config = config;
  const auto expected = decode::run_generation(request);
  EXPECT_EQ(ids.get<std::vector<int64_t>>(), expected.at(0).at(0).tokens);

  // prune by site; the pruned directory reloads with fewer cross-attention heads.
  std::tie(rc, out) = run_cli("prune" + m + " --heads '{\"decoder.cross\": {\"0\": [1, 2]}}' --out " +
                              (scratch / "pruned").string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("pruned 2 of 24 heads"), std::string::npos) << out;
  const auto pruned = io::load_model((scratch / "pruned").string());
  EXPECT_EQ(pruned.model->attention_site("decoder.cross").heads_per_layer(), (std::vector<int64_t>{2, 4}));

  // What is not there yet, or not for this shape, is one line.
  for (const std::string& args :
       {"prune" + m + " --heads '{\"0\": [1]}' --out " + (scratch / "x").string(),
        "prune" + m + " --heads '{\"decoder.crosss\": {\"0\": [1]}}' --out " + (scratch / "y").string(),
        "convert --from " + dir.string() + " --to " + (scratch / "hf").string() + " --format huggingface",
        "analyze heads" + m + " --data " + (scratch / "pairs.tsv").string() + " --out " + (scratch / "z").string()}) {
    std::tie(rc, out) = run_cli(args);
    EXPECT_EQ(rc, 2) << args << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << args << ": " << out;
  }
}

TEST(ModelDirectory, UnknownArchitectureIsOneLine) {
  const auto dir = testing::scratch_directory("io") / "unknown_architecture";
  auto model = tiny_encoder_decoder();
  io::save_attnkit_model(*model, dir.string());
  auto config = nlohmann::json::parse(read_file((dir / "config.json").string()));
  config["architecture"] = "two\ntowers";
  io::write_file_atomically((dir / "config.json").string(), config.dump());
  expect_one_line_load_error(dir, "architecture");
}

}  // namespace
}  // namespace attnkit
