// LoRA adapters on the attention projections (layers/lora.h; issue 45 stage 2): the layer's
// forward and cached steps against a float64 oracle with the merged weights W + (alpha/r)·B·A,
// gradients against central differences, merging, what trains, the errors, and a checkpoint with
// adapters loading as the merged model.
#include "attnkit/decode/incremental.h"
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/layers/lora.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_config.h"
#include "attnkit/train/optimizers.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

using namespace attnkit;

constexpr int64_t kHidden = 12, kHeads = 3;

layers::MultiHeadAttention attention_layer(int64_t kv_heads, bool causal, uint64_t seed) {
  layers::AttentionSpec spec;
  spec.kind = AttentionKind::Softmax;
  spec.causal = causal;
  spec.kv_heads = kv_heads;
  torch::manual_seed(seed);
  layers::MultiHeadAttention attention(layers::MultiHeadAttentionOptions(kHidden, kHeads).spec(spec));
  attention->to(at::kDouble);
  attention->eval();
  return attention;
}

// Adapters of rank 2 (alpha 3) on every projection, their B drawn at random (B = 0 at init would
// test nothing), and the oracle: the same layer whose weights are W + (alpha/r)·B·A in float64.
std::pair<layers::MultiHeadAttention, layers::MultiHeadAttention> adapted_and_oracle(int64_t kv_heads, bool causal) {
  auto adapted = attention_layer(kv_heads, causal, 7);
  auto oracle = attention_layer(kv_heads, causal, 7);
  for (int which = 0; which < 4; ++which) adapted->add_lora(which, 2, 3.0);
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  for (auto& item : adapted->named_parameters())
    if (item.key().find("_lora_b") != std::string::npos) item.value().normal_(0.0, 0.5);
  const auto params = adapted->named_parameters();
  for (auto [letter, layer] : {std::pair{"q", oracle->q}, {"k", oracle->k}, {"v", oracle->v}, {"o", oracle->o}}) {
    const at::Tensor a = params[std::string(letter) + "_lora_a"], b = params[std::string(letter) + "_lora_b"];
    EXPECT_DOUBLE_EQ(params[std::string(letter) + "_lora_scale"].item<double>(), 1.5);
    layer->weight.add_(b.matmul(a) * 1.5);
  }
  return {adapted, oracle};
}

TEST(Lora, ForwardEqualsMergedWeightOracle) {
  for (int64_t kv_heads : {3, 1})
    for (bool causal : {true, false}) {
      auto [adapted, oracle] = adapted_and_oracle(kv_heads, causal);
      torch::manual_seed(3);
      const at::Tensor x = torch::randn({2, 5, kHidden}, torch::kDouble);
      const at::Tensor got = adapted->forward(x).output, want = oracle->forward(x).output;
      EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12)) << "kv_heads " << kv_heads << " causal " << causal;
      // The adapters change the outputs (the oracle is not the plain layer).
      EXPECT_GT((want - attention_layer(kv_heads, causal, 7)->forward(x).output).abs().max().item<double>(), 1e-3);
    }
}

TEST(Lora, CachedStepsEqualTheOracleForward) {
  torch::NoGradGuard no_grad;
  auto [adapted, oracle] = adapted_and_oracle(1, true);
  torch::manual_seed(5);
  const int64_t B = 2, T = 6;
  const at::Tensor x = torch::randn({B, T, kHidden}, torch::kDouble);
  const at::Tensor valid = torch::ones({B, T}, torch::kBool);
  const at::Tensor want = oracle->forward(x).output;
  auto cache = decode::make_state(*adapted, T);
  int64_t column = 0;
  for (int64_t n : {3, 1, 1, 1}) {
    layers::StepInputs in;
    in.valid = valid.narrow(1, column, n);
    in.positions = at::zeros({B, n}, at::kLong);
    const at::Tensor got = adapted->step(x.narrow(1, column, n), in, *cache);
    EXPECT_TRUE(torch::allclose(got, want.narrow(1, column, n), 1e-10, 1e-12)) << "columns from " << column;
    column += n;
  }
}

TEST(Lora, CrossAttentionStepsEqualTheOracleForward) {
  torch::NoGradGuard no_grad;
  auto [adapted, oracle] = adapted_and_oracle(3, false);
  torch::manual_seed(9);
  const at::Tensor memory = torch::randn({2, 4, kHidden}, torch::kDouble);
  const at::Tensor x = torch::randn({2, 1, kHidden}, torch::kDouble);
  const at::Tensor padding = torch::ones({2, 4}, torch::kBool);
  decode::CrossAttentionCache cache(*adapted, memory, padding);
  EXPECT_TRUE(torch::allclose(adapted->step(x, cache), oracle->forward(x, {}, memory).output, 1e-10, 1e-12));
}

TEST(Lora, GradientsMatchCentralDifferencesAndOnlyAdaptersTrain) {
  auto [adapted, oracle] = adapted_and_oracle(1, true);
  // The layer's own weights frozen, as layers::add_lora leaves a model.
  for (auto* layer : {&adapted->q, &adapted->k, &adapted->v, &adapted->o}) {
    (*layer)->weight.set_requires_grad(false);
    (*layer)->bias.set_requires_grad(false);
  }
  torch::manual_seed(13);
  const at::Tensor x = torch::randn({1, 4, kHidden}, torch::kDouble);
  const at::Tensor probe = torch::randn({1, 4, kHidden}, torch::kDouble);
  auto loss = [&] { return (adapted->forward(x).output * probe).sum(); };
  adapted->zero_grad();
  loss().backward();
  for (auto& item : adapted->named_parameters()) {
    const bool adapter = item.key().find("_lora_a") != std::string::npos || item.key().find("_lora_b") != std::string::npos;
    EXPECT_EQ(item.value().grad().defined(), adapter) << item.key();
    if (!adapter) continue;
    // Central differences on a few entries (float64: step 1e-6, tolerance 1e-6 relative).
    at::Tensor p = item.value();
    const at::Tensor grad = p.grad().clone();
    torch::NoGradGuard no_grad;
    for (int64_t i : {int64_t(0), p.numel() / 2, p.numel() - 1}) {
      auto flat = p.view({-1});
      const double saved = flat[i].item<double>();
      flat[i] = saved + 1e-6;
      const double up = loss().item<double>();
      flat[i] = saved - 1e-6;
      const double down = loss().item<double>();
      flat[i] = saved;
      const double numeric = (up - down) / 2e-6;
      EXPECT_NEAR(grad.view({-1})[i].item<double>(), numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
          << item.key() << "[" << i << "]";
    }
  }
}

TEST(Lora, MergeLeavesAPlainLayerWithTheSameOutputs) {
  auto [adapted, oracle] = adapted_and_oracle(3, true);
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({2, 5, kHidden}, torch::kDouble);
  const at::Tensor before = adapted->forward(x).output.detach();
  EXPECT_EQ(adapted->merge_lora(), 4);
  EXPECT_FALSE(adapted->has_lora());
  for (auto& item : adapted->named_parameters()) EXPECT_EQ(item.key().find("lora"), std::string::npos) << item.key();
  EXPECT_TRUE(torch::allclose(adapted->forward(x).output, before, 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(adapted->q->weight, oracle->q->weight, 1e-12, 1e-14));
  EXPECT_EQ(adapted->merge_lora(), 0);
}

models::TaskModel tiny_lm(uint64_t seed) {
  auto config = models::TransformerConfig::gpt2(29, 16, 2, 2);
  config.dropout = 0.0;
  config.max_positions = 16;
  models::HeadsConfig heads;
  heads.causal_lm = true;
  torch::manual_seed(seed);
  models::TaskModel model(config, heads);
  model->eval();
  return model;
}

TEST(Lora, ModelAdaptersFreezeTheRestAndStartAsTheModel) {
  auto model = tiny_lm(21);
  models::TaskInputs in;
  in.input_ids = torch::tensor({{3, 9, 4, 17, 2}}, at::kLong);
  const at::Tensor before = model->forward(in).causal_lm_logits.detach();
  layers::LoraOptions options;
  options.rank = 4;
  options.targets = "q,v";
  EXPECT_EQ(layers::add_lora(*model, options), 4);  // 2 layers x (q, v)
  int64_t trainable = 0;
  for (auto& item : model->named_parameters()) {
    const bool adapter = item.key().find("_lora_a") != std::string::npos || item.key().find("_lora_b") != std::string::npos;
    EXPECT_EQ(item.value().requires_grad(), adapter) << item.key();
    trainable += adapter ? item.value().numel() : 0;
  }
  EXPECT_EQ(trainable, 2 * 2 * (4 * 16 + 16 * 4));
  // B = 0: the model computes what it did.
  EXPECT_TRUE(torch::allclose(model->forward(in).causal_lm_logits, before, 0, 0));
  // The optimiser holds the adapters alone.
  auto optimizer = train::make_optimizer(*model, train::OptimizerOptions());
  int64_t held = 0;
  for (const auto& group : optimizer->param_groups()) held += static_cast<int64_t>(group.params().size());
  EXPECT_EQ(held, 8);
  EXPECT_THROW(layers::add_lora(*model, options), Error);  // adapters already
}

TEST(Lora, ACheckpointWithAdaptersLoadsMerged) {
  const auto dir = attnkit::testing::scratch_directory("lora");
  auto model = tiny_lm(22);
  layers::LoraOptions options;
  options.rank = 3;
  options.alpha = 6;
  layers::add_lora(*model, options);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters())
      if (item.key().find("_lora_b") != std::string::npos) item.value().normal_(0.0, 0.3);
  }
  models::TaskInputs in;
  in.input_ids = torch::tensor({{1, 5, 8, 2, 28, 7}}, at::kLong);
  const at::Tensor want = model->forward(in).causal_lm_logits.detach();
  io::save_attnkit_model(model, (dir / "adapted").string());
  auto loaded = io::load_model((dir / "adapted").string());
  for (auto& item : loaded.task->named_parameters()) EXPECT_EQ(item.key().find("lora"), std::string::npos) << item.key();
  EXPECT_TRUE(torch::allclose(loaded.task->forward(in).causal_lm_logits, want, 1e-5, 1e-5));
  // Without the adapters' effect the outputs differ: the merge did something.
  EXPECT_GT((tiny_lm(22)->forward(in).causal_lm_logits - want).abs().max().item<double>(), 1e-3);
}

TEST(Lora, BadSettingsAreOneLineErrors) {
  auto model = tiny_lm(23);
  layers::LoraOptions options;
  options.rank = 0;
  EXPECT_THROW(layers::add_lora(*model, options), Error);
  options.rank = 2;
  options.alpha = 0;
  EXPECT_THROW(layers::add_lora(*model, options), Error);
  options.alpha = 4;
  for (const char* targets : {"x", "q,,v", "q,q", ""}) {
    options.targets = targets;
    EXPECT_THROW(layers::add_lora(*model, options), Error) << targets;
  }
  for (auto& p : model->parameters()) EXPECT_TRUE(p.requires_grad());  // nothing changed
  EXPECT_EQ(layers::lora_projections("o,q"), (std::vector<int>{3, 0}));
}

}  // namespace
