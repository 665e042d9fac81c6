// Cached decoding equals a full recomputation at every step: KV cache (softmax), RNN state
// (linear attention, cosFormer), GPT-2-shaped float64 models (also with heads physically pruned),
// left-padded batches.
#include "attnkit/decode/incremental.h"
#include "attnkit/decode/language_models.h"
#include "attnkit/decode/latency.h"
#include "attnkit/error.h"
#include "attnkit/models/task_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace {

using namespace attnkit;

// `pruned`: a GPT-2 with 4 heads a layer, heads physically removed so that the layers differ.
// `dtype` float: the float32 one-row steps run attnkit's gemv kernel (layers/row_linear.h);
// hidden 20 and an FFN of 80 are no multiple of its 16-float vectors, a vocabulary of 23 no
// multiple of its 4-row blocks. `kind` "A|B": a hybrid, layer 0 of kind A and layer 1 of kind B
// (TransformerConfig::layer_attention_specs).
models::TaskModel tiny_gpt2(const std::string& kind, int64_t condition_classes = 0,
                            bool pruned = false, at::ScalarType dtype = at::kDouble) {
  auto config = models::TransformerConfig::gpt2(23, dtype == at::kDouble ? 16 : 20, 2, pruned ? 4 : 2);
  const auto bar = kind.find('|');
  config.attention = layers::AttentionSpec::parse(kind.substr(0, bar));
  config.attention.causal = true;
  if (bar != std::string::npos) {
    layers::AttentionSpec second = layers::AttentionSpec::parse(kind.substr(bar + 1));
    second.causal = true;
    config.layer_attention_specs[1] = second;
  }
  config.dropout = 0.0;
  config.max_positions = 64;
  models::HeadsConfig heads;
  heads.causal_lm = true;
  if (condition_classes > 0) {
    config.condition_size = 4;
    heads.condition_classes = condition_classes;
  }
  torch::manual_seed(7);
  models::TaskModel model(config, heads);
  if (pruned) {
    model->transformer->prune_heads({{0, {1, 3}}, {1, {0}}});
    EXPECT_EQ(model->transformer->heads_per_layer(), (std::vector<int64_t>{2, 3}));
  }
  model->to(dtype);
  model->eval();
  if (condition_classes > 0) {
    // Conditional LN's dense layers start at zero; give them values so the class matters.
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key().find("condition_to") != std::string::npos) p.value().normal_(0, 0.5);
  }
  return model;
}

// Full recomputation: logits [B, T, V] of the whole (left-padded) sequence, right padded to
// `columns` columns (cosFormer's parallel M = the padded length).
at::Tensor full_logits(models::TaskModel& model, const at::Tensor& ids, const at::Tensor& valid,
                       const at::Tensor& positions, int64_t columns,
                       const c10::optional<at::Tensor>& condition_ids = c10::nullopt) {
  const int64_t B = ids.size(0), T = ids.size(1);
  models::TaskInputs in;
  in.input_ids = at::cat({ids, at::zeros({B, columns - T}, at::kLong)}, 1);
  in.attention_mask = at::cat({valid, at::zeros({B, columns - T}, at::kBool)}, 1);
  in.position_ids = at::cat({positions, at::zeros({B, columns - T}, at::kLong)}, 1);
  in.condition_ids = condition_ids;
  return model->forward(in).causal_lm_logits.narrow(1, 0, T);
}

// rows = 1: one sequence, so every step feeds one row (the matrix-vector path of
// layers/row_linear.h); rows = 3: a left-padded batch (float: the few-row kernel; double:
// at::linear).
void check_kind(const std::string& kind, bool cosformer_horizon, int64_t condition = -1,
                bool pruned = false, int64_t rows = 3, at::ScalarType dtype = at::kDouble) {
  torch::NoGradGuard no_grad;
  auto model = tiny_gpt2(kind, condition >= 0 ? 3 : 0, pruned, dtype);
  const double tolerance = dtype == at::kDouble ? 1e-5 : 1e-4;
  // Three prompts of lengths 5, 2, 4: left padded to 5 columns.
  std::vector<std::vector<int64_t>> prompts = {{3, 4, 5, 6, 7}, {8, 9}, {10, 11, 12, 13}};
  prompts.resize(static_cast<size_t>(rows));
  const int64_t B = rows, W = 5, steps = 6, horizon = W + steps;
  at::Tensor ids = at::zeros({B, W}, at::kLong), valid = at::zeros({B, W}, at::kBool);
  for (int64_t r = 0; r < B; ++r)
    for (size_t i = 0; i < prompts[r].size(); ++i) {
      ids[r][W - int64_t(prompts[r].size()) + int64_t(i)] = prompts[r][i];
      valid[r][W - int64_t(prompts[r].size()) + int64_t(i)] = true;
    }
  at::Tensor positions = decode::positions_from_valid(valid);
  models::DecodingRequest request;
  request.condition_class = condition;
  const auto lm = decode::start_decoding(*model, request).session;
  lm->start(B, horizon);
  c10::optional<at::Tensor> condition_ids, condition_vector;
  if (condition >= 0) {
    condition_ids = at::full({B}, condition, at::kLong);
    condition_vector = model->condition_embedding->forward(*condition_ids);
  }

  // Prefill: every real column's logits, not only the last (the stack's session), and the
  // decoding session's logits at the last column.
  decode::IncrementalModel stack(model->transformer, B, horizon, c10::nullopt, c10::nullopt,
                                 condition_vector);
  at::Tensor h = stack.forward(ids, valid, positions);
  at::Tensor head = model->transformer->word_embeddings();
  at::Tensor cached = at::linear(h, head);
  EXPECT_TRUE(torch::allclose(lm->forward(ids, valid, positions), cached.select(1, W - 1),
                              tolerance, tolerance))
      << kind << " prefill, the session's logits";
  at::Tensor full = full_logits(model, ids, valid, positions, cosformer_horizon ? horizon : W,
                                condition_ids);
  at::Tensor real = valid.unsqueeze(-1).expand_as(cached);
  EXPECT_TRUE(torch::allclose(cached.masked_select(real), full.masked_select(real), tolerance,
                              tolerance))
      << kind << " prefill";
  torch::manual_seed(11);
  for (int64_t step = 0; step < steps; ++step) {
    at::Tensor next = torch::randint(1, 23, {B, 1}, at::kLong);
    at::Tensor next_pos = positions.select(1, positions.size(1) - 1).unsqueeze(1) + 1;
    ids = at::cat({ids, next}, 1);
    valid = at::cat({valid, at::ones({B, 1}, at::kBool)}, 1);
    positions = at::cat({positions, next_pos}, 1);
    at::Tensor logits = lm->forward(next, at::ones({B, 1}, at::kBool), next_pos);
    at::Tensor reference = full_logits(model, ids, valid, positions,
                                       cosformer_horizon ? horizon : ids.size(1), condition_ids)
                               .select(1, ids.size(1) - 1);
    const double diff = (logits - reference).abs().max().item<double>();
    EXPECT_LT(diff, tolerance) << kind << " step " << step;
  }
}

TEST(Incremental, SoftmaxKVCacheEqualsFullRecomputation) { check_kind("softmax", false); }
TEST(Incremental, LinearStateEqualsFullRecomputation) { check_kind("linear:elu", false); }
TEST(Incremental, LinearReluStateEqualsFullRecomputation) { check_kind("linear:relu", false); }
TEST(Incremental, TrainedFeatureMapStatesEqualFullRecomputation) {
  check_kind("linear:t2r", false);
  check_kind("linear:hedgehog:5", false);
}
TEST(Incremental, CosformerStateEqualsParallelOpWithHorizonM) { check_kind("cosformer", true); }
TEST(Incremental, OneRowStepsEqualFullRecomputation) {
  check_kind("softmax", false, -1, false, 1);
  check_kind("linear:elu", false, -1, false, 1);
  check_kind("cosformer", true, -1, false, 1);
}
TEST(Incremental, FloatOneRowStepsEqualFullRecomputation) {
  check_kind("softmax", false, -1, false, 1, at::kFloat);
  check_kind("linear:elu", false, -1, false, 1, at::kFloat);
  check_kind("cosformer", true, -1, false, 1, at::kFloat);
  check_kind("softmax", false, -1, true, 1, at::kFloat);
}
TEST(Incremental, FloatFewRowStepsEqualFullRecomputation) {
  check_kind("softmax", false, -1, false, 3, at::kFloat);
  check_kind("linear:elu", false, -1, false, 3, at::kFloat);
  check_kind("cosformer", true, -1, false, 3, at::kFloat);
  check_kind("softmax", false, -1, true, 3, at::kFloat);
}
// Hybrids: each layer keeps its own state (KV cache or RNN state) in one decoding session.
TEST(Incremental, HybridStatesEqualFullRecomputation) {
  check_kind("softmax|linear:hedgehog:5", false);
  check_kind("linear:t2r|softmax", false);
  check_kind("softmax|cosformer", true);
  check_kind("softmax|linear:elu", false, -1, false, 1, at::kFloat);
  check_kind("linear:hedgehog|softmax", false, -1, true);
}
TEST(Incremental, ConditionalLayerNormClassId) { check_kind("softmax", false, 2); }
TEST(Incremental, PrunedSoftmaxKVCacheEqualsFullRecomputation) { check_kind("softmax", false, -1, true); }
TEST(Incremental, PrunedLinearStateEqualsFullRecomputation) { check_kind("linear:elu", false, -1, true); }

// Beam search reorders the cross-attention cache at every step; the cache copies nothing when
// rows only trade places among beams of one source (equal rows), and copies otherwise. Either
// way its output equals a cache made from the reordered memory.
TEST(Incremental, CrossAttentionCacheSelectRowsEqualsReorderedMemory) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  layers::MultiHeadAttention mha(layers::MultiHeadAttentionOptions(8, 2));
  // 3 sources × 2 beams, source 1 padded at its last 2 columns.
  at::Tensor memory = torch::randn({3, 5, 8}).repeat_interleave(2, 0);
  at::Tensor padding = torch::ones({6, 5}, at::kBool);
  padding.narrow(0, 2, 2).narrow(1, 3, 2).fill_(false);
  decode::CrossAttentionCache cache(*mha, memory, padding);
  at::Tensor x = torch::randn({6, 1, 8});
  for (const std::vector<int64_t>& order :
       {std::vector<int64_t>{1, 0, 3, 3, 5, 4}, {2, 2, 0, 1, 5, 5}, {1, 0, 2, 3, 4, 4},
        {5, 4, 3, 2, 1, 0}}) {
    const at::Tensor index = torch::tensor(order, at::kLong);
    cache.select_rows(index);
    memory = memory.index_select(0, index);
    padding = padding.index_select(0, index);
    decode::CrossAttentionCache fresh(*mha, memory, padding);
    EXPECT_TRUE(torch::allclose(mha->step(x, cache), mha->step(x, fresh), 1e-5, 1e-5))
        << order[0] << order[1] << order[2] << order[3] << order[4] << order[5];
  }
  EXPECT_THROW(cache.select_rows(torch::tensor({0, 6}, at::kLong)), attnkit::Error);
}

// A beam search's expansion (each source's memory row read by its consecutive beams): the block
// path (each source's keys read once for its beams' queries, 1 and 3 query positions per row)
// equals a cache made from the expanded memory, and so does any later reordering.
TEST(Incremental, CrossAttentionCacheExpandedToBeamsEqualsExpandedMemory) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  layers::MultiHeadAttention mha(layers::MultiHeadAttentionOptions(8, 2));
  const at::Tensor memory = torch::randn({3, 5, 8});
  at::Tensor padding = torch::ones({3, 5}, at::kBool);
  padding[1].narrow(0, 3, 2).fill_(false);
  decode::CrossAttentionCache cache(*mha, memory, padding);
  const at::Tensor expand = torch::tensor({0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}, at::kLong);
  cache.select_rows(expand);
  decode::CrossAttentionCache fresh(*mha, memory.index_select(0, expand),
                                    padding.index_select(0, expand));
  for (int64_t n : {1, 3}) {
    const at::Tensor x = torch::randn({12, n, 8});
    EXPECT_TRUE(torch::allclose(mha->step(x, cache), mha->step(x, fresh), 1e-5, 1e-5)) << n;
  }
  const at::Tensor reorder = torch::tensor({1, 1, 3, 0, 4, 7, 5, 5, 8, 9, 10, 11}, at::kLong);
  cache.select_rows(reorder);
  fresh.select_rows(reorder);
  const at::Tensor x = torch::randn({12, 1, 8});
  EXPECT_TRUE(torch::allclose(mha->step(x, cache), mha->step(x, fresh), 1e-5, 1e-5));
}

TEST(Incremental, CosformerHorizonIsEnforced) {
  torch::NoGradGuard no_grad;
  auto model = tiny_gpt2("cosformer");
  decode::IncrementalModel session(model->transformer, 1, 3);
  auto ids = at::ones({1, 3}, at::kLong);
  session.forward(ids, at::ones({1, 3}, at::kBool), at::arange(3, at::kLong).view({1, 3}));
  EXPECT_THROW(session.forward(at::ones({1, 1}, at::kLong), at::ones({1, 1}, at::kBool),
                               at::full({1, 1}, 3, at::kLong)),
               attnkit::Error);
}

TEST(Incremental, RnnStateHasFixedSize) {
  torch::NoGradGuard no_grad;
  for (const std::string kind : {"linear:elu", "cosformer"}) {
    auto model = tiny_gpt2(kind);
    decode::IncrementalModel session(model->transformer, 1, 40);
    session.forward(at::ones({1, 4}, at::kLong), at::ones({1, 4}, at::kBool),
                    at::arange(4, at::kLong).view({1, 4}));
    const int64_t after_prompt = session.state_bytes();
    for (int64_t t = 4; t < 30; ++t)
      session.forward(at::ones({1, 1}, at::kLong), at::ones({1, 1}, at::kBool),
                      at::full({1, 1}, t, at::kLong));
    EXPECT_EQ(session.state_bytes(), after_prompt) << kind;
  }
  auto model = tiny_gpt2("softmax");
  decode::IncrementalModel session(model->transformer, 1, 40);
  session.forward(at::ones({1, 4}, at::kLong), at::ones({1, 4}, at::kBool),
                  at::arange(4, at::kLong).view({1, 4}));
  const int64_t after_prompt = session.state_bytes();
  session.forward(at::ones({1, 1}, at::kLong), at::ones({1, 1}, at::kBool),
                  at::full({1, 1}, 4, at::kLong));
  EXPECT_GT(session.state_bytes(), after_prompt);
}

TEST(Incremental, UnsupportedKindsAreClearErrors) {
  auto model = tiny_gpt2("synthesizer-random");
  try {
    decode::IncrementalModel session(model->transformer, 1, 8);
    FAIL() << "no error";
  } catch (const attnkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("synthesizer-random"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace attnkit {
namespace {

TEST(TokenLatency, StateSizesAndBadArguments) {
  const auto softmax = decode::random_causal_lm("softmax", 1, 16, 2, 30, 40);
  const auto linear = decode::random_causal_lm("linear:elu", 1, 16, 2, 30, 40);
  // The KV cache grows with the position; the linear state does not.
  EXPECT_LT(decode::token_latency(softmax, 4, 2).state_bytes, decode::token_latency(softmax, 20, 2).state_bytes);
  EXPECT_EQ(decode::token_latency(linear, 4, 2).state_bytes, decode::token_latency(linear, 20, 2).state_bytes);
  EXPECT_GT(decode::token_latency(linear, 4, 2).ms_per_token, 0.0);
  EXPECT_THROW(decode::token_latency(softmax, 39, 2), Error);
  EXPECT_THROW(decode::token_latency(softmax, 0, 2), Error);
}

}  // namespace
}  // namespace attnkit
