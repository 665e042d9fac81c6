// The experiments of `attnkit analyze heads` and `attnkit prune` (analysis/heads_experiment.h)
// on a tiny random BERT classifier saved to a scratch directory: shapes of the result, heads.json
// round trip (report::write_heads_outputs), cross-data correlation of a data set with itself,
// a run directory's checkpoints in step order, pruning by heads and by fraction, and errors.
#include "attnkit/analysis/heads_experiment.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/metrics/stats.h"
#include "attnkit/report/head_plots.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace attnkit {
namespace {

namespace fs = std::filesystem;

// A random model (weights ~ N(0, 0.5), no dropout, 16 positions) saved in attnkit format.
void save_model(const fs::path& dir, uint64_t seed, models::TransformerConfig c,
                const models::HeadsConfig& h) {
  torch::manual_seed(seed);
  c.dropout = c.attention_dropout = 0.0;
  c.max_positions = 16;
  models::TaskModel model(c, h);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.normal_(0.0, 0.5);
  }
  io::save_attnkit_model(model, dir.string());
}

void save_classifier(const fs::path& dir, uint64_t seed) {
  models::HeadsConfig h;
  h.sequence_labels = 2;
  save_model(dir, seed, models::TransformerConfig::bert(20, 12, 2, 3, 24), h);
}

void save_gpt2(const fs::path& dir, uint64_t seed) {
  models::HeadsConfig h;
  h.causal_lm = true;
  save_model(dir, seed, models::TransformerConfig::gpt2(20, 12, 2, 3), h);
}

// A GPT-2-shaped causal LM whose 6 query heads per layer read 2 key/value heads (groups of 3).
void save_grouped_lm(const fs::path& dir, uint64_t seed) {
  models::HeadsConfig h;
  h.causal_lm = true;
  auto c = models::TransformerConfig::gpt2(20, 12, 2, 6);
  c.attention.kv_heads = 2;
  save_model(dir, seed, c, h);
}

// Every data file is the same 12 random examples of 6 tokens (the last two padding in half).
analysis::HeadsInputs fixed_data(const std::string& path, const std::string&,
                                 const io::LoadedModel&) {
  if (path == "empty") {
    analysis::HeadsInputs none;
    none.input_ids = torch::zeros({0, 1}, torch::kLong);
    none.attention_mask = torch::zeros({0, 1}, torch::kLong);
    none.labels = torch::zeros({0}, torch::kLong);
    return none;
  }
  torch::manual_seed(99);
  analysis::HeadsInputs d;
  d.input_ids = torch::randint(1, 20, {12, 6}, torch::kLong);
  d.attention_mask = torch::ones({12, 6}, torch::kLong);
  d.attention_mask.narrow(0, 0, 6).narrow(1, 4, 2).zero_();
  d.labels = torch::randint(0, 2, {12}, torch::kLong);
  d.label_count = path == "three-labels" ? 3 : 2;
  return d;
}

analysis::HeadsExperimentOptions options(const fs::path& model) {
  analysis::HeadsExperimentOptions o;
  o.model = model.string();
  o.data = "a";
  o.read_data = fixed_data;
  o.batch_size = 5;
  o.fractions = {1.0 / 6, 0.5};
  return o;
}

TEST(HeadsExperiment, ResultShapesAndHeadsJsonRoundTrip) {
  const auto dir = testing::scratch_directory("heads_experiment");
  save_classifier(dir / "model", 1);
  auto o = options(dir / "model");
  o.data2 = "b";
  const auto e = analysis::run_heads_experiment(o);
  const auto& r = e.analysis;
  EXPECT_EQ(r.model, (dir / "model").string());
  EXPECT_EQ(r.metric_name, "accuracy");
  ASSERT_EQ(r.importance.importance.size(), 2u);
  for (const auto& row : r.importance.importance) EXPECT_EQ(row.size(), 3u);
  EXPECT_EQ(r.ablation.single.size(), 2u);
  EXPECT_EQ(r.ablation.all_but_one.at(1).size(), 3u);
  ASSERT_EQ(r.profiles.size(), 3u);
  EXPECT_EQ(r.profiles[0].order, analysis::PruningOrder::Importance);
  EXPECT_EQ(r.profiles[1].order, analysis::PruningOrder::Random);
  EXPECT_EQ(r.profiles[2].order, analysis::PruningOrder::Reverse);
  for (const auto& p : r.profiles) {
    ASSERT_EQ(p.steps.size(), 3u);
    EXPECT_EQ(p.steps[0].pruned, 0);
    EXPECT_EQ(p.steps[1].pruned, 1);
    EXPECT_EQ(p.steps[2].pruned, 3);
    EXPECT_DOUBLE_EQ(p.steps[0].metric, r.ablation.baseline);
  }
  // The same data twice: the two importance maps are equal.
  ASSERT_TRUE(e.cross_data);
  EXPECT_EQ(e.cross_data->importance.importance, r.importance.importance);
  EXPECT_NEAR(e.cross_data->correlation.pearson, 1.0, 1e-12);
  EXPECT_NEAR(e.cross_data->correlation.spearman, 1.0, 1e-12);

  const auto written = report::write_heads_outputs(e, (dir / "out").string());
  EXPECT_EQ(written, (std::vector<std::string>{"(cross-data correlation in heads.json)", "heads.json",
                                               "heads_importance.svg", "heads_profile.svg",
                                               "section.json"}));
  for (const auto* name : {"heads.json", "heads_importance.svg", "heads_profile.svg", "section.json"})
    EXPECT_TRUE(fs::exists(dir / "out" / name)) << name;
  const auto j = nlohmann::json::parse(read_file((dir / "out" / "heads.json").string()));
  EXPECT_EQ(j, analysis::to_json(e));
  EXPECT_EQ(j["cross_data"]["data"], "b");
  // Each ablation against the unpruned model, with its paired bootstrap interval: the difference
  // is the two metrics' (the passes' items are matched to the right ablation).
  ASSERT_EQ(r.single_vs_unpruned.size(), 2u);
  ASSERT_EQ(r.all_but_one_vs_unpruned.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    ASSERT_EQ(r.single_vs_unpruned[l].size(), 3u);
    for (size_t h = 0; h < 3; ++h) {
      const auto& single = r.single_vs_unpruned[l][h].difference;
      const auto& kept = r.all_but_one_vs_unpruned[l][h].difference;
      EXPECT_NEAR(single.score, r.ablation.single[l][h] - r.ablation.baseline, 1e-12);
      EXPECT_NEAR(kept.score, r.ablation.all_but_one[l][h] - r.ablation.baseline, 1e-12);
      EXPECT_LE(single.interval.low, single.interval.high);
      const auto& cell = j["ablation"]["all_but_one_vs_unpruned"][l][h];
      EXPECT_DOUBLE_EQ(cell["difference"].get<double>(), kept.score);
      EXPECT_DOUBLE_EQ(cell["low"].get<double>(), kept.interval.low);
      const bool zero_inside = kept.interval.low <= 0 && kept.interval.high >= 0;
      EXPECT_EQ(cell["verdict"] == "level", zero_inside) << cell.dump();
    }
  }
  EXPECT_EQ(analysis::read_heads_importance((dir / "out" / "heads.json").string(), "--importance"),
            r.importance.importance);
}

TEST(HeadsExperiment, RunCheckpointsInStepOrder) {
  const auto dir = testing::scratch_directory("heads_experiment");
  save_classifier(dir / "run" / "checkpoints" / "step-20", 2);
  save_classifier(dir / "run" / "checkpoints" / "step-3", 3);
  fs::create_directories(dir / "run" / "checkpoints" / "step-9");  // no model: skipped
  auto o = options({});
  o.model.clear();
  o.run = (dir / "run").string();
  const auto e = analysis::run_heads_experiment(o);
  ASSERT_EQ(e.checkpoints.size(), 2u);
  EXPECT_EQ(e.checkpoints[0].step, 3);
  EXPECT_EQ(e.checkpoints[1].step, 20);
  EXPECT_TRUE(e.checkpoints[0].analysis.ablation.single.empty());  // no ablations over a run
  const auto written = report::write_heads_outputs(e, (dir / "out").string());
  EXPECT_EQ(written, (std::vector<std::string>{"heads_importance_step3.svg", "heads_importance_step20.svg",
                                               "heads_over_training.json",
                                               "heads_profile_over_training.svg"}));
  const auto j = nlohmann::json::parse(read_file((dir / "out" / "heads_over_training.json").string()));
  EXPECT_EQ(j, analysis::to_json(e));
  EXPECT_EQ(j["checkpoints"][1]["step"], 20);
}

TEST(HeadsExperiment, PruneByHeadsAndByFraction) {
  const auto dir = testing::scratch_directory("heads_experiment");
  save_classifier(dir / "model", 4);
  analysis::PruneOptions o;
  o.model = (dir / "model").string();
  o.out = (dir / "by_heads").string();
  o.heads = models::HeadIndices{{0, {0, 2}}};
  const auto r = analysis::prune_model(o);
  EXPECT_EQ(r.heads_before, 6);
  EXPECT_EQ(r.heads_after, 4);
  EXPECT_EQ(r.format, "attnkit");
  EXPECT_LT(r.parameters_after, r.parameters_before);
  EXPECT_EQ(r.pruned_heads, (models::HeadIndices{{0, {0, 2}}}));
  const auto reloaded = io::load_model(o.out);
  EXPECT_EQ(reloaded.transformer->heads_per_layer(), (std::vector<int64_t>{1, 3}));

  // By fraction from the data, and by the same importance from a heads.json: the same heads.
  o.heads.reset();
  o.fraction = 0.5;
  o.data = "a";
  o.read_data = fixed_data;
  o.out = (dir / "by_data").string();
  const auto from_data = analysis::prune_model(o);
  EXPECT_EQ(from_data.heads_after, 3);
  const auto e = analysis::run_heads_experiment(options(dir / "model"));
  report::write_heads_outputs(e, (dir / "analysis").string());
  o.data.clear();
  o.importance_file = (dir / "analysis" / "heads.json").string();
  o.out = (dir / "by_file").string();
  o.format = "huggingface";
  const auto from_file = analysis::prune_model(o);
  EXPECT_EQ(from_file.pruned_heads, from_data.pruned_heads);
  EXPECT_EQ(from_file.format, "huggingface");
  EXPECT_EQ(io::load_model(o.out).format, "huggingface");
}

// A causal LM directory is scored as a language model (the labels of the data are not read);
// --run and prune --fraction take the same path.
TEST(HeadsExperiment, LanguageModelDirectory) {
  const auto dir = testing::scratch_directory("heads_experiment");
  save_gpt2(dir / "model", 6);
  const auto e = analysis::run_heads_experiment(options(dir / "model"));
  const auto& r = e.analysis;
  EXPECT_EQ(r.metric_name, "next_token_accuracy");
  ASSERT_TRUE(r.baseline_loss);
  EXPECT_GT(*r.baseline_loss, 0.0);
  EXPECT_GE(r.ablation.baseline, 0.0);
  EXPECT_LE(r.ablation.baseline, 1.0);
  ASSERT_EQ(r.importance.importance.size(), 2u);
  EXPECT_EQ(r.importance.tokens, 12 * 6 - 6 * 2);
  for (const auto& p : r.profiles) EXPECT_DOUBLE_EQ(p.steps[0].metric, r.ablation.baseline);
  const auto j = analysis::to_json(e);
  EXPECT_EQ(j["metric"], "next_token_accuracy");
  EXPECT_NEAR(j["baseline_perplexity"].get<double>(), std::exp(*r.baseline_loss), 1e-9);
  // The language model, loaded, agrees.
  const auto loaded = io::load_model((dir / "model").string());
  auto task = analysis::load_heads_task((dir / "model").string(), loaded, "a", fixed_data, 5, 0);
  EXPECT_EQ(task.metric_name, "next_token_accuracy");
  EXPECT_NEAR(task.evaluation_loss(), *r.baseline_loss, 1e-6);
  EXPECT_EQ(analysis::heads_task_kind("m", loaded), analysis::HeadsTaskKind::LanguageModel);
  // A classifier does not have its loss reported.
  save_classifier(dir / "classifier", 1);
  const auto classified = analysis::run_heads_experiment(options(dir / "classifier"));
  EXPECT_FALSE(classified.analysis.baseline_loss);
  EXPECT_FALSE(analysis::to_json(classified).contains("baseline_loss"));

  // Every checkpoint of a run; the over-training plot is labelled with the LM metric.
  save_gpt2(dir / "run" / "checkpoints" / "step-5", 7);
  save_gpt2(dir / "run" / "checkpoints" / "step-10", 8);
  auto o = options({});
  o.model.clear();
  o.run = (dir / "run").string();
  const auto over = analysis::run_heads_experiment(o);
  ASSERT_EQ(over.checkpoints.size(), 2u);
  EXPECT_EQ(over.checkpoints[1].analysis.metric_name, "next_token_accuracy");
  report::write_heads_outputs(over, (dir / "over").string());
  EXPECT_NE(read_file((dir / "over" / "heads_profile_over_training.svg").string()).find("next_token_accuracy"),
            std::string::npos);

  // prune --fraction scored on the LM data.
  analysis::PruneOptions p;
  p.model = (dir / "model").string();
  p.out = (dir / "pruned").string();
  p.fraction = 0.5;
  p.data = "a";
  p.read_data = fixed_data;
  const auto pruned = analysis::prune_model(p);
  EXPECT_EQ(pruned.heads_before, 6);
  EXPECT_EQ(pruned.heads_after, 3);
  EXPECT_TRUE(io::load_model(p.out).heads.causal_lm);
}

TEST(HeadsExperiment, BadInputsAreOneLineErrors) {
  const auto dir = testing::scratch_directory("heads_experiment");
  save_classifier(dir / "model", 5);
  auto o = options(dir / "model");
  o.run = "elsewhere";
  EXPECT_EQ(testing::error_of([&] { analysis::run_heads_experiment(o); }),
            "analyze heads: give exactly one of --model DIR and --run RUN_DIR");
  o = options(dir / "model");
  o.data = "empty";
  EXPECT_EQ(testing::error_of([&] { analysis::run_heads_experiment(o); }), "empty: no examples");
  o.data = "three-labels";
  EXPECT_EQ(testing::error_of([&] { analysis::run_heads_experiment(o); }),
            "three-labels: 3 labels, but the model's classifier has 2");
  EXPECT_NE(testing::error_of([&] { analysis::run_checkpoints((dir / "model").string()); })
                .find("no checkpoints"),
            std::string::npos);
  testing::write_bytes(dir / "not_heads.json", "{\"x\": 1}");
  EXPECT_EQ(testing::error_of([&] {
              analysis::read_heads_importance((dir / "not_heads.json").string(), "--importance");
            }).rfind("--importance " + (dir / "not_heads.json").string() + ": not a heads.json", 0),
            0u);
  // A model with neither a classifier nor a causal LM head (a BERT encoder).
  save_model(dir / "encoder", 1, models::TransformerConfig::bert(20, 12, 2, 3, 24), {});
  o = options(dir / "encoder");
  EXPECT_EQ(testing::error_of([&] { analysis::run_heads_experiment(o); }),
            (dir / "encoder").string() +
                ": analyze heads needs a sequence classifier or a causal language-model head (the "
                "model has neither; fine-tune a classifier with attnkit train --init)");
  analysis::PruneOptions p;
  p.model = (dir / "model").string();
  p.fraction = 0.5;
  EXPECT_EQ(testing::error_of([&] { analysis::prune_model(p); }),
            "prune: --fraction needs the importance from --data FILE or --importance heads.json");
}

// --random-orders: N random orders (seeds seed .. seed + N - 1) for heads and for key/value groups,
// their mean and t interval per step (metrics::summarize_seeds of the orders' steps), the paired
// bootstrap of every step against the unpruned model on the LM's windows, importance against the
// random orders, and the perplexity budget consistent with the steps.
TEST(HeadsExperiment, RandomOrdersIntervalsAndPerplexityBudget) {
  const auto dir = testing::scratch_directory("heads_experiment");
  save_grouped_lm(dir / "model", 11);
  auto o = options(dir / "model");
  o.fractions = {1.0 / 6, 2.0 / 6, 3.0 / 6, 4.0 / 6};
  o.min_heads = 0;
  o.ablation = false;
  o.seed = 3;
  o.random_orders = 5;
  const auto e = analysis::run_heads_experiment(o);
  const auto& r = e.analysis;
  // Heads: importance, random 3, reverse, random 4..7; groups: importance, random 3..7.
  ASSERT_EQ(r.profiles.size(), 7u + 6u);
  ASSERT_EQ(r.statistics.size(), r.profiles.size());
  const std::vector<uint64_t> seeds{3, 4, 5, 6, 7};
  for (bool groups : {false, true}) {
    SCOPED_TRACE(groups ? "groups" : "heads");
    std::vector<const analysis::PruningProfile*> random;
    const analysis::PruningProfile* importance = nullptr;
    const analysis::ProfileStatistics* importance_statistics = nullptr;
    for (size_t i = 0; i < r.profiles.size(); ++i) {
      const auto& p = r.profiles[i];
      if (p.groups != groups) continue;
      if (p.order == analysis::PruningOrder::Random) random.push_back(&p);
      if (p.order == analysis::PruningOrder::Importance) importance = &p, importance_statistics = &r.statistics[i];
    }
    ASSERT_EQ(random.size(), 5u);
    ASSERT_TRUE(importance);
    for (size_t j = 0; j < random.size(); ++j) {
      EXPECT_EQ(random[j]->seed, seeds[j]);
      // 12 heads: every two orders differ in their steps' masks; 4 groups: not all alike.
      if (!groups) {
        for (size_t i = 0; i < j; ++i) EXPECT_NE(random[i]->masks, random[j]->masks) << i << " " << j;
      }
    }
    if (groups) {
      EXPECT_TRUE(std::any_of(random.begin(), random.end(), [&](const auto* p) { return p->masks != random[0]->masks; }));
    }
    // One band per unit: the orders' steps summarised.
    const analysis::RandomBand* band = nullptr;
    for (const auto& b : r.random_bands)
      if (b.groups == groups) band = &b;
    ASSERT_TRUE(band);
    EXPECT_EQ(band->seeds, seeds);
    ASSERT_EQ(band->steps.size(), 5u);
    for (size_t k = 0; k < 5; ++k) {
      std::vector<double> metric, perplexity;
      for (const auto* p : random) {
        metric.push_back(p->steps[k].metric);
        perplexity.push_back(std::exp(*p->steps[k].loss));
      }
      const auto m = metrics::summarize_seeds(metric), q = metrics::summarize_seeds(perplexity);
      EXPECT_DOUBLE_EQ(band->steps[k].metric.mean, m.mean);
      EXPECT_DOUBLE_EQ(band->steps[k].metric.interval.low, m.interval.low);
      EXPECT_DOUBLE_EQ(band->steps[k].metric.interval.high, m.interval.high);
      ASSERT_TRUE(band->steps[k].perplexity);
      EXPECT_DOUBLE_EQ(band->steps[k].perplexity->mean, q.mean);
      EXPECT_DOUBLE_EQ(band->steps[k].perplexity->interval.high, q.interval.high);
    }
    // Importance against the random orders' mean, by step.
    ASSERT_EQ(band->importance_vs_random.size(), 4u);
    for (const auto& c : band->importance_vs_random) {
      double mean = 0;
      for (const auto* p : random) mean += metrics::corpus_score(p->steps[c.step].items) / 5;
      EXPECT_NEAR(c.difference.score, metrics::corpus_score(importance->steps[c.step].items) - mean, 1e-9);
      EXPECT_EQ(c.orders, 5u);
      EXPECT_LE(c.difference.interval.low, c.difference.interval.high);
      EXPECT_EQ(c.verdict.text, metrics::verdict(c.difference.interval, false, "importance", "random").text);
    }
    // Every step against the unpruned model: paired, on the 12 windows.
    ASSERT_EQ(importance_statistics->vs_baseline.size(), 4u);
    for (const auto& v : importance_statistics->vs_baseline) {
      const auto& step = importance->steps[v.step];
      EXPECT_EQ(v.bootstrap.items, 12u);
      EXPECT_NEAR(v.bootstrap.difference.score,
                  metrics::corpus_score(step.items) - metrics::corpus_score(importance->steps[0].items), 1e-9);
      EXPECT_NEAR(v.bootstrap.a.score, std::exp(*step.loss), 1e-6 * v.bootstrap.a.score);
      EXPECT_LE(v.bootstrap.difference.interval.low, v.bootstrap.difference.score);
      EXPECT_GE(v.bootstrap.difference.interval.high, v.bootstrap.difference.score);
      EXPECT_NEAR(v.relative.score, v.bootstrap.a.score / v.bootstrap.b.score - 1, 1e-12);
    }
  }
  // Every profile starts from the one unpruned pass: 12 windows of perplexity items (5 positions
  // predicted in the full windows, 3 in the padded ones).
  const auto& base = r.profiles.front().steps.front().items;
  EXPECT_EQ(base.metric, metrics::SummedMetric::kPerplexity);
  ASSERT_EQ(base.items(), 12u);
  double tokens = 0;
  for (size_t i = 0; i < 12; ++i) tokens += base.values[2 * i + 1];
  EXPECT_EQ(tokens, 6 * 5 + 6 * 3);
  EXPECT_NEAR(metrics::corpus_score(base), std::exp(*r.baseline_loss), 1e-6 * std::exp(*r.baseline_loss));
  for (const auto& p : r.profiles) EXPECT_EQ(p.steps.front().items.values, base.values);

  // The budget: the last step of the run within it, on the point estimate and on the upper end.
  for (double budget : {0.05, 0.0, 1e9}) {
    auto copy = r;
    analysis::ProfileStatisticsOptions so;
    so.budget = budget;
    // A budget the first step meets.
    if (budget == 0.0) so.budget = std::max(0.0, copy.statistics.front().vs_baseline.front().relative.score);
    analysis::add_profile_statistics(copy, so);
    for (size_t i = 0; i < copy.profiles.size(); ++i) {
      const auto& p = copy.profiles[i];
      const auto& st = copy.statistics[i];
      ASSERT_TRUE(st.budget);
      const auto& b = *st.budget;
      for (size_t k = 1; k <= b.step; ++k) EXPECT_LE(st.vs_baseline[k - 1].relative.score, so.budget);
      if (b.step < st.vs_baseline.size()) {
        EXPECT_GT(st.vs_baseline[b.step].relative.score, so.budget);
      }
      for (size_t k = 1; k <= b.step_upper; ++k) EXPECT_LE(st.vs_baseline[k - 1].relative.interval.high, so.budget);
      if (b.step_upper < st.vs_baseline.size()) {
        EXPECT_GT(st.vs_baseline[b.step_upper].relative.interval.high, so.budget);
      }
      EXPECT_EQ(b.pruned, p.steps[b.step].pruned);
      EXPECT_EQ(b.pruned_upper, p.steps[b.step_upper].pruned);
      EXPECT_EQ(b.upper_within, b.interval.high <= so.budget);
      int64_t kept = 0;
      for (int64_t k : b.kept_per_layer) kept += k;
      EXPECT_EQ(kept, 12 - analysis::count_heads(p.masks[b.step], 0.0));
      if (budget == 1e9) {
        EXPECT_EQ(b.step, 4u);
        EXPECT_EQ(b.step_upper, 4u);
      }
      if (budget == 0.0 && i == 0) {
        EXPECT_GE(b.step, 1u);
      }
    }
  }

  // heads.json carries it; the report draws the band and the statistics tables.
  const auto j = analysis::to_json(e);
  EXPECT_EQ(j["profiles"][1]["seed"], 3);
  EXPECT_EQ(j["profiles"].size(), 5u);  // one random order per unit, as with --random-orders 1
  EXPECT_EQ(j["random_orders"]["profiles"].size(), 8u);
  EXPECT_EQ(j["profiles"][0]["statistics"]["vs_unpruned"].size(), 4u);
  EXPECT_EQ(j["profiles"][0]["statistics"]["vs_unpruned"][0]["metric"], "perplexity");
  EXPECT_TRUE(j["profiles"][0]["statistics"].contains("perplexity_budget"));
  EXPECT_EQ(j["random_orders"]["bands"].size(), 2u);
  EXPECT_EQ(j["random_orders"]["bands"][1]["unit"], "group");
  EXPECT_EQ(j["random_orders"]["bands"][0]["steps"].size(), 5u);
  const auto section = report::heads_section(r);
  int tables = 0;
  for (const auto& block : section.blocks)
    if (block.table && block.table->caption.rfind("Pruning ", 0) == 0) ++tables;
  EXPECT_EQ(tables, 2);
  const auto plot = report::pruning_profile_plot(r.profiles, r.metric_name, r.random_bands);
  EXPECT_EQ(plot.series.size(), 2u * 3u + 2u + 1u);  // two bands, two importance orders, reverse

  // A classifier's items: per example, correct of 1 (accuracy, higher is better).
  save_classifier(dir / "classifier", 1);
  auto c = options(dir / "classifier");
  c.random_orders = 2;
  const auto classified = analysis::run_heads_experiment(c).analysis;
  const auto& examples = classified.profiles.front().steps.front().items;
  EXPECT_EQ(examples.metric, metrics::SummedMetric::kAccuracy);
  ASSERT_EQ(examples.items(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(examples.values[2 * i + 1], 1.0);
  EXPECT_DOUBLE_EQ(metrics::corpus_score(examples), classified.ablation.baseline);
  ASSERT_EQ(classified.random_bands.size(), 1u);
  for (const auto& comparison : classified.random_bands[0].importance_vs_random)
    EXPECT_EQ(comparison.verdict.text,
              metrics::verdict(comparison.difference.interval, true, "importance", "random").text);
  EXPECT_FALSE(classified.statistics.front().budget);  // perplexity only

  // Settings: checked before any work (this data would fail later).
  o.random_orders = 0;
  o.data = "empty";
  EXPECT_EQ(testing::error_of([&] { analysis::run_heads_experiment(o); }),
            "analyze heads: --random-orders must be at least 1 (got 0)");
}

}  // namespace
}  // namespace attnkit
