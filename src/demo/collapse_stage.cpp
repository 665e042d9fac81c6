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

const analysis::VariantCurve* find_curve(const analysis::CollapseResult& result, analysis::Variant variant) {
  for (const auto& curve : result.curves)
    if (curve.variant == variant) return &curve;
  return nullptr;
}

double last_layer_residual(const analysis::CollapseResult& result, analysis::Variant variant) {
  const auto* curve = find_curve(result, variant);
  return curve ? analysis::geometric_means(*curve).back() : NAN;
}

// The table's cell: the value, or why there is none (X vanished: the residual relative to it is
// undefined, which a printed 0 would misread as collapse to rank one).
std::string last_layer_cell(const analysis::CollapseResult& result, analysis::Variant variant) {
  const auto* curve = find_curve(result, variant);
  if (curve == nullptr) return "n/a";
  const double last = analysis::geometric_means(*curve).back();
  const int64_t from = curve->vanished_from_layer();
  if (from < 0) return fmt::format("{:.2e}", last);
  const std::string why = fmt::format("X = 0 from layer {} ({} of {} inputs)", from,
                                      curve->layers[size_t(from)].vanished, result.inputs);
  return std::isnan(last) ? "undefined: " + why : fmt::format("{:.2e}; {}", last, why);
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
  std::vector<std::string> vanished;  // "kind (variant)" whose X went to 0
  auto add_row = [&](const std::string& name, const analysis::CollapseResult& r) {
    for (const auto& curve : r.curves)
      if (curve.vanished_from_layer() >= 0)
        vanished.push_back(fmt::format("{} ({}, from layer {})", r.kind, analysis::variant_info(curve.variant).label,
                                       curve.vanished_from_layer()));
    std::vector<std::string> row = {name};
    for (auto v : {analysis::Variant::PureAttention, analysis::Variant::AttentionSkip, analysis::Variant::AttentionMlp,
                   analysis::Variant::AttentionLayerNorm, analysis::Variant::FullBlock})
      row.push_back(last_layer_cell(r, v));
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
  if (!vanished.empty())
    section.blocks.push_back({fmt::format(
        "X itself vanished (every entry 0 in float64) in: {}. A residual relative to a vanished X is undefined, "
        "so those cells and plotted lines stop there rather than show 0, which would read as collapse to rank "
        "one. Why it vanishes (docs/analysis.md): feature-map attention divides by phi(Q) . sum phi(K) with an "
        "epsilon of 1e-6 below it. With ReLU features (cosFormer, linear:relu) that normaliser is quadratic in X, "
        "and without skip connections the small initial weights shrink X until it falls under epsilon; from "
        "then on a layer's output is cubic in its input (Q, K and V are each linear in X), so the norm of X goes "
        "as its cube per layer until it underflows. elu+1 features stay near 1, and linear:elu does not vanish.",
        fmt::join(vanished, "; ")), {}, {}});
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
