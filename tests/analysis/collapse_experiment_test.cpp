// analysis/collapse_experiment: the multi-seed, multi-kind experiment of `analyze collapse`, its
// random stack configs and collapse.json.
#include "attnkit/analysis/collapse_experiment.h"
#include "attnkit/error.h"
#include "attnkit/progress.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>

namespace {

using namespace attnkit::analysis;
using attnkit::models::TransformerConfig;
using attnkit::testing::error_of;

CollapseExperimentOptions tiny(uint64_t seed = 0) {
  CollapseExperimentOptions o;
  o.config = random_stack_config("bert", {2, 2, 8, 0, 20}, 5);
  o.kinds = {"softmax", "linear:elu"};
  o.seeds = 2;
  o.source = "bert";
  o.seed = seed;
  o.samples = 2;
  o.seq_len = 5;
  o.analysis.subsets = 1;
  return o;
}

// A random pure-cosFormer stack without skip connections: the normaliser phi(Q).sum phi(K) falls
// under its clamp, each layer is then cubic in X, and X underflows to exactly 0 (the demo's
// 12-layer stack: 1e-77 at layer 6, then 0). Those inputs count as vanished: no relative residual
// (undefined), NaN geometric mean where all vanished, and collapse.json says from which layer.
TEST(CollapseExperiment, VanishedXIsUndefinedNotCollapsed) {
  CollapseExperimentOptions o;
  o.config = random_stack_config("bert", {12, 4, 64, 256, 1000}, 32);
  o.kinds = {"cosformer"};
  o.seeds = 1;
  o.source = "bert";
  o.samples = 2;
  o.seq_len = 32;
  o.analysis.variants = {Variant::PureAttention};
  o.analysis.short_paths = false;
  const CollapseExperiment e = run_collapse_experiment(o);
  const auto& curve = e.results.at(0).curves.at(0);
  const int64_t from = curve.vanished_from_layer();
  ASSERT_GT(from, 3);
  ASSERT_LE(from, 12);
  const auto y = geometric_means(curve);
  for (int64_t l = 0; l < from; ++l) {
    EXPECT_EQ(curve.layers[size_t(l)].vanished, 0);
    EXPECT_TRUE(std::isfinite(y[size_t(l)]) && y[size_t(l)] > 0) << l;  // defined, not collapsed
  }
  EXPECT_EQ(curve.layers.back().vanished, 2);
  EXPECT_TRUE(curve.layers.back().relative_composite.values.empty());
  EXPECT_TRUE(std::isnan(y.back()));
  EXPECT_EQ(curve.layers.back().frobenius.spread().max, 0.0);
  // Before it vanishes the norm of X falls faster than geometrically: the cubic regime.
  const double a = curve.layers[size_t(from - 3)].frobenius.spread().max,
               b = curve.layers[size_t(from - 2)].frobenius.spread().max,
               c = curve.layers[size_t(from - 1)].frobenius.spread().max;
  EXPECT_GT(std::log10(c) / std::log10(b), 2.0) << a << " " << b << " " << c;
  const auto j = to_json(e.results.at(0));
  EXPECT_EQ(j["variants"][0]["vanished"]["from_layer"], from);
  EXPECT_EQ(j["variants"][0]["layers"][size_t(from)]["vanished"], 2);
}

TEST(CollapseExperiment, OneMergedResultPerKind) {
  const CollapseExperiment e = run_collapse_experiment(tiny(3));
  ASSERT_EQ(e.results.size(), 2u);
  EXPECT_EQ(e.results[0].kind, "softmax");
  EXPECT_EQ(e.results[1].kind, "linear:elu");
  for (const auto& r : e.results) {
    EXPECT_EQ(r.models, 2);
    EXPECT_EQ(r.inputs, 4);  // 2 samples x 2 seeds
    EXPECT_EQ(r.layers, 2);
    EXPECT_EQ(r.seq_len, 5);
    ASSERT_EQ(r.curves.size(), 5u);
    for (const auto& curve : r.curves) {
      ASSERT_EQ(curve.layers.size(), 3u);
      EXPECT_EQ(curve.layers[1].relative_composite.values.size(), 4u);
      EXPECT_EQ(geometric_means(curve).size(), 3u);
    }
    EXPECT_EQ(r.short_paths.size(), 3u);  // k = 0..2
  }
  EXPECT_TRUE(e.results[0].bound.available);
  EXPECT_FALSE(e.results[1].bound.available);
  EXPECT_EQ(e.model_source, "random bert stack, init std 0.02, 2 seeds from 3");
  EXPECT_EQ(e.input_source, "random token ids in [0, 20), seed 1004");  // the last model's
  EXPECT_EQ(e.family, attnkit::models::ModelFamily::Bert);
  EXPECT_EQ(e.dtype, "float64");
  EXPECT_EQ(e.paths.layers, 2);
  EXPECT_EQ(e.paths.heads, 2);
  EXPECT_EQ(e.variants.size(), 5u);
  EXPECT_TRUE(e.layer_outputs.empty());
}

// A hybrid (a linearized model's per-layer overrides): without --kind the stack keeps its layers,
// named by them, and the softmax bound is not claimed for its linear layers; with a kind every
// layer takes it.
TEST(CollapseExperiment, HybridStacksKeepTheirLayersUnlessAKindIsGiven) {
  auto o = tiny(1);
  o.kinds.clear();
  o.config.layer_attention_specs[1] = attnkit::layers::AttentionSpec::parse("linear:elu");
  const auto hybrid = run_collapse_experiment(o);
  ASSERT_EQ(hybrid.results.size(), 1u);
  EXPECT_EQ(hybrid.results[0].kind, "hybrid: L0 softmax, L1 linear:elu");
  EXPECT_FALSE(hybrid.results[0].bound.available);
  EXPECT_NE(hybrid.results[0].bound.reason.find("'linear:elu' attention"), std::string::npos);
  o.config.layer_attention_specs[0] = attnkit::layers::AttentionSpec::parse("linear:elu");
  EXPECT_EQ(run_collapse_experiment(o).results[0].kind, "linear:elu");  // every layer alike
  o.kinds = {"softmax"};
  const auto replaced = run_collapse_experiment(o);
  EXPECT_EQ(replaced.results[0].kind, "softmax");
  EXPECT_TRUE(replaced.results[0].bound.available);
  // The same draws as a plain softmax stack of this shape.
  o.config.layer_attention_specs.clear();
  const auto plain = run_collapse_experiment(o);
  EXPECT_EQ(to_json(plain.results[0]).dump(), to_json(replaced.results[0]).dump());
}

TEST(CollapseExperiment, DeterministicForASeed) {
  const auto a = to_json(run_collapse_experiment(tiny(1)));
  const auto b = to_json(run_collapse_experiment(tiny(1)));
  const auto c = to_json(run_collapse_experiment(tiny(2)));
  EXPECT_EQ(a.dump(), b.dump());
  EXPECT_NE(a["results"].dump(), c["results"].dump());
}

TEST(CollapseExperiment, GivenInputsLayerOutputsAndProgress) {
  CollapseExperimentOptions o = tiny();
  o.kinds = {"linear:elu"};
  o.analysis.variants = {Variant::PureAttention, Variant::FullBlock};
  o.analysis.short_paths = false;
  o.analysis.keep_layer_outputs = true;
  o.input_ids = torch::randint(20, {3, 5}, torch::kLong);
  o.input_source = "three windows";
  attnkit::ProgressOptions quiet;
  quiet.quiet = true;
  attnkit::ProgressReporter progress(quiet);
  const CollapseExperiment e = run_collapse_experiment(o, &progress);
  EXPECT_EQ(progress.total(), 2 * forward_passes(o.config, o.analysis));
  EXPECT_EQ(progress.done(), progress.total());
  EXPECT_EQ(e.input_source, "three windows");
  EXPECT_EQ(e.results.at(0).inputs, 6);  // the same 3 windows for both seeds
  // First model only: input ids + 2 variants x 3 layer outputs.
  ASSERT_EQ(e.layer_outputs.size(), 7u);
  EXPECT_EQ(e.layer_outputs[0].first, "linear_elu/input_ids");
  EXPECT_TRUE(torch::equal(e.layer_outputs[0].second, o.input_ids));
  EXPECT_EQ(e.layer_outputs[1].first, "linear_elu/pure_attention/layer_0");
  EXPECT_EQ(e.layer_outputs[6].first, "linear_elu/full_block/layer_2");
  EXPECT_EQ(e.layer_outputs[6].second.sizes(), (std::vector<int64_t>{3, 5, 8}));
  EXPECT_EQ(e.layer_outputs[6].second.scalar_type(), torch::kDouble);
}

TEST(CollapseExperiment, LoadedModelRunsOnceInFloat32) {
  CollapseExperimentOptions o = tiny();
  torch::manual_seed(0);
  o.model = attnkit::models::TransformerModel(o.config);
  o.kinds.clear();
  o.source = "some/dir";
  o.dtype = torch::kFloat;
  const CollapseExperiment e = run_collapse_experiment(o);
  ASSERT_EQ(e.results.size(), 1u);
  EXPECT_EQ(e.results[0].models, 1);
  EXPECT_EQ(e.model_source, "some/dir");
  EXPECT_EQ(e.dtype, "float32");
  EXPECT_EQ(e.results[0].round_off_floor, 1e-5);
}

TEST(CollapseExperiment, JsonSchema) {
  const auto dir = attnkit::testing::scratch_directory("analysis");
  const CollapseExperiment e = run_collapse_experiment(tiny());
  const std::string path = (dir / "collapse.json").string();
  write_collapse_json(e, path);
  const std::string text = attnkit::testing::read_bytes(path);
  EXPECT_EQ(text, to_json(e).dump(2) + "\n");
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["model"]["source"], e.model_source);
  EXPECT_EQ(j["model"]["family"], "bert");
  EXPECT_EQ(j["model"]["dtype"], "float64");
  EXPECT_EQ(j["inputs"]["samples"], 2);
  EXPECT_EQ(j["inputs"]["seq_len"], 5);
  EXPECT_EQ(j["short_paths_subsets"], 1);
  EXPECT_EQ(j["paths"]["total"], "9");  // (1 + 2)^2
  EXPECT_EQ(j["paths"]["lengths"].size(), 3u);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][1]["kind"], "linear:elu");
  EXPECT_TRUE(j.contains("analysis"));
  EXPECT_TRUE(j.contains("residual"));
}

TEST(RandomStackConfig, PresetsWithDefaultsAndOverrides) {
  const TransformerConfig defaults = random_stack_config("bert", {}, 100);
  EXPECT_EQ(defaults.layers, 12);
  EXPECT_EQ(defaults.heads, 4);
  EXPECT_EQ(defaults.hidden, 64);
  EXPECT_EQ(defaults.vocab_size, 1000);
  EXPECT_EQ(defaults.dropout, 0.0);
  EXPECT_EQ(defaults.max_positions, 512);
  EXPECT_GE(random_stack_config("gpt2", {}, 2000).max_positions, 2000);
  const TransformerConfig albert = random_stack_config("albert", {3, 2, 32, 0, 0}, 8);
  EXPECT_EQ(albert.embedding_size, 16);  // hidden / 2
  EXPECT_EQ(albert.intermediate, 128);
  EXPECT_EQ(random_stack_config("albert", {3, 2, 8, 0, 0}, 8).embedding_size, 8);  // at least 8
}

TEST(RandomStackConfig, JsonFilesAndErrors) {
  const auto dir = attnkit::testing::scratch_directory("analysis");
  nlohmann::json j;
  attnkit::models::to_json(j, TransformerConfig::gpt2(30, 16, 5, 2));
  const auto file = attnkit::testing::write_bytes(dir / "config.json", j.dump());
  const TransformerConfig c = random_stack_config(file, {2, 0, 0, 0, 0}, 8);
  EXPECT_EQ(c.family, attnkit::models::ModelFamily::Gpt2);
  EXPECT_EQ(c.layers, 2);  // given
  EXPECT_EQ(c.hidden, 16);  // from the file
  EXPECT_EQ(c.dropout, 0.0);
  EXPECT_EQ(error_of([] { random_stack_config("no-such-preset", {}, 8); }),
            "no-such-preset: neither a preset (bert, albert, gpt2, roberta) nor a readable config JSON file");
  const auto bad = attnkit::testing::write_bytes(dir / "bad.json", "{\"layerz\": 3}");
  EXPECT_EQ(error_of([&] { random_stack_config(bad, {}, 8); }), bad + ": config: unknown key 'layerz'");
  const auto broken = attnkit::testing::write_bytes(dir / "broken.json", "{");
  EXPECT_NE(error_of([&] { random_stack_config(broken, {}, 8); }).find(": not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([] { random_stack_config("bert", {2, 3, 8, 0, 0}, 8); }).find("not divisible"),
            std::string::npos);
}

TEST(CollapseExperiment, KindsAndNames) {
  EXPECT_EQ(all_attention_kinds().size(), 9u);
  EXPECT_EQ(all_attention_kinds().front(), "softmax");
  EXPECT_EQ(file_name_part("linear:favor:8"), "linear_favor_8");
  EXPECT_EQ(file_name_part("synthesizer-dense"), "synthesizer-dense");
  CollapseExperimentOptions o = tiny();
  o.kinds = {"quadratic"};
  EXPECT_NE(error_of([&] { run_collapse_experiment(o); }).find("quadratic"), std::string::npos);
}

}  // namespace
