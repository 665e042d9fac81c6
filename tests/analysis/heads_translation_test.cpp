// The translation task of the head analysis (Michel et al.'s experiment on an encoder-decoder):
//   - at every site (encoder self, decoder self, decoder cross) the gate gradient E|∂L/∂ξ_h| of
//     the teacher-forced target cross entropy equals a central finite difference of the loss in
//     ξ_h (float64); on a one-token source and target the per-token importance equals it too;
//   - the importance's divisor is the target tokens; padding of sources and targets changes
//     nothing; per-layer normalisation is per (site, layer) row;
//   - ablations and the pruning profile run over the three sites (the default metric is the
//     teacher-forced token accuracy), with heads masked per site;
//   - shapes that do not match are one-line errors.
#include "attnkit/analysis/heads.h"
#include "attnkit/error.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace attnkit {
namespace {

using analysis::HeadMask;

// Two layers, four heads per site, float64, weights ~ N(0, 0.5) so that heads differ.
models::EncoderDecoderModel tiny_translation_model(uint64_t seed) {
  torch::manual_seed(seed);
  auto config = models::EncoderDecoderConfig::transformer(24, 24, 16, 2, 4, 32);
  for (auto* stack : {&config.encoder, &config.decoder}) stack->dropout = stack->attention_dropout = 0.0;
  models::EncoderDecoderModel model(config);
  model->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.normal_(0.0, 0.5);
  }
  model->eval();
  return model;
}

// Three pairs: sources of 6, 4 and 2 tokens (pad 0), targets of 4, 2 and 3 tokens; the decoder
// reads 0 + target and predicts target + 2 (the end token).
analysis::TranslationData toy_pairs() {
  analysis::TranslationData d;
  d.source_ids = torch::tensor({3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 0, 13, 14, 0, 0, 0, 0}, torch::kLong).view({3, 6});
  d.source_mask = d.source_ids.ne(0).to(torch::kLong);
  d.decoder_input_ids = torch::tensor({0, 15, 16, 17, 18, 0, 19, 20, 0, 0, 0, 21, 22, 23, 0}, torch::kLong).view({3, 5});
  d.decoder_mask = torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0}, torch::kLong).view({3, 5});
  const int x = int(models::kIgnoreLabel);
  d.labels = torch::tensor({15, 16, 17, 18, 2, 19, 20, 2, x, x, 21, 22, 23, 2, x}, torch::kLong).view({3, 5});
  return d;
}

double loss_with_gates(analysis::HeadTask& task, const HeadMask& mask) {
  torch::NoGradGuard no_grad;
  analysis::set_head_gates(task.sites, mask);
  const double loss = task.loss(0).loss.item<double>();
  analysis::set_head_gates(task.sites, {});
  return loss;
}

analysis::HeadTable gate_finite_differences(analysis::HeadTask& task, const HeadMask& gates) {
  const double eps = 1e-6;
  analysis::HeadTable fd(gates.size());
  for (size_t l = 0; l < gates.size(); ++l)
    for (size_t h = 0; h < gates[l].size(); ++h) {
      HeadMask plus = gates, minus = gates;
      plus[l][h] += eps;
      minus[l][h] -= eps;
      fd[l].push_back((loss_with_gates(task, plus) - loss_with_gates(task, minus)) / (2 * eps));
    }
  return fd;
}

TEST(TranslationHeads, GateGradientEqualsFiniteDifferenceAtEverySite) {
  auto model = tiny_translation_model(11);
  auto task = analysis::translation_task(model, toy_pairs(), nullptr, "bleu", 3);
  ASSERT_EQ(task.sites.size(), 3u);
  EXPECT_EQ(task.sites[0].name, "encoder.self");
  EXPECT_EQ(task.sites[2].name, "decoder.cross");
  EXPECT_EQ(task.metric_name, "token_accuracy");  // no metric given
  ASSERT_EQ(task.batches, 1);
  analysis::ImportanceOptions raw;
  raw.normalize_layers = false;
  const HeadMask full = analysis::full_mask(task.sites);
  ASSERT_EQ(full.size(), 6u);  // (site, layer) rows
  const auto importance = analysis::head_importance(task, full, raw);
  EXPECT_EQ(importance.tokens, 5 + 3 + 4);  // target tokens + end tokens
  const auto fds = gate_finite_differences(task, full);
  const auto rows = analysis::head_rows(task.sites);
  std::vector<int64_t> nonzero(3, 0);
  for (size_t l = 0; l < full.size(); ++l)
    for (size_t h = 0; h < full[l].size(); ++h) {
      const double fd = fds[l][h];
      EXPECT_NEAR(importance.gate_gradient[l][h], std::abs(fd), 1e-6 * std::max(1.0, std::abs(fd)))
          << "row " << l << " head " << h;
      nonzero[rows[l].site] += std::abs(fd) > 1e-4;
      EXPECT_GT(importance.raw[l][h], 0.0);
    }
  for (int s = 0; s < 3; ++s) EXPECT_GT(nonzero[s], 3) << "site " << s << ": differences too small to test";
  // Normalised per (site, layer) row: unit L2 norm.
  for (const auto& layer : analysis::head_importance(task, full).importance) {
    double norm = 0;
    for (double v : layer) norm += v * v;
    EXPECT_NEAR(norm, 1.0, 1e-9);
  }
}

TEST(TranslationHeads, OneTokenImportanceEqualsGateGradientAndPaddingChangesNothing) {
  auto model = tiny_translation_model(12);
  // One source token, the decoder reads one token and predicts one: one position per site, so
  // the per-token importance |Σ_d ctx·∂L/∂ctx| is |∂L/∂ξ|.
  analysis::TranslationData one;
  one.source_ids = torch::tensor({{7}}, torch::kLong);
  one.source_mask = torch::ones({1, 1}, torch::kLong);
  one.decoder_input_ids = torch::tensor({{0}}, torch::kLong);
  one.decoder_mask = torch::ones({1, 1}, torch::kLong);
  one.labels = torch::tensor({{19}}, torch::kLong);
  auto task = analysis::translation_task(model, one, nullptr, "bleu", 1);
  analysis::ImportanceOptions raw;
  raw.normalize_layers = false;
  const HeadMask full = analysis::full_mask(task.sites);
  const auto importance = analysis::head_importance(task, full, raw);
  const auto fds = gate_finite_differences(task, full);
  for (size_t l = 0; l < full.size(); ++l)
    for (size_t h = 0; h < full[l].size(); ++h)
      EXPECT_NEAR(importance.raw[l][h], std::abs(fds[l][h]), 1e-6 * std::max(1.0, std::abs(fds[l][h])))
          << "row " << l << " head " << h;
  // The same pair padded on both sides (source to 4, decoder to 3): same importance and loss.
  analysis::TranslationData padded;
  padded.source_ids = torch::tensor({{7, 0, 0, 0}}, torch::kLong);
  padded.source_mask = torch::tensor({{1, 0, 0, 0}}, torch::kLong);
  padded.decoder_input_ids = torch::tensor({{0, 0, 0}}, torch::kLong);
  padded.decoder_mask = torch::tensor({{1, 0, 0}}, torch::kLong);
  padded.labels = torch::tensor({{int64_t(19), models::kIgnoreLabel, models::kIgnoreLabel}}, torch::kLong);
  auto padded_task = analysis::translation_task(model, padded, nullptr, "bleu", 1);
  const auto padded_importance = analysis::head_importance(padded_task, full, raw);
  EXPECT_EQ(padded_importance.tokens, 1);
  for (size_t l = 0; l < full.size(); ++l)
    for (size_t h = 0; h < full[l].size(); ++h)
      EXPECT_NEAR(padded_importance.raw[l][h], importance.raw[l][h], 1e-9) << "row " << l << " head " << h;
  EXPECT_NEAR(padded_task.evaluation_loss(), task.evaluation_loss(), 1e-12);
}

TEST(TranslationHeads, AblationsAndProfileOverTheThreeSites) {
  auto model = tiny_translation_model(13);
  int64_t metric_calls = 0;
  auto task = analysis::translation_task(model, toy_pairs(), nullptr, "bleu", 2);
  const auto accuracy = task.metric;
  // A metric given by the caller (the CLI's BLEU of decodes) is what the ablations read.
  auto counted = analysis::translation_task(model, toy_pairs(), [&] { ++metric_calls; return accuracy(); },
                                            "bleu", 2);
  EXPECT_EQ(counted.metric_name, "bleu");
  EXPECT_EQ(counted.batches, 2);
  const auto ablation = analysis::head_ablation(counted);
  EXPECT_EQ(metric_calls, 1 + 2 * 24);
  ASSERT_EQ(ablation.single.size(), 6u);
  for (size_t l = 0; l < 6; ++l) {
    ASSERT_EQ(ablation.single[l].size(), 4u);
    ASSERT_EQ(ablation.all_but_one[l].size(), 4u);
  }
  // Masking a cross-attention head changes the teacher-forced loss (the gates reach the decoder).
  HeadMask cross_off = analysis::full_mask(task.sites);
  for (size_t l = 4; l < 6; ++l) std::fill(cross_off[l].begin(), cross_off[l].end(), 0.0);
  EXPECT_GT(std::abs(loss_with_gates(task, cross_off) - loss_with_gates(task, analysis::full_mask(task.sites))), 1e-3);
  analysis::PruningOptions options;
  options.fractions = {0.5, 1.0};
  const auto profile = analysis::pruning_profile(counted, options);
  ASSERT_EQ(profile.steps.size(), 3u);
  for (const auto& step : profile.steps) {
    ASSERT_EQ(step.pruned_by_site.size(), 3u);
    EXPECT_EQ(step.pruned_by_site[0] + step.pruned_by_site[1] + step.pruned_by_site[2], step.pruned);
  }
  EXPECT_EQ(profile.steps.back().pruned, 24 - 6);  // one head kept per (site, layer)
  const auto json = analysis::to_json(profile, analysis::site_rows(task.sites));
  EXPECT_TRUE(json.at("steps").back().at("pruned_by_site").contains("decoder.cross"));
}

TEST(TranslationHeads, MismatchedShapesAreOneLineErrors) {
  auto model = tiny_translation_model(14);
  auto bad = toy_pairs();
  bad.labels = bad.labels.narrow(1, 0, 4);
  try {
    analysis::translation_task(model, bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder_input_ids"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  auto nothing = toy_pairs();
  nothing.labels.fill_(models::kIgnoreLabel);
  EXPECT_THROW(analysis::translation_task(model, nothing), Error);
}

}  // namespace
}  // namespace attnkit
