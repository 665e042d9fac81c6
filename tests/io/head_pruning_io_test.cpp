// Pruned models saved and loaded in both layouts: the config records `pruned_heads`
// ({"layer": [heads]}, as Hugging Face writes it), loading builds the pruned shapes, and the
// reloaded model gives the pruned model's outputs. A Hugging Face config.json with pruned_heads
// loads pruned. (The peer check against transformers' own prune_heads is
// tests/python/test_heads_hf.py.)
#include "attnkit/io/model_directory.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>

namespace attnkit {
namespace {

using models::HeadIndices;

models::TaskModel classifier(const std::string& family) {
  torch::manual_seed(9);
  models::TransformerConfig c = family == "gpt2" ? models::TransformerConfig::gpt2(50, 16, 3, 4)
                                                 : family == "albert"
                                                       ? models::TransformerConfig::albert(50, 8, 16, 3, 4, 32)
                                                       : models::TransformerConfig::bert(50, 16, 3, 4, 32);
  c.max_positions = 32;
  models::HeadsConfig h;
  h.sequence_labels = 3;
  if (family == "gpt2") {
    h.sequence_pooling = models::Pooling::Last;
    h.sequence_bias = false;
  }
  models::TaskModel model(c, h);
  model->eval();
  return model;
}

at::Tensor logits(models::TaskModel& model) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(2);
  models::TaskInputs in;
  in.input_ids = torch::randint(50, {2, 6}, torch::kLong);
  return model->forward(in).sequence_logits;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(HeadPruningIo, RoundTripBothLayouts) {
  for (const std::string family : {"bert", "albert", "gpt2"}) {
    for (const std::string format : {"attnkit", "huggingface"}) {
      SCOPED_TRACE(family + " " + format);
      auto model = classifier(family);
      const HeadIndices pruned = family == "albert" ? HeadIndices{{0, {1, 3}}}
                                                    : HeadIndices{{0, {1}}, {2, {0, 2, 3}}};
      model->transformer->prune_heads(pruned);
      const at::Tensor want = logits(model);
      const auto dir = testing::scratch_directory("heads") / format;
      if (format == "attnkit") {
        io::save_attnkit_model(model, dir.string());
        EXPECT_EQ(read_json(dir / "config.json").at("model").at("pruned_heads"),
                  models::head_indices_to_json(pruned));
      } else {
        io::HuggingFaceModel info;
        info.config_json = io::config_to_huggingface(model->config(), model->heads());
        info.layout = io::default_layout(model->config(), model->heads());
        io::save_huggingface(model, info, dir.string());
        EXPECT_EQ(read_json(dir / "config.json").at("pruned_heads"),
                  models::head_indices_to_json(pruned));
      }
      auto loaded = io::load_model(dir.string());
      EXPECT_EQ(loaded.config.pruned_heads, pruned);
      EXPECT_EQ(loaded.transformer->heads_per_layer(), model->transformer->heads_per_layer());
      EXPECT_TRUE(torch::allclose(logits(loaded.task), want, 1e-5, 1e-6));
    }
  }
}

// A model loaded unpruned, pruned, saved again in its own (HF) layout: config.json gains
// pruned_heads, and the reload is pruned.
TEST(HeadPruningIo, PruneAfterLoadingHuggingFace) {
  auto model = classifier("bert");
  const auto dir = testing::scratch_directory("heads");
  io::HuggingFaceModel info;
  info.config_json = io::config_to_huggingface(model->config(), model->heads());
  info.layout = io::default_layout(model->config(), model->heads());
  io::save_huggingface(model, info, (dir / "full").string());
  auto loaded = io::load_model((dir / "full").string());
  EXPECT_FALSE(read_json(dir / "full" / "config.json").contains("pruned_heads"));
  loaded.transformer->prune_heads({{1, {2}}});
  const at::Tensor want = logits(loaded.task);
  io::save_huggingface(loaded.task, loaded.huggingface, (dir / "pruned").string());
  EXPECT_EQ(read_json(dir / "pruned" / "config.json").at("pruned_heads"),
            nlohmann::json::parse(R"({"1": [2]})"));
  auto again = io::load_model((dir / "pruned").string());
  EXPECT_EQ(again.transformer->heads_per_layer(), (std::vector<int64_t>{4, 3, 4}));
  EXPECT_TRUE(torch::allclose(logits(again.task), want, 1e-5, 1e-6));
}

TEST(HeadPruningIo, BadPrunedHeadsIsOneLineError) {
  auto model = classifier("bert");
  const auto dir = testing::scratch_directory("heads");
  io::HuggingFaceModel info;
  info.config_json = io::config_to_huggingface(model->config(), model->heads());
  info.layout = io::default_layout(model->config(), model->heads());
  io::save_huggingface(model, info, dir.string());
  auto config = read_json(dir / "config.json");
  config["pruned_heads"] = nlohmann::json::parse(R"({"0": [7]})");
  testing::write_bytes(dir / "config.json", config.dump());
  const std::string message = testing::error_of([&] { io::load_model(dir.string()); });
  EXPECT_NE(message.find("pruned_heads"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace attnkit
