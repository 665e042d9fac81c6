// Stage "training": three small ListOps classifiers (softmax, linear:elu, cosFormer attention),
// a small GPT-2-style language model on Debian's fortunes, and the permutation LM with one stream
// and with XLNet's two streams on synthetic blocks, with the trainer of attnkit train; then the
// pretraining experiments measured by bench/pretrain_results.py (docs/pretrain-results.json).
// Each run is a run directory under RUN_DIR/training/ (config.toml, metrics.jsonl, checkpoints/);
// the collapse stage analyses their best checkpoints.
#include "attnkit/demo/demo.h"
#include "docs_summary.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/report/plot.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/trainer.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>

namespace attnkit::demo {
namespace {

namespace fs = std::filesystem;

// A one-thread run that had the CPU for less than this share of its wall time shared its core: a
// CPU second there can buy fewer steps (bench/gnu_time.py's SHARED_CPU, which the docs use).
constexpr double kSharedCpu = 0.9;

// "NAME 0.51" when a record's process CPU seconds per wall second is under kSharedCpu, else "".
std::string shared_core(const std::string& name, double share) {
  return share < kSharedCpu ? fmt::format("{} {:.2f}", name, share) : "";
}

struct Curve {
  std::vector<double> steps, values;
};

// The evaluations of a run's metrics.jsonl: metric -> (step, value).
std::map<std::string, Curve> eval_curves(const fs::path& metrics) {
  std::map<std::string, Curve> curves;
  for_each_line(read_file(metrics), [&](std::string_view line, size_t) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("eval") || !j["eval"].is_object()) return;
    for (const auto& [name, value] : j["eval"].items()) {
      if (!value.is_number()) continue;
      curves[name].steps.push_back(j["step"].get<double>());
      curves[name].values.push_back(value.get<double>());
    }
  });
  return curves;
}

struct RunOutcome {
  train::TrainResult result;
  double seconds = 0;
  std::map<std::string, Curve> curves;
};

RunOutcome train_run(const fs::path& dir, const std::vector<std::array<std::string, 3>>& settings, uint64_t seed,
                     bool quiet) {
  train::RunConfig config;
  config.trainer.seed = seed;
  for (const auto& [section, key, value] : settings) train::apply_setting(config, section, key, value);
  config.directory = dir.string();
  config.trainer.run_directory = config.directory;
  config.trainer.quiet = quiet;
  fs::remove_all(dir);
  fs::create_directories(dir);
  io::write_file_atomically((dir / "config.toml").string(), train::to_toml(config));
  const auto start = std::chrono::steady_clock::now();
  auto task = train::make_task(config);
  train::Trainer trainer(*task, config.trainer);
  RunOutcome outcome;
  outcome.result = trainer.train();
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  outcome.curves = eval_curves(dir / "metrics.jsonl");
  return outcome;
}

// The English fortune files Debian's `fortunes` package installs (not the Chinese ones).
std::vector<std::string> fortune_files(bool quick) {
  const fs::path root = "/usr/share/games/fortunes";
  const std::vector<std::string> names = quick ? std::vector<std::string>{"fortunes"}
                                               : std::vector<std::string>{"computers", "linux", "science", "people"};
  std::vector<std::string> files;
  for (const auto& name : names)
    if (fs::is_regular_file(root / name)) files.push_back((root / name).string());
  if (files.empty())
    throw Error(fmt::format("{}: no fortune files (install Debian's fortunes package: scripts/setup.sh)", root.string()));
  return files;
}

// Blocks of 8 symbols s0..s7, one per line: rotations s_k .. s_k+7 (mod 8), or random permutations.
void write_symbol_blocks(const fs::path& path, bool rotations, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string text;
  for (int line = 0; line < 600; ++line) {
    std::vector<int> order(8);
    const int k = static_cast<int>(random() % 8);
    for (int i = 0; i < 8; ++i) order[size_t(i)] = (k + i) % 8;
    if (!rotations) std::shuffle(order.begin(), order.end(), random);
    for (int i = 0; i < 8; ++i) text += fmt::format("{}s{}", i ? " " : "", order[size_t(i)]);
    text += "\n";
  }
  io::write_file_atomically(path.string(), text);
}

// The permutation LM (task plm) with one stream and with XLNet's two streams (docs/training.md):
// on rotations the query stream, which knows the position it predicts, can reach loss 0; one stream
// cannot go below the mixture's 0.79 on either kind of block.
void permutation_lm(const StageContext& context, report::Section& section) {
  const auto& o = context.options;
  const fs::path dir = context.dir / "plm";
  fs::create_directories(dir);
  io::write_file_atomically((dir / "vocab.txt").string(),
                            "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ns0\ns1\ns2\ns3\ns4\ns5\ns6\ns7\n");
  const std::string steps = o.quick ? "100" : "400";
  report::LinePlot plot{"Permutation LM: validation loss (last 4 of each order) during training", "step", "loss"};
  report::Table table{"Permutation LM, one stream vs two: validation loss over the last 4 tokens of each sampled "
                      "order (bound for one stream: 0.79 = (ln 4 + ln 3 + ln 2) / 4; ignoring the input: ln 8 = 2.08)",
                      {"blocks", "one stream", "two streams", "wall time one / two (s)"}, {}};
  double rotations_two = NAN, rotations_one = NAN;
  for (const bool rotations : {true, false}) {
    const std::string data_name = rotations ? "rotations" : "permutations";
    write_symbol_blocks(dir / (data_name + ".txt"), rotations, o.seed);
    std::vector<std::string> cells{data_name};
    std::string times;
    for (const bool two : {false, true}) {
      if (!o.quiet) fmt::print(stderr, "permutation LM on {}, {} stream(s), {} steps\n", data_name, two ? 2 : 1, steps);
      const auto run = train_run(dir / fmt::format("{}-{}", data_name, two ? "two" : "one"),
                                 {{"task", "name", "plm"},
                                  {"task", "data", (dir / (data_name + ".txt")).string()},
                                  {"task", "tokenizer", (dir / "vocab.txt").string()},
                                  {"task", "truncate", "8"},
                                  {"task", "predict_last", "4"},
                                  {"task", "batch_size", "32"},
                                  {"task", "two_stream", two ? "true" : "false"},
                                  {"model", "hidden", "64"},
                                  {"model", "layers", "2"},
                                  {"model", "heads", "4"},
                                  {"model", "dropout", "0"},
                                  {"optimizer", "lr", "3e-3"},
                                  {"schedule", "warmup", "10"},
                                  {"run", "steps", steps},
                                  {"run", "eval_every", "50"},
                                  {"run", "checkpoint_every", steps}},
                                 o.seed, o.quiet);
      const double loss = run.result.last_metrics.count("loss") ? run.result.last_metrics.at("loss") : NAN;
      if (rotations) (two ? rotations_two : rotations_one) = loss;
      cells.push_back(fmt::format("{:.3f}", loss));
      times += fmt::format("{}{:.1f}", two ? " / " : "", run.seconds);
      if (run.curves.count("loss"))
        plot.series.push_back({fmt::format("{}, {}", data_name, two ? "two streams" : "one stream"),
                               run.curves.at("loss").steps, run.curves.at("loss").values});
    }
    cells.push_back(times);
    table.rows.push_back(cells);
  }
  section.headlines.push_back(
      {"permutation LM on rotations: validation loss, two streams vs one (one stream cannot go below 0.79)",
       fmt::format("{:.3f} vs {:.3f}", rotations_two, rotations_one),
       o.quick ? std::optional<bool>() : std::optional<bool>(rotations_two < 0.5 && rotations_two < rotations_one)});
  section.blocks.push_back({fmt::format(
      "The permutation LM of the \"全靠Mask\" post (task plm, XLNet through the attention mask) with one stream "
      "and with XLNet's two streams (task.two_stream), on blocks of 8 symbols that are rotations s_k .. s_k+7 or "
      "random permutations (600 blocks each, generated from the run's seed). Every block samples a "
      "factorisation order; the last 4 tokens of the order are predicted. One stream cannot know which position "
      "it predicts next, so it can only predict \"some token not seen yet\": at best 0.79 on both. The two-stream "
      "query stream knows the position, not the token: on rotations one seen token and the position give the "
      "answer, so it can reach 0; on permutations the position does not help. Model: 2 layers, width 64, 4 "
      "heads, no dropout, AdamW at 3e-3, batch 32, {} steps.",
      steps), {}, {}});
  section.blocks.push_back({{}, {}, report::Figure{"permutation LM validation loss vs step", report::render_svg(plot)}});
  section.blocks.push_back({{}, table, {}});
}

// The pretraining experiments of docs/pretrain-results.json (bench/pretrain_results.py; CPU
// hours, so the demo shows them instead of repeating them): MLM loss per attention kind against
// steps and CPU time, validation perplexity at the equal budget, fine-tuning from the MLM
// checkpoints vs from scratch, and the training objectives side by side.
void add_pretraining_results(report::Section& section, const fs::path& file) {
  const auto summary = read_docs_summary(
      section, file,
      "the pretraining experiments (MLM per attention kind, fine-tuning, permutation LM) are made by "
      "`/usr/bin/python3 bench/pretrain_results.py` (CPU hours; it writes that file and docs/results.md).",
      "bench/pretrain_results.py",
      {{"cells", SummaryField::kObject}, {"kinds", SummaryField::kAny}, {"budget_cpu_s", SummaryField::kAny},
       {"finetune_budget_cpu_s", SummaryField::kAny}, {"model", SummaryField::kObject}});
  if (!summary) return;
  const auto& j = *summary;
  if (j.value("smoke", false)) return;  // a pipeline check, not results
  const auto& cells = j["cells"];
  const auto kinds = j["kinds"].get<std::vector<std::string>>();
  const double budget = j["budget_cpu_s"].get<double>(), finetune = j["finetune_budget_cpu_s"].get<double>();
  auto slug = [](std::string kind) {
    std::replace(kind.begin(), kind.end(), ':', '-');
    return kind;
  };
  auto finished = [&](const std::string& name) {
    return cells.contains(name) && cells[name].is_object() && !cells[name].contains("failed") &&
           cells[name].contains("steps");
  };
  auto eval_value = [&](const std::string& name, const char* key) -> std::string {
    if (!finished(name) || !cells[name].contains("final_eval") || !cells[name]["final_eval"].contains(key)) return "—";
    return fmt::format("{:.3f}", cells[name]["final_eval"][key].get<double>());
  };
  auto test_accuracy = [&](const std::string& name) -> std::string {
    if (!finished(name) || !cells[name].contains("test") || !cells[name]["test"].contains("accuracy"))
      return "not run yet";
    return fmt::format("{:.1f}%", 100 * cells[name]["test"]["accuracy"].get<double>());
  };
  auto curve_series = [&](const std::string& name, const std::string& title, int axis) {
    report::Series series{title, {}, {}, "lines"};
    for (const auto& point : cells[name]["train_curve"]) {
      series.x.push_back(point[size_t(axis)].get<double>());
      series.y.push_back(point[2].get<double>());
    }
    return series;
  };
  int measured = 0;
  std::vector<std::string> shared;  // the cells that shared their core
  report::LinePlot by_step{"MLM training loss against steps (same model, same tokens)", "training step",
                           "MLM loss (masked tokens)"};
  report::LinePlot by_cpu{"MLM training loss against CPU time of training steps (one thread)",
                          "CPU seconds of training steps", "MLM loss (masked tokens)"};
  report::Table mlm{fmt::format("MLM pretraining at an equal budget of {:g} CPU s of training steps per kind "
                                "(bench/pretrain_results.py, {})", budget, j.value("date", "")),
                    {"attention", "steps", "CPU ms per step", "validation perplexity", "validation loss",
                     "masked accuracy"}, {}};
  for (const auto& kind : kinds) {
    const std::string name = "mlm-" + slug(kind);
    if (!finished(name)) {
      mlm.rows.push_back({kind, "not run yet", "—", "—", "—", "—"});
      continue;
    }
    ++measured;
    const auto& c = cells[name];
    const auto share = shared_core(kind, number_or_nan(c, "process_cpu_s") / number_or_nan(c, "wall_s"));
    if (!share.empty()) shared.push_back(share);
    if (c.contains("train_curve")) {
      by_step.series.push_back(curve_series(name, kind, 0));
      by_cpu.series.push_back(curve_series(name, kind, 1));
    }
    mlm.rows.push_back({kind, std::to_string(c["steps"].get<int64_t>()),
                        fmt::format("{:.0f}", number_or_nan(c, "step_cpu_ms")),
                        eval_value(name, "perplexity"), eval_value(name, "loss"), eval_value(name, "masked_accuracy")});
  }
  section.headlines.push_back({fmt::format("pretraining experiments at {:g} CPU s per kind: MLM kinds measured "
                                           "(bench/pretrain_results.py)", budget),
                               fmt::format("{} of {}", measured, kinds.size()), {}});
  section.blocks.push_back({fmt::format(
      "Masked-LM pretraining as in cosFormer's bidirectional experiment (its Figure 4), measured by "
      "bench/pretrain_results.py (docs/results.md has every number, the data and the samples): one BERT-mini-shaped "
      "model (4 layers, hidden {}, {} heads, blocks of {} tokens, batch 16) on the same tokens of Debian's English "
      "fortunes, only the attention kind differs; linear:relu is cosFormer without its cos re-weighting. Each kind "
      "gets the same CPU budget, so faster kinds take more steps.",
      j["model"].value("hidden", 0), j["model"].value("heads", 0), j.value("truncate", 0)), {}, {}});
  if (!by_step.series.empty()) {
    section.blocks.push_back({{}, {}, report::Figure{by_step.title, report::render_svg(by_step)}});
    section.blocks.push_back({{}, {}, report::Figure{by_cpu.title, report::render_svg(by_cpu)}});
  }
  section.blocks.push_back({{}, mlm, {}});
  if (!shared.empty())
    section.blocks.push_back({fmt::format("Some cells shared their core (CPU seconds per wall second: {}; about 1 on a "
                                          "core of their own): a CPU second there can buy fewer steps, so the "
                                          "comparison at equal CPU seconds is not quite like for like; the one "
                                          "against steps is.",
                                          fmt::join(shared, ", ")),
                              {}, {}});
  report::Table on_mask{"on the validation targets whose input is [MASK], beside the frequency baseline on the same "
                        "targets (each predicted from the training tokens' counts, whatever its context): a model "
                        "level with it has learned which tokens are frequent, not how to read the context",
                        {"attention", "perplexity at [MASK]", "baseline's", "accuracy at [MASK]", "baseline's"}, {}};
  for (const auto& kind : kinds) {
    const std::string name = "mlm-" + slug(kind);
    if (!finished(name) || !cells[name].contains("mask_input_eval")) continue;
    const auto& e = cells[name]["mask_input_eval"];
    on_mask.rows.push_back({kind, fmt::format("{:.1f}", number_or_nan(e, "mask_input_perplexity")),
                            fmt::format("{:.1f}", number_or_nan(e, "unigram_perplexity")),
                            fmt::format("{:.1f}%", 100 * number_or_nan(e, "mask_input_accuracy")),
                            fmt::format("{:.1f}%", 100 * number_or_nan(e, "unigram_accuracy"))});
  }
  if (!on_mask.rows.empty()) section.blocks.push_back({{}, on_mask, {}});
  if (j.contains("mlm_comparisons") && j["mlm_comparisons"].is_array() && !j["mlm_comparisons"].empty()) {
    report::Table pairs{"the kinds on every validation block (the same masks): validation perplexity and the paired "
                        "bootstrap of the difference (attnkit compare, 1,000 resamples); a kind is better only where "
                        "the 95% interval excludes 0",
                        {"a − b", "perplexity a / b", "difference [95%]", "verdict"}, {}};
    for (const auto& c : j["mlm_comparisons"]) {
      const std::string a = c.value("a", ""), b = c.value("b", ""), v = c.value("verdict", "");
      pairs.rows.push_back({a + " − " + b,
                            fmt::format("{:.1f} / {:.1f}", number_or_nan(c, "a_perplexity"),
                                        number_or_nan(c, "b_perplexity")),
                            fmt::format("{:+.1f} [{:+.1f}, {:+.1f}]", number_or_nan(c, "difference"),
                                        number_or_nan(c, "low"), number_or_nan(c, "high")),
                            v == "level" ? "level" : (v == "a" ? a : b) + " better"});
    }
    section.blocks.push_back({{}, pairs, {}});
  }
  report::Table ft{fmt::format("Fine-tuning ({:g} CPU s of steps) on which of four fortune files a passage comes from: "
                               "test accuracy, from the MLM checkpoint vs from scratch (chance 25%); one run per "
                               "cell, no interval: a difference of a few points is not a finding", finetune),
                   {"attention", "pretrained (MLM) then fine-tuned", "from scratch"}, {}};
  bool any_ft = false;
  for (const auto& kind : kinds) {
    const std::string p = "ft-" + slug(kind) + "-pretrained", s = "ft-" + slug(kind) + "-scratch";
    any_ft = any_ft || finished(p) || finished(s);
    ft.rows.push_back({kind, test_accuracy(p), test_accuracy(s)});
  }
  if (any_ft) section.blocks.push_back({{}, ft, {}});
  const std::vector<std::pair<std::string, std::string>> objectives = {
      {"mlm-softmax", "masked LM"}, {"lm", "causal LM"}, {"plm-one-stream", "permutation LM, one stream"},
      {"plm-two-stream", "permutation LM, two streams"}};
  report::LinePlot objective_plot{"Training objectives on the same corpus (softmax): training loss against steps",
                                  "training step", "loss over the predicted tokens"};
  report::Table objective_table{"Objectives at the same budget: validation loss over each objective's own targets "
                                "(not comparable across objectives: different targets)",
                                {"objective", "steps", "validation loss", "validation perplexity"}, {}};
  for (const auto& [name, label] : objectives) {
    if (!finished(name) || name == "mlm-softmax") continue;
    if (cells[name].contains("train_curve")) objective_plot.series.push_back(curve_series(name, label, 0));
    objective_table.rows.push_back({label, std::to_string(cells[name]["steps"].get<int64_t>()),
                                    eval_value(name, "loss"), eval_value(name, "perplexity")});
  }
  if (!objective_table.rows.empty()) {
    if (finished("mlm-softmax") && cells["mlm-softmax"].contains("train_curve"))
      objective_plot.series.insert(objective_plot.series.begin(), curve_series("mlm-softmax", "masked LM", 0));
    section.blocks.push_back({{}, {}, report::Figure{objective_plot.title, report::render_svg(objective_plot)}});
    section.blocks.push_back({{}, objective_table, {}});
  }
}

// "seed 0: +1.2 [-0.5, +2.9] level; seed 1: ..." of a driver's per-seed paired comparisons (in
// points of accuracy), each verdict named by its arm.
std::string seed_comparisons(const nlohmann::json& rows, const std::string& a, const std::string& b) {
  std::string out;
  for (const auto& c : rows) {
    const std::string v = c.value("verdict", "");
    out += fmt::format("{}seed {}: {:+.1f} [{:+.1f}, {:+.1f}] {}", out.empty() ? "" : "; ", c.value("seed", 0),
                       100 * number_or_nan(c, "difference"), 100 * number_or_nan(c, "low"),
                       100 * number_or_nan(c, "high"),
                       v == "level" ? "level" : (v == "a" ? a : b) + " better");
  }
  return out;
}

// "75.0% / 72.5% / 74.2% (mean 73.9 ± 1.3)" of per-seed accuracies.
std::string seed_accuracies(const std::vector<double>& values) {
  std::string out;
  double mean = 0, sd = 0;
  for (double v : values) {
    out += fmt::format("{}{:.1f}%", out.empty() ? "" : " / ", 100 * v);
    mean += v / static_cast<double>(values.size());
  }
  for (double v : values) sd += (v - mean) * (v - mean);
  sd = values.size() > 1 ? std::sqrt(sd / static_cast<double>(values.size() - 1)) : 0.0;
  return out + fmt::format(" (mean {:.1f} ± {:.1f})", 100 * mean, 100 * sd);
}

// The fine-tuning comparisons by seeds of docs/finetune-seeds.json (bench/finetune_seeds.py).
void add_finetune_seeds(report::Section& section, const fs::path& file) {
  const auto summary = read_docs_summary(
      section, file,
      "fine-tuning comparisons by seeds (ALBERT un-shared vs shared, pretrained vs scratch) are made by "
      "`/usr/bin/python3 bench/finetune_seeds.py` (CPU hours; it writes that file and docs/results.md).",
      "bench/finetune_seeds.py", {{"studies", SummaryField::kObject}, {"seeds", SummaryField::kArray}});
  if (!summary) return;
  const auto& j = *summary;
  if (j.value("smoke", false)) return;
  report::Table table{fmt::format("Fine-tuning by seeds (bench/finetune_seeds.py, {}): test accuracy per seed, and "
                                  "the paired bootstrap of the difference per seed (attnkit compare, 1,000 "
                                  "resamples; better only where the 95% interval excludes 0); one pretraining per "
                                  "study, {:g} CPU s per fine-tuning run",
                                  j.value("date", ""), j.value("finetune_budget_cpu_s", 0.0)),
                      {"study", "a: test accuracy per seed", "b: test accuracy per seed", "a − b per seed (points)"},
                      {}};
  std::vector<std::string> shared;  // the runs that shared their core
  for (const auto& [name, study] : j["studies"].items()) {
    const std::string a = study.value("a", ""), b = study.value("b", "");
    auto accuracies = [&](const std::string& arm) {
      std::vector<double> values;
      for (const auto& r : study["arms"][arm]) values.push_back(number_or_nan(r, "test_accuracy"));
      return arm + ": " + seed_accuracies(values);
    };
    table.rows.push_back({study.value("title", name), accuracies(a), accuracies(b),
                          seed_comparisons(study["comparisons"], a, b)});
    // Each run of the study that shared its core, as "TITLE: NAME 0.66".
    auto note_shared = [&](const std::string& run, double cpu_share) {
      const auto share = shared_core(run, cpu_share);
      if (!share.empty()) shared.push_back(study.value("title", name) + ": " + share);
    };
    const auto& pretrain = study.value("pretrain", nlohmann::json::object());
    note_shared(pretrain.value("cell", "pretraining"), number_or_nan(pretrain, "cpu_share"));
    for (const auto& arm : {a, b})
      for (const auto& r : study["arms"][arm])
        note_shared(fmt::format("{} seed {}", arm, r.value("seed", 0)), number_or_nan(r, "cpu_share"));
  }
  section.blocks.push_back({{}, table, {}});
  if (!shared.empty())
    section.blocks.push_back({fmt::format("Runs that shared their core (CPU seconds per wall second; about 1 on a core "
                                          "of their own, and a CPU second there can buy fewer steps): {}.",
                                          fmt::join(shared, "; ")),
                              {}, {}});
}

// ListOps by seeds of docs/listops-seeds.json (bench/listops_seeds.py).
void add_listops_seeds(report::Section& section, const fs::path& file) {
  const auto summary = read_docs_summary(
      section, file,
      "ListOps by seeds (softmax, linear, cosFormer; three seeds each, paired intervals) is made by "
      "`/usr/bin/python3 bench/listops_seeds.py` (CPU hours; it writes that file and docs/results.md).",
      "bench/listops_seeds.py", {{"cells", SummaryField::kObject}, {"comparisons", SummaryField::kArray}});
  if (!summary) return;
  const auto& j = *summary;
  report::Table table{fmt::format("ListOps by seeds (bench/listops_seeds.py, {}; {} steps per run): test accuracy of "
                                  "each run's best-validation checkpoint",
                                  j.value("date", ""), j.value("steps", 0)),
                      {"attention", "test accuracy per seed"}, {}};
  std::vector<std::string> kinds;
  for (const auto& [key, cell] : j["cells"].items()) {
    const std::string kind = cell.value("kind", "");
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  }
  for (const auto& kind : kinds) {
    std::vector<double> values;
    for (const auto& [key, cell] : j["cells"].items())
      if (cell.value("kind", "") == kind) values.push_back(number_or_nan(cell, "test_accuracy"));
    table.rows.push_back({kind, seed_accuracies(values)});
  }
  section.blocks.push_back({{}, table, {}});
  report::Table pairs{"ListOps kinds compared seed by seed on the same test expressions (paired bootstrap of "
                      "accuracy, 1,000 resamples; better only where the 95% interval excludes 0)",
                      {"a − b", "per seed (points)"}, {}};
  std::map<std::pair<std::string, std::string>, nlohmann::json> rows;
  std::vector<std::pair<std::string, std::string>> order;
  for (const auto& c : j["comparisons"]) {
    const auto key = std::make_pair(c.value("a", ""), c.value("b", ""));
    if (!rows.count(key)) order.push_back(key);
    rows[key].push_back(c);
  }
  for (const auto& key : order)
    pairs.rows.push_back({key.first + " − " + key.second, seed_comparisons(rows[key], key.first, key.second)});
  section.blocks.push_back({{}, pairs, {}});
}

}  // namespace

report::Section training_stage(const StageContext& context) {
  const auto& o = context.options;
  report::Section section;
  // --- ListOps -------------------------------------------------------------------------------
  const std::string steps = o.quick ? "40" : "1500", eval_every = o.quick ? "20" : "250";
  const std::string min_length = o.quick ? "16" : "32", max_length = o.quick ? "32" : "128";
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"softmax", "softmax"}, {"linear", "linear:elu"}, {"cosformer", "cosformer"}};
  report::LinePlot listops_plot{"ListOps validation accuracy during training", "step", "accuracy"};
  report::Table listops_table{
      "ListOps: validation accuracy of the final model beside the published LRA test accuracy (500-2000 "
      "tokens, 5,000+ steps on accelerators; ours: shorter expressions, a few CPU minutes)",
      {"attention", "steps", "time (s)", "val accuracy", "best val accuracy", "published (LRA)"}, {}};
  const std::map<std::string, std::string> published = {{"softmax", "Transformer 36.37%"},
                                                        {"linear", "Linear Transformer 16.13%"},
                                                        {"cosformer", "cosFormer 37.9%"}};
  double worst_accuracy = 1;
  for (const auto& [name, kind] : kinds) {
    if (!o.quiet) fmt::print(stderr, "ListOps, {} attention, {} steps\n", kind, steps);
    const auto run = train_run(context.dir / ("listops-" + name),
                               {{"task", "name", "listops"},
                                {"task", "min_length", min_length},
                                {"task", "max_length", max_length},
                                {"task", "truncate", max_length},
                                {"task", "train_examples", o.quick ? "1000" : "20000"},
                                {"task", "eval_examples", o.quick ? "100" : "500"},
                                {"task", "batch_size", "32"},
                                {"model", "family", "bert"},
                                {"model", "hidden", "64"},
                                {"model", "layers", "2"},
                                {"model", "heads", "4"},
                                {"model", "intermediate", "128"},
                                {"model", "attention", kind},
                                {"model", "dropout", "0.1"},
                                {"model", "pooling", "mean"},
                                {"optimizer", "lr", "5e-4"},
                                {"optimizer", "weight_decay", "0.01"},
                                {"schedule", "kind", "cosine"},
                                {"schedule", "warmup", o.quick ? "10" : "100"},
                                {"run", "steps", steps},
                                {"run", "eval_every", eval_every},
                                {"run", "checkpoint_every", steps}},
                               o.seed, o.quiet);
    const auto& acc = run.curves.count("accuracy") ? run.curves.at("accuracy") : Curve{};
    listops_plot.series.push_back({kind, acc.steps, acc.values});
    const double last = run.result.last_metrics.count("accuracy") ? run.result.last_metrics.at("accuracy") : NAN;
    worst_accuracy = std::min(worst_accuracy, last);
    listops_table.rows.push_back({kind, std::to_string(run.result.steps), fmt::format("{:.0f}", run.seconds),
                                  fmt::format("{:.1f}%", 100 * last),
                                  run.result.best_metric ? fmt::format("{:.1f}% (step {})", 100 * *run.result.best_metric,
                                                                       run.result.best_step)
                                                         : "-",
                                  published.at(name)});
  }
  // Always answering the most frequent class scores about 16% on LRA-style ListOps (docs/results.md).
  section.headlines.push_back({"ListOps validation accuracy, worst of the three kinds (chance 10%)",
                               fmt::format("{:.1f}%", 100 * worst_accuracy),
                               o.quick ? std::optional<bool>() : std::optional<bool>(worst_accuracy > 0.2)});
  section.blocks.push_back({fmt::format(
      "ListOps (Long-Range Arena's generator: MIN, MAX, MED and SM over digits, nested) with expressions of "
      "{}-{} tokens, generated from the run's seed. Three models that differ only in the attention kind: BERT-style, "
      "2 layers, width 64, 4 heads, mean pooling, AdamW at 5e-4 with a cosine schedule, batch 32, {} steps. "
      "Chance is 10%; always answering the most frequent class scores about 16%. docs/results.md has the "
      "full-length runs (18,000 steps) next to LRA's numbers.",
      min_length, max_length, steps), {}, {}});
  section.blocks.push_back({{}, {}, report::Figure{"ListOps validation accuracy vs step", report::render_svg(listops_plot)}});
  section.blocks.push_back({{}, listops_table, {}});

  // --- GPT-2-style LM on fortunes --------------------------------------------------------------
  const auto files = fortune_files(o.quick);
  text::BpeTrainerOptions bpe;
  bpe.vocab_size = o.quick ? 400 : 2000;
  const auto tokenizer = text::train_byte_level_bpe(files, bpe);
  const fs::path tokenizer_path = context.dir / "lm-tokenizer.json";
  text::write_tokenizer_json(tokenizer, tokenizer_path.string());
  std::string data;
  for (const auto& f : files) data += (data.empty() ? "" : ",") + f;
  const std::string lm_steps = o.quick ? "40" : "1200";
  if (!o.quiet) fmt::print(stderr, "GPT-2-style LM on {} fortune file(s), {} steps\n", files.size(), lm_steps);
  const auto lm = train_run(context.dir / "lm",
                            {{"task", "name", "lm"},
                             {"task", "data", data},
                             {"task", "tokenizer", tokenizer_path.string()},
                             {"task", "truncate", "64"},
                             {"task", "batch_size", "16"},
                             {"task", "eval_examples", "64"},
                             {"model", "family", "gpt2"},
                             {"model", "hidden", "128"},
                             {"model", "layers", "2"},
                             {"model", "heads", "4"},
                             {"model", "dropout", "0.1"},
                             {"optimizer", "lr", "1e-3"},
                             {"schedule", "kind", "cosine"},
                             {"schedule", "warmup", o.quick ? "10" : "100"},
                             {"run", "steps", lm_steps},
                             {"run", "eval_every", o.quick ? "20" : "200"},
                             {"run", "checkpoint_every", lm_steps}},
                            o.seed, o.quiet);
  report::LinePlot lm_plot{"Language model: validation perplexity during training", "step", "perplexity", true};
  if (lm.curves.count("perplexity"))
    lm_plot.series.push_back({"GPT-2-style, softmax", lm.curves.at("perplexity").steps, lm.curves.at("perplexity").values});
  const double ppl = lm.result.last_metrics.count("perplexity") ? lm.result.last_metrics.at("perplexity") : NAN;
  section.headlines.push_back({"language model: validation perplexity (vocabulary " + std::to_string(tokenizer.vocab_size()) + ")",
                               fmt::format("{:.1f}", ppl), std::nullopt});
  section.blocks.push_back({fmt::format(
      "A GPT-2-style causal LM (2 layers, width 128, 4 heads, softmax attention) on {} of the English "
      "fortune files Debian's fortunes package ships ({}), tokenised by a byte-level BPE tokenizer of {} "
      "tokens that attnkit trained on the same files, blocks of 64 tokens, every 20th block held out; {} "
      "steps of batch 16 in {:.0f} s. A uniform guess has perplexity {}.",
      files.size(), fmt::join(files, ", "), tokenizer.vocab_size(), lm.result.steps, lm.seconds,
      tokenizer.vocab_size()), {}, {}});
  if (!lm_plot.series.empty())
    section.blocks.push_back({{}, {}, report::Figure{"validation perplexity vs step (log scale)", report::render_svg(lm_plot)}});

  // --- Permutation LM: one stream vs two ---------------------------------------------------------
  permutation_lm(context, section);

  // --- The pretraining experiments (measured by bench/pretrain_results.py) ---------------------------
  add_listops_seeds(section, o.source_dir / "docs" / "listops-seeds.json");
  add_pretraining_results(section, o.source_dir / "docs" / "pretrain-results.json");
  // Studies at other budgets (bench/pretrain_results.py --budget B: docs/pretrain-results-bB-fF.json).
  std::vector<fs::path> studies;
  for (const auto& entry : fs::directory_iterator(o.source_dir / "docs")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("pretrain-results-", 0) == 0 && entry.path().extension() == ".json") studies.push_back(entry.path());
  }
  std::sort(studies.begin(), studies.end());
  for (const auto& study : studies) add_pretraining_results(section, study);
  add_finetune_seeds(section, o.source_dir / "docs" / "finetune-seeds.json");
  return section;
}

}  // namespace attnkit::demo
