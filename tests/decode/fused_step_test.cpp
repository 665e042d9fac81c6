// The fused one-column decoding step (src/layers/fused_step.h) against the blocks' own step
// (ATen's operations, itself checked against full recomputation and transformers elsewhere):
// tiny float32 models of the Llama families' shapes, GPT-2's, post-LN blocks and decoder stacks
// with cross attention (Marian's shape), decoded side by side through a prompt, single columns,
// beam search's row reordering and left padding; the hidden states agree
// to float32 rounding at every step, and the fused path ran (or, for the shapes it leaves alone,
// did not).
#include "attnkit/decode/incremental.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_model.h"

#include "../../src/layers/fused_step.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace {

using namespace attnkit;

// A Llama-shaped stack (RMSNorm, gated SiLU MLP without biases, rotary positions, 4 query heads
// of size 8 in 2 key/value groups: the head size is not hidden / heads) with a variant's changes.
models::TransformerConfig llama_shape(const std::string& variant) {
  auto c = models::TransformerConfig::gpt2(37, 24, 2, 4);
  c.intermediate = 40;
  c.max_positions = 64;
  c.type_vocab_size = 0;
  c.positions = layers::PositionEncoding::None;
  c.activation = layers::Activation::Silu;
  c.norm_first = true;
  c.layer_norm_eps = 1e-6;
  c.embedding_layer_norm = false;
  c.final_layer_norm = true;
  c.pooler = false;
  c.dropout = 0.0;
  c.attention.causal = true;
  c.attention.kv_heads = 2;
  c.attention.key_size = c.attention.value_size = 8;
  c.attention.bias = false;
  c.attention.output_bias = false;
  c.norm = layers::NormKind::RmsNorm;
  c.gated_mlp = true;
  c.mlp_bias = false;
  ops::RotaryConfig rotary;
  rotary.head_dim = 8;
  rotary.theta = 100.0;  // fast rotations: positions matter within a few columns
  if (variant == "partial-rotary") rotary.rotary_dim = 4;  // Phi-3's partial rotary
  c.rotary = rotary;
  if (variant == "qwen2") c.attention.bias = true;  // q/k/v biases, none on o
  if (variant == "gemma") {
    c.norm = layers::NormKind::GemmaRmsNorm;
    c.activation = layers::Activation::GeluTanh;
    c.embedding_scale = std::sqrt(24.0);
    c.attention.scale = 1.0 / std::sqrt(6.0);  // query_pre_attn_scalar
    c.attention.logit_softcap = 2.0;
  }
  if (variant == "window") c.attention.window = 4;  // shorter than the prompt: the cache is a ring
  if (variant == "qk-norm") c.attention.qk_norm = true;  // Gemma 3: left to the blocks' own step
  return c;
}

void randomize(torch::nn::Module& module);

models::TaskModel make_model(const models::TransformerConfig& config) {
  models::HeadsConfig heads;
  heads.causal_lm = true;
  torch::manual_seed(11);
  models::TaskModel model(config, heads);
  model->to(at::kFloat);
  model->eval();
  randomize(*model);
  return model;
}

// Decodes `batch` rows (with 2: row 1 left padded by 2 columns) through a 6-column prompt, then
// `steps` single columns, reordering the rows by `index` (beam search's select_rows) after the
// third; the stack's fused path on or off. `memory` [sources, S, hidden] (a decoder stack): the
// encoder memory, its last two positions padding. Returns every step's hidden states, concatenated
// along the columns.
at::Tensor decode(models::TransformerModel& stack, bool fused, int64_t steps, int64_t batch,
                  const at::Tensor& index, const at::Tensor& memory = at::Tensor()) {
  layers::set_fused_step(fused);
  torch::NoGradGuard no_grad;
  const int64_t prompt = 6, vocab = stack->config().vocab_size;
  c10::optional<at::Tensor> mem, padding;
  if (memory.defined()) {
    mem = memory;
    padding = torch::ones({memory.size(0), memory.size(1)}, at::kBool);
    padding->narrow(1, memory.size(1) - 2, 2).fill_(false);
  }
  auto cache = stack->start_decoding(decode::caches(), batch, prompt + steps, mem, padding);
  torch::manual_seed(3);
  at::Tensor ids = torch::randint(0, vocab, {batch, prompt}, at::kLong);
  at::Tensor valid = torch::ones({batch, prompt}, at::kBool);
  if (batch > 1) valid[1].narrow(0, 0, 2).fill_(false);
  at::Tensor seen = valid.clone();
  std::vector<at::Tensor> outs;
  auto step = [&](const at::Tensor& new_ids, const at::Tensor& new_valid) {
    const at::Tensor positions = (seen.to(at::kLong).cumsum(1) - 1).clamp_min(0).narrow(
        1, seen.size(1) - new_ids.size(1), new_ids.size(1));
    outs.push_back(stack->step(cache, new_ids, {new_valid, positions, true, {}}));
  };
  step(ids, valid);
  for (int64_t t = 0; t < steps; ++t) {
    if (t == 3) {
      cache.select_rows(index);
      seen = seen.index_select(0, index);
      for (auto& o : outs) o = o.index_select(0, index);
    }
    const at::Tensor next = torch::randint(0, vocab, {seen.size(0), 1}, at::kLong);
    const at::Tensor v = torch::ones({seen.size(0), 1}, at::kBool);
    seen = torch::cat({seen, v}, 1);
    step(next, v);
  }
  layers::set_fused_step(true);
  return torch::cat(outs, 1);
}

// Randomizes a stack's weights: larger than the usual 0.02 so that attention is far from uniform
// and the norms' weights far from 1 (a wrong term would show).
void randomize(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) p.value().normal_(0.0, 0.4);
}

void compare(models::TransformerModel& stack, const std::string& what, int64_t fused_steps, int64_t batch,
             const at::Tensor& index, const at::Tensor& memory = at::Tensor()) {
  const int64_t steps = 7;
  const int64_t before = layers::fused_block_steps();
  const at::Tensor fused = decode(stack, true, steps, batch, index, memory);
  const int64_t taken = layers::fused_block_steps() - before;
  const at::Tensor reference = decode(stack, false, steps, batch, index, memory);
  EXPECT_EQ(layers::fused_block_steps() - before, taken) << what << ": fused steps with the path off";
  EXPECT_EQ(taken, fused_steps) << what;
  ASSERT_EQ(fused.sizes(), reference.sizes()) << what;
  // A left-padded row's padded columns are never read; compare the columns every row holds.
  const int64_t skip = batch > 1 ? 2 : 0;
  const at::Tensor a = fused.narrow(1, skip, fused.size(1) - skip), b = reference.narrow(1, skip, reference.size(1) - skip);
  const double scale = std::max(1.0, b.abs().max().item<double>());
  EXPECT_LE((a - b).abs().max().item<double>(), 2e-5 * scale) << what;
  EXPECT_GT(b.std().item<double>(), 0.1) << what;  // the states are not degenerate
}

void expect_same_decoding(const models::TransformerConfig& config, const std::string& what,
                          bool fused_expected) {
  auto model = make_model(config);
  // Every single-column step of every layer, or none.
  compare(model->transformer, what, fused_expected ? 7 * config.layers : 0, 2, torch::tensor({1, 1}, at::kLong));
}

// A decoder stack with cross attention over a memory (Marian's and BART's decoders: post-LN,
// biases; Marian's SiLU, sinusoidal positions and scaled embeddings), one source decoded as two
// beams after the reordering (both rows read the one memory row: one block of two queries).
void expect_same_decoder_decoding(bool norm_first, const std::string& what) {
  auto c = models::TransformerConfig::gpt2(37, 24, 2, 4);
  c.max_positions = 64;
  c.dropout = 0.0;
  c.attention.causal = true;
  c.norm_first = norm_first;
  c.final_layer_norm = norm_first;
  c.cross_attention = true;
  c.cross_attention_spec = layers::AttentionSpec::parse("softmax");
  c.memory_hidden = 24;
  c.type_vocab_size = 0;
  c.pooler = false;
  if (!norm_first) {  // Marian's conventions
    c.positions = layers::PositionEncoding::Sinusoidal;
    c.activation = layers::Activation::Silu;
    c.embedding_layer_norm = false;
    c.embedding_scale = std::sqrt(24.0);
  }
  torch::manual_seed(11);
  models::TransformerModel stack(c);
  stack->to(at::kFloat);
  stack->eval();
  randomize(*stack);
  const at::Tensor memory = torch::randn({1, 9, 24}, at::kFloat);
  compare(stack, what, 7 * c.layers, 1, torch::tensor({0, 0}, at::kLong), memory);
}

TEST(FusedStep, LlamaShapesEqualTheBlocksStep) {
  for (const std::string variant : {"llama", "partial-rotary", "qwen2", "gemma", "window"})
    expect_same_decoding(llama_shape(variant), variant, true);
}

TEST(FusedStep, Gpt2ShapeEqualsTheBlocksStep) {
  // LayerNorm with biases, gelu_new, biases everywhere, learned positions, 4 heads of 6.
  auto c = models::TransformerConfig::gpt2(37, 24, 2, 4);
  c.max_positions = 64;
  c.dropout = 0.0;
  c.attention.causal = true;
  expect_same_decoding(c, "gpt2", true);
}

TEST(FusedStep, PostNormEqualsTheBlocksStep) {
  auto post_norm = models::TransformerConfig::gpt2(37, 24, 2, 4);  // BERT-style post-LN blocks
  post_norm.norm_first = false;
  post_norm.final_layer_norm = false;
  post_norm.max_positions = 64;
  post_norm.dropout = 0.0;
  post_norm.attention.causal = true;
  expect_same_decoding(post_norm, "post-norm", true);
}

TEST(FusedStep, DecoderStacksWithCrossAttentionEqualTheBlocksStep) {
  expect_same_decoder_decoding(false, "post-LN decoder (Marian)");
  expect_same_decoder_decoding(true, "pre-LN decoder");
}

TEST(FusedStep, ShapesItLeavesAloneTakeTheBlocksStep) {
  expect_same_decoding(llama_shape("qk-norm"), "qk-norm", false);
  auto linear = llama_shape("llama");  // an RNN state, not a KV cache
  linear.attention = layers::AttentionSpec::parse("linear:elu");
  linear.attention.causal = true;
  linear.attention.kv_heads = 2;
  linear.attention.key_size = linear.attention.value_size = 8;
  linear.attention.bias = linear.attention.output_bias = false;
  expect_same_decoding(linear, "linear:elu", false);
}

}  // namespace
