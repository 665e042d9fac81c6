#include "attnkit/demo/demo.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/runtime.h"
#include "attnkit/version.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace attnkit::demo {

const std::vector<Stage>& stages() {
  static const std::vector<Stage> all = {
      {"oracles", "Every attention variant against its float64 oracle", 10,
       "every attention kind, causal and not, against the naive float64 formula", oracles_stage},
      {"speed", "Speed and memory: fused kernels against PyTorch eager", 20,
       "softmax, linear and cosFormer (fused) against the PyTorch-eager formulas, time and peak memory vs n",
       speed_stage},
      {"training", "Training: LRA ListOps, a GPT-2-style language model, the permutation LM", 30,
       "small softmax / linear / cosFormer models on ListOps, a small GPT-2-style LM on Debian's fortunes; the permutation LM with one vs two streams",
       training_stage},
      {"lra", "Long-Range Arena: Pathfinder, Pathfinder-X's length, the five-task table", 35,
       "Pathfinder samples; one training step at 16K tokens for every attention kind; the LRA table of "
       "bench/lra_results.py",
       lra_stage},
      {"collapse", "Rank collapse (Dong et al. 2021)", 40,
       "rank collapse of a random stack (pure / +skip / +MLP / full) and of the trained models",
       collapse_stage},
      {"heads", "Attention heads: importance, ablation and pruning (Michel et al. 2019)", 50,
       "head importance, ablations and pruning profile of the trained ListOps model; pruning speed-up",
       heads_stage},
      {"translation", "Translation: Bible verse pairs and Michel et al.'s three attention sites", 55,
       "WEB -> Reina-Valera 1909 verse pairs, a small encoder-decoder for a CPU budget, test translations, "
       "head importance and pruning per attention site",
       translation_stage},
      {"pretrained", "Pretrained models: SmolLM2-135M's and Gemma 3 270M's heads, key/value groups and rank collapse", 57,
       "SmolLM2-135M-Instruct from its GGUF file (scripts/setup.sh): importance of query heads and key/value "
       "groups on validation verses, pruning profiles on test verses, rank collapse of its paths",
       pretrained_stage},
      {"decoding", "Decoding: samples, KV cache and RNN state", 60,
       "greedy and top-p samples from the trained LM; per-token latency, KV cache vs RNN state",
       decoding_stage},
  };
  return all;
}

std::string stage_ids() {
  std::string out;
  for (const auto& s : stages()) out += (out.empty() ? "" : ", ") + s.id;
  return out;
}

namespace {

report::Section failed_section(const Stage& stage, const std::string& what) {
  report::Section section;
  section.order = stage.order;
  section.id = stage.id;
  section.title = stage.title;
  section.headlines.push_back({"stage completed", "failed", false});
  section.blocks.push_back({fmt::format("This stage failed: {}", what), {}, {}});
  return section;
}

}  // namespace

namespace {

// The 1-minute load average (from /proc/loadavg): the demo's timings mean little on a busy machine.
std::string load_average() {
  try {
    const std::string text = read_file("/proc/loadavg");
    return text.substr(0, text.find(' '));
  } catch (const Error&) {
    return "unknown";
  }
}

}  // namespace

void DemoOutcome::add(const std::string& id, const report::Section& section, bool threw) {
  ran.push_back(id);
  if (threw) {
    failed.push_back(id);
    return;
  }
  const bool missed_one =
      std::any_of(section.headlines.begin(), section.headlines.end(), [](const auto& h) { return h.met && !*h.met; });
  if (missed_one) missed.push_back(id);
}

int DemoOutcome::exit_status() const { return failed.empty() ? 0 : 1; }

namespace {

std::string count_and_names(const std::vector<std::string>& ids, const char* what) {
  if (ids.empty()) return std::string("none ") + what;
  std::string names;
  for (const auto& id : ids) names += (names.empty() ? "" : ", ") + id;
  return fmt::format("{} {} ({})", ids.size(), what, names);
}

}  // namespace

std::string DemoOutcome::summary() const {
  return fmt::format("demo: {} stage{} ran; {}; {}{}", ran.size(), ran.size() == 1 ? "" : "s",
                     count_and_names(missed, "missed a target"), count_and_names(failed, "failed"),
                     failed.empty() ? "" : " (exit status 1)");
}

DemoOutcome run_demo(const DemoOptions& options) {
  for (const auto& id : options.only) {
    const bool known = std::any_of(stages().begin(), stages().end(), [&](const Stage& s) { return s.id == id; });
    if (!known) throw Error(fmt::format("--only {}: not a stage (stages: {})", id, stage_ids()));
  }
  if (options.out.empty()) throw Error("demo: --out DIR is required");
  std::filesystem::create_directories(options.out);
  DemoOutcome outcome;
  const std::string load_at_start = load_average();
  std::vector<std::pair<std::string, std::string>> timings;
  for (const auto& stage : stages()) {
    if (!options.only.empty() &&
        std::find(options.only.begin(), options.only.end(), stage.id) == options.only.end())
      continue;
    if (!options.quiet) fmt::print(stderr, "\n== demo stage {}: {} ==\n", stage.id, stage.title);
    const auto start = std::chrono::steady_clock::now();
    StageContext context{options, options.out / stage.id};
    std::filesystem::create_directories(context.dir);
    report::Section section;
    bool threw = false;
    try {
      section = stage.run(context);
    } catch (const std::exception& e) {
      threw = true;
      section = failed_section(stage, e.what());
      if (!options.quiet) fmt::print(stderr, "demo stage {} failed: {}\n", stage.id, e.what());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    section.order = stage.order;
    section.id = stage.id;
    section.title = stage.title;
    section.blocks.push_back({fmt::format("This stage took {:.0f} s.", seconds), {}, {}});
    outcome.add(stage.id, section, threw);
    report::write_section(section, context.dir);
    timings.push_back({"stage " + stage.id, fmt::format("{:.0f} s", seconds)});
  }
  std::vector<std::pair<std::string, std::string>> facts = {
      {"attnkit", version()},
      {"threads", std::to_string(at::get_num_threads())},
      {"fused kernels", kernel_instruction_set()},
      {"float32 GEMM", gemm_library_name()},
      {"seed", std::to_string(options.seed)},
      {"mode", options.quick ? "quick (the 2-minute version)" : "full"},
      {"command", options.command}};
  facts.insert(facts.end(), timings.begin(), timings.end());
  facts.push_back({"load average (1 min) at start / end", load_at_start + " / " + load_average()});
  facts.push_back({"outcome", outcome.summary().substr(std::string("demo: ").size())});
  report::write_facts(facts, options.out);
  const auto page = report::read_page(options.out);
  report::write_html(page, options.out / "report.html");
  fmt::print("report: {}\n", (options.out / "report.html").string());
  return outcome;
}

}  // namespace attnkit::demo
