// Stage "collapse": Dong et al. (2021)'s rank collapse on a random 12-layer stack of each main
// attention kind (pure attention / + skip / + MLP / + LayerNorm / full block, with the paper's
// bound for softmax), and on the ListOps models the training stage saved.
#include "attnkit/analysis/collapse_experiment.h"
#include "attnkit/demo/demo.h"
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/progress.h"
#include "attnkit/report/collapse_plots.h"

#include <fmt/format.h>

#include <cmath>

namespace attnkit::demo {
namespace {

namespace fs = std::filesystem;

double last_layer_residual(const analysis::CollapseResult& result, analysis::Variant variant) {
  for (const auto& curve : result.curves)
    if (curve.variant == variant) return analysis::geometric_means(curve).back();
  return NAN;
}

ProgressOptions progress_options(const DemoOptions& o, const std::string& unit) {
  ProgressOptions p;
  p.unit = unit;
  p.log_every = 50;
  p.quiet = o.quiet;
  return p;
}

}  // namespace

report::Section collapse_stage(const StageContext& context) {
  const auto& o = context.options;
  report::Section section;
  // --- random stacks ---------------------------------------------------------------------------
  analysis::CollapseExperimentOptions random;
  random.seq_len = o.quick ? 16 : 32;
  random.samples = o.quick ? 4 : 8;
  random.seeds = o.quick ? 1 : 3;
  random.seed = o.seed;
  random.kinds = {"softmax", "linear:elu", "cosformer"};
  random.config = analysis::random_stack_config("bert", {o.quick ? 6 : 12, 4, 64, 256, 1000}, random.seq_len);
  random.source = "bert";
  random.analysis.subsets = o.quick ? 2 : 8;
  analysis::CollapseExperiment stacks;
  {
    ProgressReporter progress(progress_options(o, "forward passes"));
    stacks = analysis::run_collapse_experiment(random, &progress);
  }
  analysis::write_collapse_json(stacks, (context.dir / "collapse-random.json").string());
  const auto& softmax = stacks.results.front();
  const double pure = last_layer_residual(softmax, analysis::Variant::PureAttention);
  const double full = last_layer_residual(softmax, analysis::Variant::FullBlock);
  section.headlines.push_back({fmt::format("random {}-layer softmax stack: relative residual after the last layer, "
                                           "pure attention vs full block (the paper: pure attention collapses)",
                                           random.config.layers),
                               fmt::format("{:.1e} vs {:.2f}", pure, full), pure < 1e-2 * full});
  section.blocks.push_back({fmt::format(
      "Dong, Cordonnier and Loukas (2021): self-attention alone loses rank doubly exponentially with depth "
      "(the residual res(X) = X - 1 xT, relative to ||X||, goes to 0), while skip connections keep it; MLPs "
      "slow the collapse down a little and LayerNorm does not stop it. Measured here on {}; {}, {} inputs of "
      "{} tokens per model, float64. For softmax the paper's cumulative bound is drawn dashed.",
      stacks.model_source, stacks.input_source, random.samples, random.seq_len), {}, {}});
  for (const auto& named : report::collapse_plots(stacks)) {
    if (named.file_name.rfind("residual_", 0) != 0 && named.file_name.rfind("kinds_", 0) != 0) continue;
    section.blocks.push_back({{}, {}, report::Figure{named.plot.title, report::render_svg(named.plot)}});
  }
  report::Table table{"relative residual after the last layer (geometric mean over inputs and seeds)",
                      {"model", "pure attention", "+ skip", "+ MLP", "+ LayerNorm", "full block"}, {}};
  auto add_row = [&](const std::string& name, const analysis::CollapseResult& r) {
    std::vector<std::string> row = {name};
    for (auto v : {analysis::Variant::PureAttention, analysis::Variant::AttentionSkip, analysis::Variant::AttentionMlp,
                   analysis::Variant::AttentionLayerNorm, analysis::Variant::FullBlock})
      row.push_back(fmt::format("{:.2e}", last_layer_residual(r, v)));
    table.rows.push_back(row);
  };
  for (const auto& r : stacks.results) add_row(fmt::format("random, {}", r.kind), r);

  // --- the trained ListOps models --------------------------------------------------------------
  std::vector<std::string> missing;
  for (const auto& name : {"softmax", "linear", "cosformer"}) {
    const fs::path best = o.out / "training" / fmt::format("listops-{}", name) / "checkpoints" / "best";
    if (!fs::exists(best / "model.safetensors")) {
      missing.push_back(name);
      continue;
    }
    analysis::CollapseExperimentOptions trained;
    trained.model = io::load_model((best / "model.safetensors").string()).transformer;
    trained.source = best.string();
    trained.seq_len = random.seq_len;
    trained.samples = random.samples;
    trained.seed = o.seed;
    trained.analysis.subsets = random.analysis.subsets;
    trained.analysis.short_paths = false;
    const auto experiment = analysis::run_collapse_experiment(trained);
    add_row(fmt::format("ListOps-trained, {}", experiment.results.front().kind), experiment.results.front());
  }
  section.blocks.push_back({{}, table, {}});
  if (!missing.empty())
    section.blocks.push_back({fmt::format("No trained ListOps model of kind {} in {} (run the training stage "
                                          "first), so the table has random stacks only for it.",
                                          fmt::join(missing, ", "), (o.out / "training").string()), {}, {}});
  else
    section.blocks.push_back({"The trained rows are the ListOps models of the training stage (2 layers, best "
                              "validation checkpoint), analysed on random ListOps token ids.", {}, {}});
  return section;
}

}  // namespace attnkit::demo
