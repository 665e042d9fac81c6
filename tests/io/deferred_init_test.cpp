// Loading without the initialisation it overwrites (models/deferred_init.h): a loaded model's
// tensors equal the file's, and a tensor the loader does not write gets what an eager build with
// the same seed gives it (a new task head, a randomly drawn buffer missing from the file).
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/deferred_init.h"
#include "attnkit/models/task_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

namespace attnkit {
namespace {

models::TransformerConfig deferred_test_config() {
  auto config = models::TransformerConfig::gpt2(53, 24, 2, 4);
  config.max_positions = 32;
  return config;
}

// Every parameter and buffer of `model`, by name.
std::map<std::string, at::Tensor> deferred_test_state(torch::nn::Module& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model.named_parameters(true)) out[item.key()] = item.value();
  for (const auto& item : model.named_buffers(true)) out[item.key()] = item.value();
  return out;
}

TEST(DeferredInit, LoadedTensorsEqualTheFile) {
  const auto dir = testing::scratch_directory("deferred_init") / "lm";
  torch::manual_seed(4);
  models::HeadsConfig heads;
  heads.causal_lm = true;
  heads.tie_lm = false;
  models::TaskModel model(deferred_test_config(), heads);
  io::save_attnkit_model(model, dir.string());
  const auto file = io::load_safetensors((dir / "model.safetensors").string());

  // A generator state whose draws would differ from the saved model's: the load must not use it.
  torch::manual_seed(5);
  auto before = torch::randn({8});
  torch::manual_seed(5);
  auto loaded = io::load_model(dir.string());
  size_t compared = 0;
  for (const auto& [name, value] : deferred_test_state(*loaded.task)) {
    ASSERT_TRUE(file.count(name)) << name;
    EXPECT_TRUE(torch::equal(value, file.at(name))) << name;
    ++compared;
  }
  EXPECT_EQ(compared, file.size());
  // Nothing was missing, so nothing was drawn: the generator is where the seed left it.
  EXPECT_TRUE(torch::equal(torch::randn({8}), before));
}

TEST(DeferredInit, UnwrittenHeadGetsTheEagerInitialisation) {
  models::HeadsConfig heads;
  heads.causal_lm = true;
  heads.sequence_labels = 3;  // a classification head a language-model checkpoint lacks
  heads.sequence_pooling = models::Pooling::Last;
  const auto config = deferred_test_config();
  auto build = [&] { return models::TaskModel(config, heads).ptr(); };

  torch::manual_seed(11);
  const auto source = build();  // what the "file" holds
  auto source_state = deferred_test_state(*source);

  torch::manual_seed(21);
  auto eager = build();
  const at::Tensor after_eager = torch::randn({8});

  torch::manual_seed(21);
  models::DeferredInit deferred;
  auto model = build();
  {  // the loader: every tensor but the classifier's
    torch::NoGradGuard no_grad;
    for (auto& [name, value] : deferred_test_state(*model))
      if (name.rfind("classifier.", 0) != 0) value.copy_(source_state.at(name));
  }
  const auto names = deferred.finish(*model, build);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
            (std::set<std::string>{"classifier.weight", "classifier.bias"}));
  const auto eager_state = deferred_test_state(*eager);
  for (const auto& [name, value] : deferred_test_state(*model)) {
    const at::Tensor& expected =
        name.rfind("classifier.", 0) == 0 ? eager_state.at(name) : source_state.at(name);
    EXPECT_TRUE(torch::equal(value, expected)) << name;
  }
  // The head's values are a draw, not the source's, and the generator is where an eager build
  // leaves it.
  EXPECT_FALSE(torch::equal(model->classifier->weight, source->classifier->weight));
  EXPECT_NEAR(model->classifier->weight.std().item<double>(), 0.02, 0.01);
  EXPECT_TRUE(torch::equal(torch::randn({8}), after_eager));
}

TEST(DeferredInit, RandomBufferMissingFromTheFileIsDrawnAsToday) {
  // synthesizer-random-fixed draws its alignment as a buffer: a file without it loads the one an
  // eager build with the same seed draws (what loading did before the initialisation was deferred).
  const auto dir = testing::scratch_directory("deferred_init") / "synth";
  auto config = models::TransformerConfig::bert(40, 16, 2, 2, 32);
  config.attention = layers::AttentionSpec::parse("synthesizer-random-fixed");
  config.attention.max_length = 10;
  models::HeadsConfig heads;
  heads.masked_lm = true;
  torch::manual_seed(12);
  models::TaskModel model(config, heads);
  io::save_attnkit_model(model, dir.string());
  const std::string name = "transformer.blocks.1.attention.fixed_random_logits";
  const auto path = (dir / "model.safetensors").string();
  {
    io::NamedTensors kept;
    for (const auto& [key, value] : io::load_safetensors(path))
      if (key != name) kept.emplace_back(key, value);
    const std::map<std::string, std::string> metadata = io::SafetensorsFile::open(path).metadata();
    io::save_safetensors(path, kept, metadata);
  }
  torch::manual_seed(30);
  models::TaskModel eager(config, heads);
  torch::manual_seed(30);
  auto loaded = io::load_model(dir.string());
  EXPECT_TRUE(torch::equal(loaded.task->named_buffers()[name], eager->named_buffers()[name]));
  EXPECT_FALSE(torch::equal(loaded.task->named_buffers()[name], model->named_buffers()[name]));
  const std::string kept_name = "transformer.blocks.0.attention.fixed_random_logits";
  EXPECT_TRUE(torch::equal(loaded.task->named_buffers()[kept_name], model->named_buffers()[kept_name]));
}

}  // namespace
}  // namespace attnkit
