// The experiments of `attnkit analyze heads` and `attnkit prune` (analysis/heads_experiment.h)
// on a tiny random BERT classifier saved to a scratch directory: shapes of the result, heads.json
// round trip (report::write_heads_outputs), cross-data correlation of a data set with itself,
// a run directory's checkpoints in step order, pruning by heads and by fraction, and errors.
#include "attnkit/analysis/heads_experiment.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/report/head_plots.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>

namespace attnkit {
namespace {

namespace fs = std::filesystem;

void save_classifier(const fs::path& dir, uint64_t seed) {
  torch::manual_seed(seed);
  auto c = models::TransformerConfig::bert(20, 12, 2, 3, 24);
  c.dropout = c.attention_dropout = 0.0;
  c.max_positions = 16;
  models::HeadsConfig h;
  h.sequence_labels = 2;
  models::TaskModel model(c, h);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.normal_(0.0, 0.5);
  }
  io::save_attnkit_model(model, dir.string());
}

// Every data file is the same 12 random examples of 6 tokens (the last two padding in half).
analysis::ClassificationInputs fixed_data(const std::string& path, const std::string&,
                                          const io::LoadedModel&) {
  if (path == "empty") return {torch::zeros({0, 1}, torch::kLong), torch::zeros({0, 1}, torch::kLong),
                               torch::zeros({0}, torch::kLong), 0};
  torch::manual_seed(99);
  analysis::ClassificationInputs d;
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
  EXPECT_EQ(reloaded.model->heads_per_layer(), (std::vector<int64_t>{1, 3}));

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
  analysis::PruneOptions p;
  p.model = (dir / "model").string();
  p.fraction = 0.5;
  EXPECT_EQ(testing::error_of([&] { analysis::prune_model(p); }),
            "prune: --fraction needs the importance from --data FILE or --importance heads.json");
}

}  // namespace
}  // namespace attnkit
