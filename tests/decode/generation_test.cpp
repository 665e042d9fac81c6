// Decoding strategies: greedy, beam search (HF semantics), sampling filters, processors.
#include "attnkit/decode/generation.h"
#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"
#include "attnkit/models/task_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace {

using namespace attnkit;
using decode::GenerationConfig;
using decode::Strategy;

models::TaskModel tiny_lm(int64_t vocab, const std::string& kind = "softmax", uint64_t seed = 3,
                          double init_std = 0.5) {
  auto config = models::TransformerConfig::gpt2(vocab, 16, 2, 2);
  config.attention = layers::AttentionSpec::parse(kind);
  config.attention.causal = true;
  config.dropout = 0.0;
  config.max_positions = 64;
  models::HeadsConfig heads;
  heads.causal_lm = true;
  torch::manual_seed(seed);
  models::TaskModel model(config, heads);
  model->transformer->reset_parameters(init_std);  // peaked distributions: distinct scores, no near-ties
  model->to(torch::kDouble);
  model->eval();
  return model;
}

std::vector<std::vector<decode::Hypothesis>> run(models::TaskModel& model,
                                                 const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerationConfig& config) {
  torch::NoGradGuard no_grad;
  const auto lm = decode::start_decoding(*model, {}).session;
  return decode::generate(*lm, prompts, config);
}

GenerationConfig greedy(int64_t max_new) {
  GenerationConfig c;
  c.strategy = Strategy::Greedy;
  c.max_new_tokens = max_new;
  return c;
}

// log p(sequence | prompt) by a full forward (no cache): the independent scorer.
double sequence_logprob(models::TaskModel& model, const std::vector<int64_t>& prompt,
                        const std::vector<int64_t>& tokens) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), tokens.begin(), tokens.end());
  models::TaskInputs in;
  in.input_ids = at::tensor(all, at::kLong).view({1, -1});
  at::Tensor logp = model->forward(in).causal_lm_logits[0].log_softmax(-1);
  double total = 0;
  for (size_t i = 0; i < tokens.size(); ++i)
    total += logp[int64_t(prompt.size() + i - 1)][tokens[i]].item<double>();
  return total;
}

TEST(Generation, GreedyIsArgmaxOfFullForward) {
  auto model = tiny_lm(11);
  const std::vector<int64_t> prompt = {1, 2, 3};
  auto result = run(model, {prompt}, greedy(6));
  ASSERT_EQ(result[0][0].tokens.size(), 6u);
  torch::NoGradGuard no_grad;
  std::vector<int64_t> seq = prompt;
  for (int64_t t = 0; t < 6; ++t) {
    models::TaskInputs in;
    in.input_ids = at::tensor(seq, at::kLong).view({1, -1});
    seq.push_back(model->forward(in).causal_lm_logits[0][-1].argmax().item<int64_t>());
  }
  EXPECT_EQ(std::vector<int64_t>(seq.begin() + 3, seq.end()), result[0][0].tokens);
  EXPECT_NEAR(result[0][0].score, sequence_logprob(model, prompt, result[0][0].tokens), 1e-9);
}

TEST(Generation, BatchedLeftPaddedEqualsOneByOne) {
  for (const std::string kind : {"softmax", "linear:elu", "cosformer"}) {
    auto model = tiny_lm(13, kind);
    const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3, 4, 5}, {6}, {7, 8, 9}};
    auto batched = run(model, prompts, greedy(7));
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto alone = run(model, {prompts[i]}, greedy(7));
      EXPECT_EQ(batched[i][0].tokens, alone[0][0].tokens) << kind << " prompt " << i;
      // cosFormer's M is the padded width + new tokens, so only tokens are compared for it.
      if (kind != "cosformer") {
        EXPECT_NEAR(batched[i][0].score, alone[0][0].score, 1e-9);
      }
    }
  }
}

TEST(Generation, EosStopsARowAndPadsIt) {
  auto model = tiny_lm(11);
  auto free_run = run(model, {{1, 2}}, greedy(6));
  const int64_t eos = free_run[0][0].tokens[2];
  auto config = greedy(6);
  config.eos_token_ids = {eos};
  auto stopped = run(model, {{1, 2}}, config);
  auto first = std::find(free_run[0][0].tokens.begin(), free_run[0][0].tokens.end(), eos);
  std::vector<int64_t> expected(free_run[0][0].tokens.begin(), first + 1);
  EXPECT_EQ(stopped[0][0].tokens, expected);
  // min_new_tokens: EOS forbidden before it.
  config.min_new_tokens = 5;
  auto late = run(model, {{1, 2}}, config);
  ASSERT_GE(late[0][0].tokens.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(late[0][0].tokens[i], eos);
}

TEST(Generation, StopStrings) {
  auto model = tiny_lm(11);
  auto free_run = run(model, {{1, 2}}, greedy(6));
  auto config = greedy(6);
  config.detokenize = [](const std::vector<int64_t>& ids) {
    std::string s;
    for (auto id : ids) s += "<" + std::to_string(id) + ">";
    return s;
  };
  config.stop_strings = {"<" + std::to_string(free_run[0][0].tokens[1]) + ">"};
  auto stopped = run(model, {{1, 2}}, config);
  auto pos = std::find(free_run[0][0].tokens.begin(), free_run[0][0].tokens.end(),
                       free_run[0][0].tokens[1]);
  EXPECT_EQ(stopped[0][0].tokens, std::vector<int64_t>(free_run[0][0].tokens.begin(), pos + 1));
}

TEST(Generation, BeamWidthOneEqualsGreedy) {
  auto model = tiny_lm(11);
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5}};
  auto g = run(model, prompts, greedy(6));
  GenerationConfig beam = greedy(6);
  beam.strategy = Strategy::Beam;
  beam.num_beams = 1;
  beam.length_penalty = 0.0;  // the score is then the plain sum of log-probabilities
  auto b = run(model, prompts, beam);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(b[i][0].tokens, g[i][0].tokens);
    EXPECT_NEAR(b[i][0].score, g[i][0].score, 1e-9);
  }
  // With an EOS and early stopping, beam width 1 stops where greedy does.
  auto eos_config = greedy(6);
  eos_config.eos_token_ids = {g[0][0].tokens[2]};
  beam.eos_token_ids = eos_config.eos_token_ids;
  beam.early_stopping = true;
  auto g2 = run(model, prompts, eos_config);
  auto b2 = run(model, prompts, beam);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(b2[i][0].tokens, g2[i][0].tokens);
}

TEST(Generation, BeamSearchWithEnoughBeamsFindsTheBestSequence) {
  // Vocabulary 5, 3 new tokens: 125 sequences, scored one by one by a full forward.
  const int64_t V = 5, T = 3;
  for (uint64_t seed : {1, 2, 3}) {
    auto model = tiny_lm(V, "softmax", seed, 0.3);
    const std::vector<int64_t> prompt = {1, 2};
    std::vector<std::pair<double, std::vector<int64_t>>> all;
    for (int64_t code = 0; code < V * V * V; ++code) {
      std::vector<int64_t> seq = {code / (V * V), (code / V) % V, code % V};
      all.push_back({sequence_logprob(model, prompt, seq), seq});
    }
    std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.first > b.first; });
    GenerationConfig beam = greedy(T);
    beam.strategy = Strategy::Beam;
    beam.num_beams = V * V;  // every two-token prefix survives: exact search
    beam.num_return_sequences = 5;
    auto result = run(model, {prompt}, beam);
    ASSERT_EQ(result[0].size(), 5u);
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(result[0][i].tokens, all[i].second) << "seed " << seed << " rank " << i;
      EXPECT_NEAR(result[0][i].score, all[i].first / T, 1e-9);  // length_penalty 1
    }
  }
}

TEST(Generation, TopKOneEqualsGreedy) {
  auto model = tiny_lm(11);
  GenerationConfig sample = greedy(8);
  sample.strategy = Strategy::Sample;
  sample.top_k = 1;
  sample.temperature = 1.7;
  sample.seed = 42;
  auto g = run(model, {{1, 2, 3}}, greedy(8));
  auto s = run(model, {{1, 2, 3}}, sample);
  EXPECT_EQ(s[0][0].tokens, g[0][0].tokens);
}

TEST(Generation, SameSeedSameSamples) {
  auto model = tiny_lm(11, "softmax", 3, 0.05);  // flat distributions: samples vary
  GenerationConfig sample = greedy(12);
  sample.strategy = Strategy::Sample;
  sample.num_return_sequences = 3;
  sample.seed = 5;
  auto a = run(model, {{1, 2}, {3}}, sample);
  auto b = run(model, {{1, 2}, {3}}, sample);
  for (size_t p = 0; p < 2; ++p)
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a[p][i].tokens, b[p][i].tokens);
  sample.seed = 6;
  auto c = run(model, {{1, 2}, {3}}, sample);
  EXPECT_NE(a[0][0].tokens, c[0][0].tokens);
  EXPECT_NE(a[0][0].tokens, a[0][1].tokens);  // the copies of one prompt draw differently
}

TEST(Generation, TopPKeepsTheSmallestSetReachingP) {
  at::Tensor probs = at::tensor({0.05, 0.5, 0.15, 0.3}, at::kDouble).view({1, 4});
  at::Tensor logits = probs.log();
  auto kept = [&](double p) {
    at::Tensor f = decode::top_p_filter(logits, p)[0];
    std::vector<int64_t> out;
    for (int64_t i = 0; i < 4; ++i)
      if (std::isfinite(f[i].item<double>())) out.push_back(i);
    return out;
  };
  EXPECT_EQ(kept(0.5), (std::vector<int64_t>{1}));
  EXPECT_EQ(kept(0.4), (std::vector<int64_t>{1}));
  EXPECT_EQ(kept(0.79), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(kept(0.81), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(kept(1.0), (std::vector<int64_t>{0, 1, 2, 3}));
  // Kept logits are unchanged.
  at::Tensor f = decode::top_p_filter(logits, 0.81);
  EXPECT_DOUBLE_EQ(f[0][1].item<double>(), logits[0][1].item<double>());
}

TEST(Generation, TopKAndMinP) {
  at::Tensor logits = at::tensor({0.05, 0.5, 0.15, 0.3}, at::kDouble).log().view({1, 4});
  at::Tensor k2 = decode::top_k_filter(logits, 2)[0];
  EXPECT_TRUE(std::isinf(k2[0].item<double>()) && std::isinf(k2[2].item<double>()));
  EXPECT_TRUE(std::isfinite(k2[1].item<double>()) && std::isfinite(k2[3].item<double>()));
  // min_p 0.3: keep p >= 0.15.
  at::Tensor m = decode::min_p_filter(logits, 0.3)[0];
  EXPECT_TRUE(std::isinf(m[0].item<double>()));
  EXPECT_TRUE(std::isfinite(m[2].item<double>()));
}

TEST(Generation, RepetitionPenaltyAndNoRepeatNgram) {
  at::Tensor scores = at::tensor({2.0, -2.0, 1.0, -1.0}, at::kDouble);
  decode::apply_repetition_penalty(scores, {0, 1, 1}, 2.0);
  EXPECT_DOUBLE_EQ(scores[0].item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(scores[1].item<double>(), -4.0);
  EXPECT_DOUBLE_EQ(scores[2].item<double>(), 1.0);
  // History 1 2 3 1 2: the bigram (2, 3) and trigram (1, 2, 3) exist.
  EXPECT_EQ(decode::banned_ngram_tokens({1, 2, 3, 1, 2}, 3), (std::vector<int64_t>{3}));
  EXPECT_EQ(decode::banned_ngram_tokens({1, 2, 3, 1, 2}, 2), (std::vector<int64_t>{3}));
  EXPECT_TRUE(decode::banned_ngram_tokens({1, 2}, 3).empty());
  // In decoding: no trigram repeats.
  auto model = tiny_lm(5);
  GenerationConfig c = greedy(20);
  c.no_repeat_ngram_size = 2;
  auto result = run(model, {{1, 2}}, c);
  std::vector<int64_t> seq = {1, 2};
  seq.insert(seq.end(), result[0][0].tokens.begin(), result[0][0].tokens.end());
  std::set<std::pair<int64_t, int64_t>> seen;
  for (size_t i = 0; i + 1 < seq.size(); ++i)
    EXPECT_TRUE(seen.insert({seq[i], seq[i + 1]}).second) << "bigram repeats at " << i;
}

TEST(Generation, ConfigErrors) {
  GenerationConfig c;
  c.strategy = Strategy::Beam;
  c.num_beams = 2;
  c.num_return_sequences = 3;
  EXPECT_THROW(c.validate(), attnkit::Error);
  c = GenerationConfig{};
  c.top_p = 0;
  EXPECT_THROW(c.validate(), attnkit::Error);
  c = GenerationConfig{};
  c.stop_strings = {"x"};
  EXPECT_THROW(c.validate(), attnkit::Error);
  EXPECT_THROW(decode::parse_strategy("nucleus"), attnkit::Error);
}

}  // namespace
