// The generation driver of `attnkit generate` (decode/generation_run.h): streaming callback,
// batching, the choice of language model, EOS/pad defaults and the --json document.
#include "attnkit/decode/generation_run.h"
#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"
#include "attnkit/models/task_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace {

using namespace attnkit;
using decode::Strategy;

models::TaskModel tiny_run_lm(bool causal = true, bool masked = false) {
  auto config = models::TransformerConfig::gpt2(29, 16, 2, 2);
  config.attention.causal = causal;
  config.dropout = 0.0;
  config.max_positions = 64;
  models::HeadsConfig heads;
  heads.causal_lm = causal;
  heads.masked_lm = masked;
  torch::manual_seed(5);
  models::TaskModel model(config, heads);
  model->transformer->reset_parameters(0.5);  // peaked distributions: no near-ties
  model->to(torch::kDouble);
  return model;
}

decode::GenerationRequest request(const models::TaskModel& model,
                                  std::vector<std::vector<int64_t>> prompts, Strategy strategy) {
  decode::GenerationRequest r;
  r.model = model.ptr();
  r.name = "tiny";
  r.prompts = std::move(prompts);
  r.config.strategy = strategy;
  r.config.max_new_tokens = 7;
  r.config.num_beams = 3;
  return r;
}

const std::vector<std::vector<int64_t>> kPrompts = {{3, 4, 5, 6, 7}, {8}, {10, 11, 12}};

TEST(GenerationRun, CallbackStreamsExactlyTheReturnedTokens) {
  for (Strategy strategy : {Strategy::Greedy, Strategy::Sample, Strategy::Beam}) {
    auto r = request(tiny_run_lm(), kPrompts, strategy);
    r.config.eos_token_ids = {2};  // rows may end early
    r.config.seed = 17;
    std::map<int64_t, std::vector<int64_t>> streamed;
    r.on_token = [&](int64_t prompt, int64_t token) { streamed[prompt].push_back(token); };
    const auto results = decode::run_generation(r);
    ASSERT_EQ(results.size(), kPrompts.size());
    for (size_t p = 0; p < kPrompts.size(); ++p) {
      ASSERT_EQ(results[p].size(), 1u);
      EXPECT_FALSE(results[p][0].tokens.empty());
      EXPECT_EQ(streamed[int64_t(p)], results[p][0].tokens)
          << decode::strategy_name(strategy) << " prompt " << p;
    }
  }
}

TEST(GenerationRun, BatchedPromptsGiveTheIdsOfOneAtATime) {
  const auto model = tiny_run_lm();
  for (Strategy strategy : {Strategy::Greedy, Strategy::Beam}) {
    const auto batched = decode::run_generation(request(model, kPrompts, strategy));
    for (size_t p = 0; p < kPrompts.size(); ++p) {
      const auto alone = decode::run_generation(request(model, {kPrompts[p]}, strategy));
      EXPECT_EQ(alone[0][0].tokens, batched[p][0].tokens) << decode::strategy_name(strategy) << " " << p;
      EXPECT_NEAR(alone[0][0].score, batched[p][0].score, 1e-9);
    }
  }
}

TEST(GenerationRun, BadPromptsAndModelsAreOneLineErrors) {
  const auto model = tiny_run_lm();
  EXPECT_THROW(decode::run_generation(request(model, {{3, 29}}, Strategy::Greedy)), Error);
  EXPECT_THROW(decode::run_generation(request(model, {{}}, Strategy::Greedy)), Error);
  models::DecodingRequest named;
  named.name = "dir";
  try {
    decode::start_decoding(*tiny_run_lm(false, false), named);
    FAIL() << "no LM head accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "generate: dir has neither a causal-LM nor a masked-LM head");
  }
  const auto unilm = tiny_run_lm(false, true);
  EXPECT_TRUE(models::decodes_as_unilm(unilm->heads()));
  EXPECT_STREQ(unilm->decoding_traits().end_token, "[SEP]");
  EXPECT_TRUE(unilm->decoding_traits().prompts_take_special_tokens);
  EXPECT_STREQ(model->decoding_traits().end_token, "<|endoftext|>");
  EXPECT_FALSE(model->decoding_traits().prompts_take_special_tokens);
  models::DecodingRequest conditioned = named;
  conditioned.condition_class = 1;
  EXPECT_THROW(decode::start_decoding(*unilm.ptr(), conditioned), Error);
  EXPECT_NE(decode::start_decoding(*unilm.ptr(), named).session, nullptr);
}

TEST(GenerationRun, SpecialTokenDefaults) {
  decode::GenerationConfig c;
  const nlohmann::json none;
  decode::set_special_tokens(c, none, {}, false, 50, 0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{50}));
  EXPECT_EQ(c.pad_token_id, 50);  // the first EOS
  decode::set_special_tokens(c, nlohmann::json{{"eos_token_id", {7, 8}}}, {}, false, 50, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(c.pad_token_id, 7);
  decode::set_special_tokens(c, nlohmann::json{{"eos_token_id", 7}, {"pad_token_id", 0}}, {3}, false,
                             50, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{3}));  // given ids win
  EXPECT_EQ(c.pad_token_id, 0);
  decode::set_special_tokens(c, nlohmann::json{{"eos_token_id", 7}}, {}, true, 50, 4);
  EXPECT_TRUE(c.eos_token_ids.empty());  // --no-eos
  EXPECT_EQ(c.pad_token_id, 4);          // the model's pad
}

TEST(GenerationRun, ResultsJson) {
  std::vector<std::vector<decode::Hypothesis>> results = {{{{5, 6}, -1.5}, {{7}, -2.0}}};
  const auto j = decode::results_json(Strategy::Beam, {"hi"}, {{1, 2}}, results,
                                      [](const std::vector<int64_t>& ids) {
                                        return std::to_string(ids.size()) + " tokens";
                                      });
  EXPECT_EQ(j["strategy"], "beam");
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(j["results"][0]["prompt"], "hi");
  EXPECT_EQ(j["results"][0]["prompt_ids"], nlohmann::json({1, 2}));
  EXPECT_EQ(j["results"][0]["sequences"][0]["ids"], nlohmann::json({5, 6}));
  EXPECT_DOUBLE_EQ(j["results"][0]["sequences"][0]["score"].get<double>(), -1.5);
  EXPECT_EQ(j["results"][0]["sequences"][1]["text"], "1 tokens");
  const auto bare = decode::results_json(Strategy::Greedy, {"1 2"}, {{1, 2}}, {{{{5}, 0.0}}}, nullptr);
  EXPECT_FALSE(bare["results"][0]["sequences"][0].contains("text"));
}

}  // namespace
