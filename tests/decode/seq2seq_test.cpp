// UniLM and encoder-decoder decoding: cached decoding equals the uncached formulations, and
// models trained here on reversal decode it.
#include "attnkit/decode/language_models.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

namespace {

using namespace attnkit;
using models::EncoderDecoderConfig;
using models::EncoderDecoderModel;
using models::HeadsConfig;
using models::TaskInputs;
using models::TaskModel;
using models::TransformerConfig;
using models::unilm_batch;

constexpr int64_t kVocab = 40;

TEST(Unilm, GreedyFollowsTheUncachedArgmaxAndIgnoresBatchmates) {
  torch::manual_seed(8);
  HeadsConfig heads;
  heads.masked_lm = true;
  auto config = TransformerConfig::bert(kVocab, 16, 2, 4, 32);
  config.type_vocab_size = 2;
  TaskModel model(config, heads);
  model->eval();
  const std::vector<std::vector<int64_t>> sources{{11, 12, 13, 14}, {15}};
  const int64_t cls = 1, sep = 2, pad = 0;
  const auto both = decode::unilm_greedy(model, sources, cls, sep, pad, 5);
  ASSERT_EQ(both.size(), 2u);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < sources.size(); ++i) {
    // Decoding a row alone gives what it got next to a row of another length.
    EXPECT_EQ(decode::unilm_greedy(model, {sources[i]}, cls, sep, pad, 5),
              std::vector<std::vector<int64_t>>{both[i]});
    // Every token is the argmax at the previous position of [CLS] src [SEP] prefix [SEP] under
    // the UniLM mask, computed without a cache.
    std::vector<int64_t> prefix;
    for (int64_t token : both[i]) {
      auto b = unilm_batch({sources[i]}, {prefix}, cls, sep, pad);
      TaskInputs in;
      in.input_ids = b.input_ids;
      in.token_type_ids = b.token_type_ids;
      in.attention_mask = b.attention_mask;
      in.mask = b.mask;
      const int64_t at = 1 + sources[i].size() + prefix.size();
      EXPECT_EQ(model->forward(in).masked_lm_logits[0][at].argmax().item<int64_t>(), token);
      prefix.push_back(token);
    }
    EXPECT_LE(both[i].size(), 5u);
  }
  // max_length bounds the uncached input: [CLS] + 4 + [SEP] + prefix + [SEP] <= 8 allows
  // prefixes of 0 and 1 tokens, so two steps.
  EXPECT_EQ(decode::unilm_greedy(model, {sources[0]}, cls, sep, pad, 5, 8)[0].size(),
            std::min<size_t>(both[0].size(), 2));
  EXPECT_TRUE(decode::unilm_greedy(model, {sources[0]}, cls, sep, pad, 5, 6)[0].empty());
}

// Linear attention and cosFormer decode UniLM with their running sums: the source segment is one
// bidirectional step (the prefix summary), each target token a causal step from it. Every step's
// logits equal the full recomputation of [CLS] src [SEP] prefix right-padded to the horizon
// (cosFormer's M), which runs the O(n) prefix-LM op (UniLM prefix lengths + padding).
TEST(Unilm, FeatureStateDecodingEqualsFullRecomputation) {
  torch::NoGradGuard no_grad;
  for (const std::string kind : {"linear:elu", "linear:relu", "cosformer"}) {
    torch::manual_seed(6);
    HeadsConfig heads;
    heads.masked_lm = true;
    auto config = TransformerConfig::bert(kVocab, 16, 2, 4, 32);
    config.type_vocab_size = 2;
    config.attention = layers::AttentionSpec::parse(kind);
    config.dropout = 0;
    TaskModel model(config, heads);
    model->to(torch::kDouble);
    model->eval();
    const std::vector<int64_t> source{11, 12, 13, 14, 15};
    const int64_t cls = 1, sep = 2, pad = 0, steps = 6;
    const int64_t horizon = static_cast<int64_t>(source.size()) + 2 + steps;
    const auto session = decode::start_decoding(*model, {}).session;
    models::DecodingSession& lm = *session;
    lm.start(1, horizon);
    std::vector<int64_t> prompt{cls};
    prompt.insert(prompt.end(), source.begin(), source.end());
    prompt.push_back(sep);
    const auto P = static_cast<int64_t>(prompt.size());
    at::Tensor next = at::tensor(prompt, at::kLong).view({1, P});
    at::Tensor positions = at::arange(P, at::kLong).view({1, P});
    std::vector<int64_t> target;
    for (int64_t t = 0; t < steps; ++t) {
      at::Tensor cached = lm.forward(next, at::ones(next.sizes(), at::kBool), positions);
      // The same sequence without a cache, right-padded to the horizon.
      auto b = unilm_batch({source}, {target}, cls, sep, pad);
      const int64_t n = b.input_ids.size(1);
      auto pad_to = [&](const at::Tensor& x, int64_t value) {
        return at::cat({x, at::full({1, horizon - n}, value, at::kLong)}, 1);
      };
      TaskInputs in;
      in.input_ids = pad_to(b.input_ids, pad);
      in.token_type_ids = pad_to(b.token_type_ids, 1);
      in.attention_mask = pad_to(b.attention_mask, 0);
      in.prefix_lengths = b.prefix_lengths;
      const int64_t at = P - 1 + t;
      at::Tensor full = model->forward(in).masked_lm_logits[0][at];
      EXPECT_LT((cached[0] - full).abs().max().item<double>(), 1e-9) << kind << " step " << t;
      const int64_t token = 3 + (7 * t) % 30;  // any tokens: no argmax ties to worry about
      target.push_back(token);
      next = at::full({1, 1}, token, at::kLong);
      positions = at::full({1, 1}, P + t, at::kLong);
    }
  }
}

TEST(Unilm, LinearGreedyIgnoresBatchmates) {
  // Left padding is never a key of the running sums, so a row decodes as it does alone.
  torch::manual_seed(8);
  HeadsConfig heads;
  heads.masked_lm = true;
  auto config = TransformerConfig::bert(kVocab, 16, 2, 4, 32);
  config.type_vocab_size = 2;
  config.attention = layers::AttentionSpec::parse("linear:elu");
  TaskModel model(config, heads);
  model->to(torch::kDouble);
  model->eval();
  const std::vector<std::vector<int64_t>> sources{{11, 12, 13, 14}, {15}, {16, 17}};
  const auto all = decode::unilm_greedy(model, sources, 1, 2, 0, 5);
  for (size_t i = 0; i < sources.size(); ++i)
    EXPECT_EQ(decode::unilm_greedy(model, {sources[i]}, 1, 2, 0, 5),
              std::vector<std::vector<int64_t>>{all[i]});
}

TEST(Seq2Seq, CachedDecoderEqualsFullDecode) {
  torch::NoGradGuard no_grad;
  for (const std::string kind : {"softmax", "linear:elu"}) {
    torch::manual_seed(4);
    auto spec = layers::AttentionSpec::parse(kind);
    auto config = EncoderDecoderConfig::transformer(20, 20, 16, 2, 2, 32, spec, spec);
    config.encoder.dropout = config.decoder.dropout = 0;
    EncoderDecoderModel model(config);
    model->to(torch::kDouble);
    model->eval();
    const std::vector<std::vector<int64_t>> sources{{3, 4, 5, 6}, {7, 8}};
    models::DecodingRequest request;
    request.prompts = sources;
    const auto session = decode::start_decoding(*model, request).session;
    models::DecodingSession& lm = *session;
    const int64_t B = 2, steps = 6;
    lm.start(B, steps);
    at::Tensor src = at::tensor({3, 4, 5, 6, 7, 8, 0, 0}, at::kLong).view({2, 4});
    at::Tensor src_mask = src.ne(0).to(at::kLong);
    at::Tensor memory = model->encode(src, src_mask);
    at::Tensor target = at::ones({B, 1}, at::kLong);
    at::Tensor next = target;
    for (int64_t t = 0; t < steps; ++t) {
      at::Tensor cached = lm.forward(next, at::ones({B, 1}, at::kBool), at::full({B, 1}, t, at::kLong));
      at::Tensor full = model->decode(target, memory, src_mask).select(1, t);
      EXPECT_LT((cached - full).abs().max().item<double>(), 1e-5) << kind << " step " << t;
      next = torch::randint(3, 20, {B, 1}, at::kLong);
      target = at::cat({target, next}, 1);
    }
  }
}

// ---- trained on reversal -------------------------------------------------------------------
// Symbols 3..9, lengths 3..5; pad 0, [CLS]/BOS 1, [SEP]/EOS 2. Margins: with seeds 0..3 the
// trained models decode all 40 held-out sequences; the tests ask for 90%.
constexpr int64_t kPad = 0, kCls = 1, kSep = 2, kSymbols = 10;

std::vector<std::vector<int64_t>> random_sequences(std::mt19937& rng, int64_t count) {
  std::uniform_int_distribution<int64_t> length(3, 5), symbol(3, kSymbols - 1);
  std::vector<std::vector<int64_t>> out(count);
  for (auto& s : out) {
    const int64_t n = length(rng);
    for (int64_t i = 0; i < n; ++i) s.push_back(symbol(rng));
  }
  return out;
}

std::vector<int64_t> reversed(std::vector<int64_t> s) {
  std::reverse(s.begin(), s.end());
  return s;
}

double exact_match(const std::vector<std::vector<int64_t>>& got,
                   const std::vector<std::vector<int64_t>>& sources) {
  int64_t hits = 0;
  for (size_t i = 0; i < got.size(); ++i) hits += got[i] == reversed(sources[i]);
  return double(hits) / double(got.size());
}

// A UniLM (pre-LN BERT with a masked-LM head) with the given attention trained on reversal for
// `steps` steps of 32 pairs, then its exact match on 40 held-out sequences, decoded greedily.
double unilm_reversal_exact_match(const std::string& attention, int steps, int seed = 0) {
  torch::manual_seed(seed);
  std::mt19937 rng(seed);
  HeadsConfig heads;
  heads.masked_lm = true;
  auto config = TransformerConfig::bert(kSymbols, 32, 2, 4, 64);
  config.dropout = 0;
  config.max_positions = 16;
  config.attention = layers::AttentionSpec::parse(attention);
  // Pre-LN without the embedding LayerNorm: learns reversal in ~300 steps for every seed tried
  // (0..3, exact match 1.0 at 400 steps); post-LN or an embedding LN sat at loss 1.55 for
  // hundreds of steps on some seeds.
  config.norm_first = true;
  config.final_layer_norm = true;
  config.embedding_layer_norm = false;
  TaskModel model(config, heads);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  for (int step = 0; step < steps; ++step) {
    auto sources = random_sequences(rng, 32);
    std::vector<std::vector<int64_t>> targets;
    for (const auto& s : sources) targets.push_back(reversed(s));
    auto b = unilm_batch(sources, targets, kCls, kSep, kPad);
    // The UniLM mask both ways: explicit for softmax, prefix lengths for linear / cosFormer.
    auto loss = models::cross_entropy(model->forward(b.inputs()).masked_lm_logits, b.targets);
    adam.zero_grad();
    loss.backward();
    adam.step();
  }
  model->eval();
  std::mt19937 held_out(99);
  auto sources = random_sequences(held_out, 40);
  auto got = decode::unilm_greedy(model, sources, kCls, kSep, kPad, 8);
  return exact_match(got, sources);
}

TEST(Seq2Seq, UnilmTrainedOnReversalDecodesIt) {
  EXPECT_GE(unilm_reversal_exact_match("softmax", 500), 0.9);
}

// The same with the UniLM mask as prefix lengths (O(n) prefix op in training, running sums from
// the source summary in decoding). At 500 steps linear elu+1 decoded 0.925-0.975 of the held-out
// set (seeds 0-3), too near the bar; at 1000 steps linear gave 1.0 for seeds 0-3 and cosFormer
// 1.0 except one seed at 0.9, with the native and the baseline kernel copies (seed 0: 1.0 for both
// kinds on both). Chance is ~0: 3-5 symbols out of 7 in exact order.
TEST(Seq2Seq, UnilmWithLinearAttentionLearnsReversal) {
  EXPECT_GE(unilm_reversal_exact_match("linear:elu", 1000), 0.8);
}

TEST(Seq2Seq, UnilmWithCosformerLearnsReversal) {
  EXPECT_GE(unilm_reversal_exact_match("cosformer", 1000), 0.8);
}

TEST(Seq2Seq, EncoderDecoderTrainedOnReversalDecodesIt) {
  torch::manual_seed(0);
  std::mt19937 rng(0);
  auto config = EncoderDecoderConfig::transformer(kSymbols, kSymbols, 32, 2, 4, 64);
  config.encoder.dropout = config.decoder.dropout = 0;
  for (auto* stack : {&config.encoder, &config.decoder}) {
    // Pre-LN and learned positions: loss < 0.1 by step 200 for seeds 0..3 (exact match 1.0 at
    // 300 steps); the preset's sinusoidal table (amplitude 1 against 0.02 token embeddings)
    // left some seeds at loss 1.55 after 1500 steps.
    stack->norm_first = true;
    stack->final_layer_norm = true;
    stack->positions = layers::PositionEncoding::Learned;
    stack->max_positions = 16;
  }
  EncoderDecoderModel model(config);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  auto pad_rows = [](const std::vector<std::vector<int64_t>>& rows) {
    int64_t n = 0;
    for (const auto& r : rows) n = std::max<int64_t>(n, r.size());
    at::Tensor t = at::full({int64_t(rows.size()), n}, kPad, at::kLong);
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < rows[i].size(); ++j) t[i][j] = rows[i][j];
    return t;
  };
  for (int step = 0; step < 400; ++step) {
    auto sources = random_sequences(rng, 32);
    std::vector<std::vector<int64_t>> inputs, outputs;
    for (const auto& s : sources) {
      auto r = reversed(s);
      std::vector<int64_t> in{kCls}, out = r;
      in.insert(in.end(), r.begin(), r.end());
      out.push_back(kSep);
      inputs.push_back(in);
      outputs.push_back(out);
    }
    at::Tensor src = pad_rows(sources), tgt = pad_rows(inputs), labels = pad_rows(outputs);
    labels = labels.masked_fill(labels.eq(kPad), models::kIgnoreLabel);
    at::Tensor logits = model->forward(src, tgt, src.ne(kPad).to(at::kLong), tgt.ne(kPad).to(at::kLong));
    auto loss = models::cross_entropy(logits, labels);
    adam.zero_grad();
    loss.backward();
    adam.step();
  }
  model->eval();
  std::mt19937 held_out(99);
  auto sources = random_sequences(held_out, 40);
  models::DecodingRequest request;
  request.prompts = sources;
  const auto session = decode::start_decoding(*model, request).session;
  models::DecodingSession& lm = *session;
  decode::GenerationConfig generation;
  generation.max_new_tokens = 8;
  generation.eos_token_ids = {kSep};
  std::vector<std::vector<int64_t>> prompts(sources.size(), std::vector<int64_t>{kCls});
  for (auto strategy : {decode::Strategy::Greedy, decode::Strategy::Beam}) {
    generation.strategy = strategy;
    torch::NoGradGuard no_grad;
    auto results = decode::generate(lm, prompts, generation);
    std::vector<std::vector<int64_t>> got;
    for (auto& r : results) {
      auto t = r[0].tokens;
      if (!t.empty() && t.back() == kSep) t.pop_back();
      got.push_back(t);
    }
    EXPECT_GE(exact_match(got, sources), 0.9) << decode::strategy_name(strategy);
  }
}

}  // namespace
