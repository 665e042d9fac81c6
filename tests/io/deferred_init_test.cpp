// Loading without the initialisation it overwrites (models/deferred_init.h): a loaded model's
// tensors equal the file's, and a tensor the loader does not write gets what an eager build with
// the same seed gives it (a new task head, a randomly drawn buffer missing from the file).
#include "attnkit/io/huggingface.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/deferred_init.h"
#include "attnkit/models/task_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>

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


TEST(DeferredInit, AdoptGivesEveryTensorOnTheStorageTheSourcesMemory) {
  at::Tensor target = at::zeros({2, 3});
  const at::Tensor tied = target.view({3, 2});  // another tensor on the same storage
  const at::Tensor values = at::arange(6, at::kFloat).view({2, 3});
  at::Tensor source = values.clone();
  const void* memory = source.data_ptr();
  ASSERT_TRUE(models::DeferredInit::adopt(target, source));
  EXPECT_EQ(target.data_ptr(), memory);
  EXPECT_TRUE(torch::equal(target, values));
  EXPECT_TRUE(torch::equal(tied, values.view({3, 2})));
  EXPECT_EQ(source.storage().nbytes(), 0u);  // the source gave its memory away

  // Anything but a same-shaped, same-dtype, contiguous tensor filling its storage changes nothing.
  const at::Tensor kept = at::ones({2, 3});
  auto refused = [&](const at::Tensor& into, const at::Tensor& from) {
    const void* before = into.data_ptr();
    const bool adopted = models::DeferredInit::adopt(into, from);
    EXPECT_EQ(into.data_ptr(), before);
    return !adopted;
  };
  EXPECT_TRUE(refused(kept.clone(), at::zeros({3, 2})));
  EXPECT_TRUE(refused(kept.clone(), at::zeros({2, 3}, at::kDouble)));
  EXPECT_TRUE(refused(kept.clone(), at::zeros({3, 2}).t()));
  EXPECT_TRUE(refused(kept.clone(), at::zeros({4, 3}).narrow(0, 1, 2)));
  EXPECT_TRUE(refused(at::zeros({4, 3}).narrow(0, 0, 2), at::zeros({2, 3})));
  EXPECT_TRUE(refused(kept.clone(), at::Tensor()));
}

// The address ranges /proc/self/maps shows mapped from files named `file_name`.
std::vector<std::pair<uintptr_t, uintptr_t>> mapped_from(const std::string& file_name) {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.rfind('/');
    if (slash == std::string::npos || line.substr(slash + 1) != file_name) continue;
    std::istringstream fields(line);
    std::string range;
    fields >> range;
    const auto dash = range.find('-');
    ranges.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16),
                        std::stoull(range.substr(dash + 1), nullptr, 16));
  }
  return ranges;
}

TEST(DeferredInit, HuggingFaceWeightsAreTheFilesPagesAndWritesNeverReachTheFile) {
  // A float32 tensor stored as the model holds it becomes its parameter's memory (the file's
  // private mapping: no copy, no first writes to fresh pages); a write into it copies the page
  // and leaves the file as it was, also after the loader's SafetensorsFile is gone.
  const auto dir = testing::scratch_directory("deferred_init") / "hf-gpt2";
  models::HeadsConfig heads;
  heads.causal_lm = true;
  torch::manual_seed(6);
  // Hidden 32, vocabulary and positions 64: every tensor a whole number of 64-byte lines; the file
  // is written again in the mappable layout (Hugging Face's writer gives no alignment beyond 8
  // bytes), so each of them starts on a line.
  auto config = models::TransformerConfig::gpt2(64, 32, 2, 4);
  config.max_positions = 64;
  models::TaskModel model(config, heads);
  io::save_huggingface(model, io::HuggingFaceModel{}, dir.string());
  const std::string weights = (dir / "model.safetensors").string();
  const auto stored = io::load_safetensors(weights);
  {
    io::NamedTensors tensors(stored.begin(), stored.end());
    io::save_safetensors(weights, tensors, io::SafetensorsFile::open(weights).metadata(),
                         io::SafetensorsLayout::kMappable);
  }

  torch::manual_seed(7);
  const auto loaded = io::load_huggingface(dir.string());
  const auto ranges = mapped_from("model.safetensors");
  auto mapped = [&](const at::Tensor& t) {
    const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
    for (const auto& [begin, end] : ranges)
      if (address >= begin && address + t.nbytes() <= end) return true;
    return false;
  };
  std::set<std::string> shared;
  const auto source_state = deferred_test_state(*model);
  for (const auto& [name, value] : deferred_test_state(loaded->module())) {
    EXPECT_TRUE(torch::equal(value, source_state.at(name))) << name;
    if (mapped(value)) shared.insert(name);
  }
  // GPT-2's embeddings and norms are stored as held; its Conv1D layers are transposed or fused
  // (copied).
  std::string names;
  for (const auto& name : shared) names += name + " ";
  EXPECT_TRUE(shared.count("transformer.embeddings.token.weight")) << names;
  EXPECT_TRUE(shared.count("transformer.final_norm.weight"));
  EXPECT_FALSE(shared.count("transformer.blocks.0.attention.output.weight"));

  {
    torch::NoGradGuard no_grad;
    for (auto& p : loaded->module().parameters()) p.add_(1.0);
  }
  for (const auto& [name, value] : deferred_test_state(loaded->module())) {
    if (shared.count(name)) {
      EXPECT_TRUE(torch::equal(value, source_state.at(name) + 1.0)) << name;
    }
  }
  for (const auto& [name, value] : io::load_safetensors(weights))
    EXPECT_TRUE(torch::equal(value, stored.at(name))) << name;
}

}  // namespace
}  // namespace attnkit
