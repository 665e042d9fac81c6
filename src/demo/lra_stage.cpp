// Stage "lra": the Long-Range Arena (docs/lra.md, issue 29).
// 1. Pathfinder samples drawn by attnkit's generator (32×32 hard setting).
// 2. Pathfinder-X's length: one training step (forward, backward, AdamW) of the LRA model at
//    16,384 tokens (4,096 with --quick) for every attention kind, each in its own process
//    (bench/train_bench.cpp, --model classifier) under an address-space limit through prlimit, so
//    that a kind that does not fit fails to allocate instead of meeting the OOM killer.
// 3. The LRA table and training curves measured by bench/lra_results.py (docs/lra-results.json in
//    the source tree): training all 30 cells takes CPU hours, so the demo shows that file's numbers
//    with its date and budget instead of training them again, and says so when it is missing.
#include "attnkit/demo/demo.h"
#include "bench_output.h"
#include "docs_summary.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/process.h"
#include "attnkit/report/plot.h"
#include "attnkit/data/pathfinder.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>
#include <optional>

namespace attnkit::demo {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string>& lra_kinds() {
  static const std::vector<std::string> kinds = {"softmax",      "linear:elu", "linear:relu",
                                                 "linear:favor", "cosformer",  "synthesizer-dense"};
  return kinds;
}

struct StepCost {
  bool fits = false;
  double step_ms = 0, step_cpu_ms = 0, extra_peak_mib = 0;
  std::string error;
};

StepCost one_step(const fs::path& bench, const std::string& kind, int64_t n, int64_t limit_gib, const std::string& threads) {
  const std::vector<std::string> argv = {"prlimit", fmt::format("--as={}", limit_gib << 30), "--", bench.string(),
                                         "--model", "classifier", "--kind", kind, "--n", std::to_string(n),
                                         "--batch", "1", "--hidden", "64", "--layers", "2", "--heads", "2",
                                         "--intermediate", "128", "--vocab", "257", "--steps", "2", "--warmup", "1",
                                         "--threads", threads};
  const ProcessResult r = run_process(argv);
  StepCost cost;
  if (!r.ok()) {
    cost.error = first_line(r.err.empty() ? r.out : r.err);
    if (cost.error.empty()) cost.error = r.signal ? fmt::format("killed by signal {}", r.signal) : "failed";
    return cost;
  }
  const auto j = bench_result_line(r.out, bench.string(), "step_ms");
  cost.fits = true;
  cost.step_ms = j["step_ms"].get<double>();
  cost.step_cpu_ms = j["step_cpu_ms"].get<double>();
  cost.extra_peak_mib = j["extra_peak_mib"].get<double>();
  return cost;
}

std::string percent(const nlohmann::json& cell) {
  if (cell.is_null()) return "not run yet";
  if (cell.contains("failed")) return "failed";
  return fmt::format("{:.1f}", 100 * cell["test_accuracy"].get<double>());
}

// The table and curves of docs/lra-results.json (bench/lra_results.py).
void add_measured_table(report::Section& section, const fs::path& file) {
  const auto summary = read_docs_summary(
      section, file,
      "the LRA table (every kind on the five tasks at an equal CPU budget) is made by "
      "`/usr/bin/python3 bench/lra_results.py` (CPU hours; it writes that file and docs/results.md).",
      "bench/lra_results.py", {{"cells", SummaryField::kAny}, {"tasks", SummaryField::kAny}});
  if (!summary) return;
  const auto& j = *summary;
  const auto tasks = j["tasks"].get<std::vector<std::string>>();
  const auto kinds = j["kinds"].get<std::vector<std::string>>();
  const auto& labels = j["task_labels"];
  const double budget = j["budget_cpu_s"].get<double>();
  report::Table table{fmt::format("test accuracy (%) after {:g} CPU minutes of training steps per cell, one thread "
                                  "(bench/lra_results.py, {}); published rows: LRA's own data and budgets",
                                  budget / 60, j["date"].get<std::string>()),
                      {"attention"},
                      {}};
  for (const auto& t : tasks) table.columns.push_back(labels[t].get<std::string>());
  table.columns.push_back("average");
  for (const auto& p : j["published"]) {
    std::vector<std::string> row = {p["name"].get<std::string>() + " (different data and budget)"};
    double sum = 0;
    for (const auto& t : tasks) {
      sum += p["accuracy"][t].get<double>();
      row.push_back(fmt::format("{:.2f}", p["accuracy"][t].get<double>()));
    }
    row.push_back(fmt::format("{:.2f}", sum / tasks.size()));
    table.rows.push_back(row);
  }
  const auto& cells = j["cells"];
  int measured = 0;
  for (const auto& kind : kinds) {
    std::vector<std::string> row = {"attnkit " + kind};
    double sum = 0;
    int done = 0;
    for (const auto& t : tasks) {
      const std::string key = t + "|" + kind;
      const nlohmann::json cell = cells.contains(key) ? cells[key] : nlohmann::json();
      row.push_back(percent(cell));
      if (!cell.is_null() && !cell.contains("failed")) {
        sum += 100 * cell["test_accuracy"].get<double>();
        ++done;
      }
    }
    measured += done;
    row.push_back(done == static_cast<int>(tasks.size()) ? fmt::format("{:.1f}", sum / done) : "—");
    table.rows.push_back(row);
  }
  std::vector<std::string> chance = {"chance"};
  for (const auto& t : tasks) chance.push_back(fmt::format("{:.0f}", j["chance"][t].get<double>()));
  chance.push_back("—");
  table.rows.push_back(chance);
  if (j.contains("majority") && j["majority"].is_object()) {
    std::vector<std::string> majority = {"the most frequent test label (always answering it)"};
    for (const auto& t : tasks) majority.push_back(fmt::format("{:.2f}", number_or_nan(j["majority"], t)));
    majority.push_back("—");
    table.rows.push_back(majority);
  }
  section.headlines.push_back({"LRA cells measured (bench/lra_results.py)",
                               fmt::format("{} of {}", measured, tasks.size() * kinds.size()), {}});
  section.blocks.push_back({fmt::format(
      "The table: each cell trains LRA's small model (2 layers, hidden 64, 2 heads, mean pooling) on one thread for "
      "{:g} CPU minutes of training steps (run.cpu_budget; evaluations do not count), then scores the test split. "
      "Text, Retrieval and Image are stand-ins (fortune passages, fortune pairs, Fashion-MNIST; docs/lra.md), so their "
      "columns do not compare with LRA's; ListOps is LRA's generator at its lengths, Pathfinder our generator of the "
      "same task. docs/results.md has the steps, CPU time per step and peak memory of every cell.",
      budget / 60), {}, {}});
  section.blocks.push_back({{}, table, {}});
  for (const auto& t : tasks) {
    report::LinePlot plot{fmt::format("{}: training loss against CPU time", labels[t].get<std::string>()),
                          "CPU seconds of training steps", "training loss (mean of the logged steps)"};
    for (const auto& kind : kinds) {
      const std::string key = t + "|" + kind;
      if (!cells.contains(key) || !cells[key].contains("curve")) continue;
      std::vector<double> x, y;
      for (const auto& point : cells[key]["curve"]) {
        x.push_back(point[0].get<double>());
        y.push_back(point[1].get<double>());
      }
      if (!x.empty()) plot.series.push_back({kind, x, y, "lines"});
    }
    if (!plot.series.empty())
      section.blocks.push_back({{}, {}, report::Figure{plot.title + " (every 5th step)", report::render_svg(plot)}});
  }
}

}  // namespace

report::Section lra_stage(const StageContext& context) {
  const auto& o = context.options;
  report::Section section;

  // 1. Samples.
  auto images = data::generate_pathfinder(data::pathfinder_options(32), o.seed, 16);
  const fs::path sheet = context.dir / "pathfinder-samples.svg";
  data::write_pathfinder_sheet(images, sheet.string());
  section.blocks.push_back({
      "Pathfinder (docs/lra.md): does a path join the two circles? Sixteen 32×32 images of the hard setting from "
      "attnkit's generator (two contours of 14 paddles, five distractors of 4), each captioned with its label; the "
      "model reads them as 1,024 pixel tokens.", {}, {}});
  section.blocks.push_back({{}, {}, report::Figure{"Pathfinder samples (label 1 = connected)", read_file(sheet.string())}});

  // 2. Pathfinder-X step cost.
  const fs::path bench = o.executable_dir / "attnkit_bench_train";
  if (!fs::exists(bench))
    throw Error(fmt::format("{} is missing (it is built with attnkit: cmake --build BUILD)", bench.string()));
  const int64_t n = o.quick ? 4096 : 16384;
  const int64_t limit_gib = 12;
  const std::string threads = "2";
  report::Table costs{fmt::format("mean of two training steps at n = {} (batch 1, 2 layers, hidden 64, 2 heads), {} threads, "
                                  "each kind in its own process limited to {} GiB of address space",
                                  n, threads, limit_gib),
                      {"attention", "step (wall)", "step (CPU)", "memory above the model", "softmax / this (wall)"},
                      {}};
  std::map<std::string, StepCost> measured;
  for (const auto& kind : lra_kinds()) {
    measured[kind] = one_step(bench, kind, n, limit_gib, threads);
    if (!o.quiet) {
      const auto& c = measured[kind];
      if (c.fits) fmt::print(stderr, "{} n={}: {:.2f} s per step, {:.0f} MiB\n", kind, n, c.step_ms / 1000, c.extra_peak_mib);
      else fmt::print(stderr, "{} n={}: did not run: {}\n", kind, n, c.error);
    }
  }
  const StepCost& softmax = measured["softmax"];
  for (const auto& kind : lra_kinds()) {
    const auto& c = measured[kind];
    if (!c.fits) {
      costs.rows.push_back({kind, "did not fit: " + c.error, "—", "—", "—"});
      continue;
    }
    costs.rows.push_back({kind, fmt::format("{:.2f} s", c.step_ms / 1000), fmt::format("{:.2f} s", c.step_cpu_ms / 1000),
                          fmt::format("{:.0f} MiB", c.extra_peak_mib),
                          softmax.fits ? fmt::format("{:.1f}x", softmax.step_ms / c.step_ms) : "—"});
  }
  const StepCost& linear = measured["linear:elu"];
  if (softmax.fits && linear.fits) {
    const double ratio = softmax.step_ms / linear.step_ms;
    section.headlines.push_back({fmt::format("Pathfinder-X step at n = {}: linear:elu vs flash softmax (target: >= 5x at 16K)", n),
                                 fmt::format("{:.1f}x", ratio), o.quick ? std::optional<bool>() : std::optional<bool>(ratio >= 5)});
  }
  section.blocks.push_back({fmt::format(
      "Pathfinder-X is the same task on 128×128 images: {} tokens. Softmax attention here is attnkit's flash "
      "kernel, whose memory grows linearly with n, so it fits; its time grows with n². A dense Synthesizer "
      "materialises an n×n attention matrix per head.{}", n == 16384 ? "16,384" : std::to_string(n),
      o.quick ? " (--quick: n = 4,096 instead of 16,384.)" : ""), {}, {}});
  section.blocks.push_back({{}, costs, {}});

  // 3. The measured table.
  add_measured_table(section, o.source_dir / "docs" / "lra-results.json");
  return section;
}

}  // namespace attnkit::demo
