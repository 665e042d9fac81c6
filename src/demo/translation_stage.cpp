// Stage "translation": Michel et al.'s setting in miniature, through the attnkit command line (the
// demo runs the commands a user would, docs/training.md "Translation" and docs/analysis.md):
//   1. `attnkit data parallel`: the World English Bible x Reina-Valera 1909 verse pairs (Debian's
//      SWORD modules), split by book;
//   2. `attnkit tokenizer train`: one joint Unigram vocabulary of both sides;
//   3. `attnkit train --task.name translation` for a fixed CPU budget (run.cpu_budget), one thread;
//   4. `attnkit generate --sources`: three test verses (books never seen in training);
//   5. `attnkit analyze heads` on validation verses: importance at the three sites, the ablations
//      (one head kept per layer and site: the paper's Table 3) and the pruning profile with heads
//      pruned per site (its Figure 6); its section's tables and figures are shown here.
//   6. Linearizing the trained model (issue 45): the cells of bench/bible_linearize_results.py
//      (docs/bible-linearize.json: each kind and site converted with `attnkit linearize`, attention
//      transfer then fine-tuning, test BLEU against the teacher with paired bootstrap intervals)
//      and the decoding memory and speed before and after (bench/linearized_decode.py,
//      docs/linearized-decode.json). They take CPU hours, so the stage shows those files' numbers
//      with their dates instead of repeating them, and says so when one is missing.
//   7. Linearizing a language model (issue 45): the cells of bench/lm_linearize_results.py
//      (docs/lm-linearize.json: a softmax LM on the split's English training books, each kind
//      converted and fine-tuned, test perplexity against the softmax control and the teacher with
//      paired bootstrap intervals), shown the same way; and the pretrained one of
//      bench/pretrained_linearize_results.py (docs/pretrained-linearize.json: SmolLM2-135M).
// The model is small and the budget minutes, so its BLEU is low: the stage shows the pipeline and
// the shape of the result, docs/analysis.md the experiment at a larger budget.
#include "attnkit/demo/demo.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/process.h"
#include "attnkit/report/plot.h"
#include "cli_runner.h"
#include "docs_summary.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

namespace attnkit::demo {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

std::pair<std::string, std::string> split_pair(const std::string& line) {
  const auto tab = line.find('\t');
  if (tab == std::string::npos) throw Error(fmt::format("translation stage: a pair without a tab: {}", line));
  return {line.substr(0, tab), line.substr(tab + 1)};
}

std::string signed_points(double fraction) { return fmt::format("{:+.2f}", 100 * fraction); }

// The stage 1 column of a linearization cell: none for the softmax control (no "stage1"), else the
// held-out transfer loss before → after (each by `loss_format`) or a kind without maps to train,
// with stage 1's CPU seconds.
std::string stage1_column(const nlohmann::json& cell, const char* loss_format) {
  if (!cell.contains("stage1") || !cell["stage1"].is_object()) return "none: nothing converted (control)";
  const auto& s1 = cell["stage1"];
  if (!s1.value("trained", false))
    return fmt::format("none: no feature map to train ({:.0f})", s1.value("cpu_s", 0.0));
  return fmt::format("{} → {} ({:.0f})", fmt::format(fmt::runtime(loss_format), s1.value("held_out_before", 0.0)),
                     fmt::format(fmt::runtime(loss_format), s1.value("held_out_after", 0.0)), s1.value("cpu_s", 0.0));
}

// The seeds' verdicts of an over-seeds row, {"worse": 2, "level": 1} -> "2 worse, 1 level".
std::string verdict_counts(const nlohmann::json& counts) {
  std::string text;
  if (counts.is_object())
    for (const auto& [name, count] : counts.items())
      text += (text.empty() ? "" : ", ") + fmt::format("{} {}", count.get<int>(), name);
  return text;
}

// "encoder.self + decoder.self" from a cell's list of sites; "none" for none.
std::string joined_sites(const nlohmann::json& sites) {
  std::string out;
  for (const auto& site : sites) out += (out.empty() ? "" : " + ") + site.get<std::string>();
  return out.empty() ? "none" : out;
}

// Michel et al.'s experiment on the leak-free split at a larger budget (docs/bible-heads.json from
// scripts/bible_heads.sh and bench/bible_heads_results.py: heads chosen on validation verses, every
// number on the test verses with paired intervals): one head kept per layer and site, and the
// global pruning profile against the random orders, into `section`.
void add_bible_heads_results(report::Section& section, const fs::path& docs) {
  const auto summary = read_docs_summary(
      section, docs / "bible-heads.json",
      "Michel et al.'s experiment on the leak-free split at a larger budget is made by scripts/bible_heads.sh and "
      "`/usr/bin/python3 bench/bible_heads_results.py` (CPU hours; docs/analysis.md).",
      "bench/bible_heads_results.py",
      {{"profile", SummaryField::kArray}, {"keep_one", SummaryField::kArray}, {"baseline", SummaryField::kObject}});
  if (!summary) return;
  const auto& j = *summary;
  const auto& base = j["baseline"];
  section.blocks.push_back({fmt::format(
      "At a larger budget (docs/analysis.md; scripts/bible_heads.sh, {} on {}): the same question on the leak-free "
      "split's model with {} heads at each site and layer ({} layers), importance and orders chosen on {} "
      "validation verses, every number on {} test verses: unpruned test BLEU {:.2f} [{:.2f}, {:.2f}]; changes with "
      "95% paired bootstrap intervals (sacreBLEU's, {} resamples), \"level\" where an interval covers 0; {} random "
      "orders as mean ± sd.",
      j.value("date", ""), j.value("machine", ""), j.value("heads_per_layer", 0), j.value("layers", 0),
      j.value("validation_verses", 0), j.value("test_verses", 0), 100 * base.value("bleu", 0.0),
      100 * base.value("low", 0.0), 100 * base.value("high", 0.0), j.value("bootstrap_samples", 0),
      j.value("random_orders", 0)), {}, {}});
  report::Table keep{"one head kept per layer and site (the most important on validation), the layer's others masked",
                     {"site", "layer", "head kept", "test BLEU", "change [95%]", "verdict"}, {}};
  for (const auto& k : j["keep_one"]) {
    if (!k.is_object()) continue;
    keep.rows.push_back({k.value("site", ""), std::to_string(k.value("layer", 0) + 1), std::to_string(k.value("head", 0)),
                         fmt::format("{:.2f}", 100 * k.value("bleu", 0.0)),
                         fmt::format("{} [{}, {}]", signed_points(k.value("score", 0.0)),
                                     signed_points(k.value("low", 0.0)), signed_points(k.value("high", 0.0))),
                         k.value("verdict", "")});
  }
  section.blocks.push_back({{}, keep, {}});
  report::Table profile{"global pruning, least important first, against the random orders",
                        {"pruned", "test BLEU", "change [95%]", "random orders: mean ± sd", "importance − random [95%]",
                         "verdict"},
                        {}};
  int level_until = 0;
  bool losing = false;
  for (const auto& r : j["profile"]) {
    if (!r.is_object() || !r.contains("change") || !r["change"].is_object()) continue;
    const auto& c = r["change"];
    const auto interval = [&](const char* field) {
      if (!r.contains(field) || !r[field].is_object()) return std::string("—");
      const auto& x = r[field];
      return fmt::format("{} [{}, {}]", signed_points(x.value("score", 0.0)), signed_points(x.value("low", 0.0)),
                         signed_points(x.value("high", 0.0)));
    };
    if (!losing && c.value("high", 0.0) >= 0) level_until = r.value("pruned", 0);
    if (c.value("high", 0.0) < 0) losing = true;
    profile.rows.push_back(
        {fmt::format("{} ({:.0f}%)", r.value("pruned", 0), 100 * r.value("fraction", 0.0)),
         fmt::format("{:.2f}", 100 * r.value("bleu", 0.0)), interval("change"),
         r.contains("random") && r["random"].is_object()
             ? fmt::format("{:.2f} ± {:.2f}", 100 * r["random"].value("mean", 0.0), 100 * r["random"].value("sd", 0.0))
             : std::string("—"),
         interval("importance_minus_random"), r.value("verdict", "")});
  }
  section.blocks.push_back({{}, profile, {}});
  section.headlines.push_back({"leak-free split, larger budget: heads pruned with test BLEU level with the unpruned "
                               "model (docs/bible-heads.json)",
                               fmt::format("{} of {}", level_until,
                                           3 * j.value("layers", 0) * j.value("heads_per_layer", 0)),
                               std::nullopt});
}

// The teacher's and the students' numbers of docs/bible-linearize.json, and the decoding costs of
// docs/linearized-decode.json, into `section`.
void add_linearization_results(report::Section& section, const fs::path& docs) {
  const auto summary = read_docs_summary(
      section, docs / "bible-linearize.json",
      "the linearization experiment (each attention kind and site of the Bible model converted with `attnkit "
      "linearize`) is made by scripts/bible_linearize.sh and `/usr/bin/python3 bench/bible_linearize_results.py` "
      "(CPU hours; docs/analysis.md).",
      "bench/bible_linearize_results.py", {{"cells", SummaryField::kArray}, {"teacher", SummaryField::kObject}});
  if (!summary) return;
  const auto& j = *summary;
  const auto& teacher = j["teacher"];
  section.blocks.push_back({fmt::format(
      "Linearizing the trained model (docs/analysis.md, bench/bible_linearize_results.py, {}): the leak-free "
      "split's translation model ({} + {} layers, hidden {}, {} heads, {} steps; test BLEU {:.2f} on {} verses) is the "
      "teacher. `attnkit linearize` replaces the softmax attention at the chosen sites by a linear kind: stage 1 "
      "trains only the new feature maps to match the teacher's attention outputs (transfer loss on held-out "
      "batches before and after), stage 2 fine-tunes the whole model on the translation task; then every test "
      "verse is translated and compared with the teacher's translations by a paired bootstrap (sacreBLEU's, "
      "1,000 resamples): \"worse\" or \"better\" where the 95% interval of the difference excludes 0, "
      "\"level\" otherwise. Machine: {}.",
      j.value("generated", ""), teacher.value("layers", 0), teacher.value("layers", 0), teacher.value("hidden", 0),
      teacher.value("heads", 0), teacher.value("steps", 0), 100 * teacher.value("bleu", 0.0),
      j.value("test_verses", 0), j.value("machine", "")), {}, {}});
  report::Table table{"each cell: kind, sites converted, seed; test BLEU and its difference from the teacher",
                      {"kind", "sites", "seed", "stage 1: transfer loss before → after (CPU s)",
                       "stage 2: steps (CPU s)", "test BLEU", "minus teacher [95%]", "verdict"},
                      {}};
  report::LinePlot curves{"validation BLEU during fine-tuning against the cell's CPU time",
                          "CPU seconds (stage 1, then stage 2's share at each evaluation)",
                          "validation BLEU (100 verses)"};
  std::string joined;
  for (const auto& c : j["cells"]) {
    if (!c.is_object() || !c.contains("stage2") || !c["stage2"].is_object() || !c.contains("test") ||
        !c["test"].is_object() || !c.contains("vs_teacher") || !c["vs_teacher"].is_object())
      continue;
    const std::string sites = joined_sites(c["sites"]);
    // The softmax control (the teacher fine-tuned alike, nothing converted) has no stage 1.
    const bool converted = c.contains("stage1") && c["stage1"].is_object();
    const nlohmann::json s1 = converted ? c["stage1"] : nlohmann::json::object();
    const auto& s2 = c["stage2"];
    const auto& v = c["vs_teacher"];
    const double difference = v.value("difference", 0.0);
    const std::string verdict = v.value("verdict", "") == "level" ? "level" : difference < 0 ? "worse" : "better";
    table.rows.push_back(
        {c.value("kind", ""), sites, std::to_string(c.value("seed", 0)),
         stage1_column(c, "{:.3f}"),
         fmt::format("{} ({:.0f})", s2.value("steps", 0), s2.value("cpu_s", 0.0)),
         fmt::format("{:.2f}", 100 * c["test"].value("bleu", 0.0)),
         fmt::format("{} [{}, {}]", signed_points(difference), signed_points(v.value("low", 0.0)),
                     signed_points(v.value("high", 0.0))),
         verdict});
    if (c.value("seed", 0) != 0 || !s2.contains("validation_bleu")) continue;
    // Stage 2's CPU time spread evenly over its steps (the log gives the total only).
    report::Series series{fmt::format("{} at {}", c.value("kind", ""), sites), {}, {}, "linespoints"};
    const double steps = std::max(1.0, static_cast<double>(s2.value("steps", 0)));
    for (const auto& point : s2["validation_bleu"]) {
      series.x.push_back(s1.value("cpu_s", 0.0) + s2.value("cpu_s", 0.0) * point[0].get<double>() / steps);
      series.y.push_back(100 * point[1].get<double>());
    }
    curves.series.push_back(series);
  }
  section.headlines.push_back({"linearization cells measured (bench/bible_linearize_results.py)",
                               std::to_string(table.rows.size()), {}});
  section.blocks.push_back({{}, table, {}});
  if (!curves.series.empty())
    section.blocks.push_back({{}, {}, report::Figure{curves.title, report::render_svg(curves)}});
  if (j.contains("over_seeds") && j["over_seeds"].is_array() && !j["over_seeds"].empty()) {
    report::Table seeds{"one site converted at a time, over seeds: test BLEU minus the teacher's",
                        {"kind", "site", "seeds", "mean ± sd (BLEU points)", "verdicts"}, {}};
    for (const auto& g : j["over_seeds"]) {
      seeds.rows.push_back({g.value("kind", ""), joined_sites(g["sites"]), std::to_string(g["seeds"].size()),
                            fmt::format("{} ± {:.2f}", signed_points(g.value("mean", 0.0)), 100 * g.value("sd", 0.0)),
                            verdict_counts(g.value("verdicts", nlohmann::json::object()))});
    }
    section.blocks.push_back({{}, seeds, {}});
  }
  const auto decode_summary = read_docs_summary(
      section, docs / "linearized-decode.json",
      "decoding before and after linearization is measured by bench/linearized_decode.py.",
      "bench/linearized_decode.py", {{"runs", SummaryField::kObject}, {"prompt_tokens", SummaryField::kAny}});
  if (!decode_summary) return;
  const auto& d = *decode_summary;
  report::Table decoding{fmt::format("decoding {} new tokens, {} thread(s), best of {} runs (bench/linearized_decode.py, {}, "
                                     "{}): the softmax model's KV cache grows with the prompt, the linear student's state "
                                     "does not",
                                     d.value("new_tokens", 0), d.value("threads", 0), d.value("rounds", 0),
                                     d.value("date", ""), d.value("isa", "")),
                         {"model", "prompt (tokens)", "prefill (s)", "ms per new token", "peak memory (MiB)"}, {}};
  for (const auto& [name, run] : d["runs"].items()) {
    for (const char* prompt : {"short", "long"}) {
      if (!run.contains(prompt) || !run[prompt].is_array() || run[prompt].empty()) continue;
      double prefill = 1e300, decode = 1e300, peak = 1e300;
      for (const auto& r : run[prompt]) {
        prefill = std::min(prefill, r.value("prefill_s", 1e300));
        decode = std::min(decode, r.value("decode_s", 1e300));
        peak = std::min(peak, r.value("peak_mib", 1e300));
      }
      decoding.rows.push_back({name, std::to_string(d["prompt_tokens"].value(prompt, 0)), fmt::format("{:.2f}", prefill),
                               fmt::format("{:.1f}", 1e3 * decode / std::max(1, d.value("new_tokens", 1))),
                               fmt::format("{:.0f}", peak)});
    }
  }
  section.blocks.push_back({{}, decoding, {}});
}

// A paired result of student − baseline in test perplexity (lower is better): "+1.23 [+0.90,
// +1.60] (+3.4%), worse".
std::string perplexity_difference(const nlohmann::json& p) {
  const double difference = p.value("difference", 0.0);
  const std::string word = p.value("verdict", "") == "level" ? "level" : difference > 0 ? "worse" : "better";
  return fmt::format("{:+.2f} [{:+.2f}, {:+.2f}] ({:+.1f}%), {}", difference, p.value("low", 0.0),
                     p.value("high", 0.0), 100 * p.value("relative", 0.0), word);
}

// A cell's stage-2 validation curve ([step, CPU s, perplexity] points) as a plotted series.
report::Series stage2_series(const nlohmann::json& cell) {
  report::Series series{cell.value("kind", ""), {}, {}, "linespoints"};
  for (const auto& point : cell["stage2"]["curve"]) {
    if (!point.is_array() || point.size() != 3) continue;
    series.x.push_back(point[1].get<double>());
    series.y.push_back(point[2].get<double>());
  }
  return series;
}

// The columns every language-model cell row shares: stage 2 "steps (CPU s)", test perplexity, and
// its paired differences from the softmax control (or "—") and from the teacher.
std::vector<std::string> perplexity_columns(const nlohmann::json& cell) {
  const auto& s2 = cell["stage2"];
  return {fmt::format("{} ({:.0f})", s2.value("steps", 0), s2.value("cpu_s", 0.0)),
          fmt::format("{:.2f}", cell.value("test_perplexity", 0.0)),
          cell.contains("vs_control") && cell["vs_control"].is_object() ? perplexity_difference(cell["vs_control"])
                                                                          : std::string("—"),
          perplexity_difference(cell["vs_teacher"])};
}

// The language-model cells of docs/lm-linearize.json (bench/lm_linearize_results.py): a softmax LM
// trained on the English side of the same split, linearized kind by kind, into `section`.
void add_lm_linearization_results(report::Section& section, const fs::path& docs) {
  const auto summary = read_docs_summary(
      section, docs / "lm-linearize.json",
      "linearizing a language model (a softmax LM on the split's English training books, each kind converted "
      "with `attnkit linearize` and fine-tuned) is made by scripts/lm_linearize.sh and `/usr/bin/python3 "
      "bench/lm_linearize_results.py` (CPU hours; docs/analysis.md).",
      "bench/lm_linearize_results.py", {{"cells", SummaryField::kArray}, {"teacher", SummaryField::kObject}});
  if (!summary) return;
  const auto& j = *summary;
  const auto& teacher = j["teacher"];
  section.blocks.push_back({fmt::format(
      "Linearizing a language model (docs/analysis.md, bench/lm_linearize_results.py, {}): a GPT-2-shaped softmax "
      "LM ({} layers, hidden {}, {} heads) trained {} steps on the English training books of the same split is the "
      "teacher (test perplexity {:.2f} on {} blocks of the held-out test books). Each kind: `attnkit linearize` of "
      "every layer (stage 1), then fine-tuning of every weight (stage 2); the softmax control is the teacher "
      "fine-tuned the same way. Test perplexity against the control of the same seed and against the teacher by "
      "a paired bootstrap over the test blocks (`attnkit eval --paired-bs`, 1,000 resamples): \"worse\" or "
      "\"better\" where the 95% interval excludes 0, \"level\" otherwise. Machine: {}.",
      j.value("generated", ""), teacher.value("layers", 0), teacher.value("hidden", 0), teacher.value("heads", 0),
      teacher.value("steps", 0), teacher.value("test_perplexity", 0.0), teacher.value("test_blocks", 0),
      j.value("machine", "")), {}, {}});
  report::Table table{"each cell: kind and seed; test perplexity and its differences",
                      {"kind", "seed", "stage 1: transfer loss before → after (CPU s)", "stage 2: steps (CPU s)",
                       "test perplexity", "minus softmax control [95%]", "minus teacher [95%]"},
                      {}};
  report::LinePlot curves{"validation perplexity during fine-tuning against the cell's CPU time (seed 0)",
                          "CPU seconds (stage 1, then stage 2 at each evaluation)", "validation perplexity"};
  for (const auto& c : j["cells"]) {
    if (!c.is_object() || !c.contains("stage2") || !c["stage2"].is_object() || !c.contains("vs_teacher") ||
        !c["vs_teacher"].is_object())
      continue;
    const auto& s2 = c["stage2"];
    std::vector<std::string> row{c.value("kind", ""), std::to_string(c.value("seed", 0)), stage1_column(c, "{:.4g}")};
    for (auto& column : perplexity_columns(c)) row.push_back(std::move(column));
    table.rows.push_back(std::move(row));
    if (c.value("seed", 0) != 0 || !s2.contains("curve") || !s2["curve"].is_array()) continue;
    curves.series.push_back(stage2_series(c));
  }
  section.headlines.push_back({"language-model linearization cells measured (bench/lm_linearize_results.py)",
                               std::to_string(table.rows.size()), {}});
  section.blocks.push_back({{}, table, {}});
  if (!curves.series.empty())
    section.blocks.push_back({{}, {}, report::Figure{curves.title, report::render_svg(curves)}});
  if (j.contains("over_seeds") && j["over_seeds"].is_array() && !j["over_seeds"].empty()) {
    report::Table seeds{"over seeds: test perplexity, and the difference from the control of each seed",
                        {"kind", "seeds", "test perplexity, mean ± sd", "minus control, mean ± sd", "verdicts"}, {}};
    for (const auto& g : j["over_seeds"]) {
      std::string difference = "—", verdicts = "—";
      if (g.contains("vs_control") && g["vs_control"].is_object()) {
        const auto& v = g["vs_control"];
        difference = fmt::format("{:+.2f} ± {:.2f}", v.value("mean", 0.0), v.value("sd", 0.0));
        verdicts = verdict_counts(v.value("verdicts", nlohmann::json::object()));
      }
      seeds.rows.push_back({g.value("kind", ""), std::to_string(g.value("seeds", nlohmann::json::array()).size()),
                            fmt::format("{:.2f} ± {:.2f}", g.value("mean", 0.0), g.value("sd", 0.0)), difference,
                            verdicts});
    }
    section.blocks.push_back({{}, seeds, {}});
  }
}

// The pretrained language model's cells of docs/pretrained-linearize.json
// (bench/pretrained_linearize_results.py): SmolLM2-135M linearized and fine-tuned on the split's
// English training books, against the softmax control and the teacher itself, into `section`.
void add_pretrained_linearization_results(report::Section& section, const fs::path& docs) {
  const auto summary = read_docs_summary(
      section, docs / "pretrained-linearize.json",
      "linearizing a pretrained language model (SmolLM2-135M from its GGUF file: each kind converted with "
      "`attnkit linearize`, fine-tuned on the split's English training books) is made by "
      "scripts/pretrained_linearize.sh and `/usr/bin/python3 bench/pretrained_linearize_results.py` (CPU hours; "
      "docs/analysis.md).",
      "bench/pretrained_linearize_results.py", {{"cells", SummaryField::kArray}, {"teacher", SummaryField::kObject}});
  if (!summary) return;
  const auto& j = *summary;
  const auto& teacher = j["teacher"];
  section.blocks.push_back({fmt::format(
      "Linearizing a pretrained language model (docs/analysis.md, bench/pretrained_linearize_results.py, {}): "
      "SmolLM2-135M-Instruct ({} layers, its GGUF file) is the teacher, untrained here (test perplexity {:.2f} on {} "
      "blocks of 128 tokens of the held-out test books, its own tokenizer). Each kind: `attnkit linearize` of every "
      "layer (stage 1), then fine-tuning of every weight on the training books (stage 2); the softmax control is "
      "the teacher fine-tuned the same way. Differences in test perplexity by a paired bootstrap over the test "
      "blocks (`attnkit eval --paired-bs`, 1,000 resamples): \"worse\" or \"better\" where the 95% interval "
      "excludes 0, \"level\" otherwise. Machine: {}.",
      j.value("date", ""), teacher.value("layers", 0), teacher.value("test_perplexity", 0.0),
      teacher.value("test_blocks", 0), j.value("machine", "")), {}, {}});
  report::Table table{"each cell: kind; test perplexity after stage 1 and after stage 2, and its differences",
                      {"kind", "stage 1: transfer loss before → after (CPU s)", "after stage 1", "stage 2: steps (CPU s)",
                       "test perplexity", "minus softmax control [95%]", "minus teacher [95%]"},
                      {}};
  report::LinePlot curves{"validation perplexity during fine-tuning against the cell's CPU time",
                          "CPU seconds (stage 1, then stage 2 at each evaluation)", "validation perplexity"};
  for (const auto& c : j["cells"]) {
    if (!c.is_object() || !c.contains("stage2") || !c["stage2"].is_object() || !c.contains("vs_teacher") ||
        !c["vs_teacher"].is_object())
      continue;
    const auto& s2 = c["stage2"];
    std::vector<std::string> row{
        c.value("kind", ""), stage1_column(c, "{:.4g}"),
        c.contains("after_stage1_perplexity") ? fmt::format("{:.2f}", c.value("after_stage1_perplexity", 0.0))
                                               : std::string("—")};
    for (auto& column : perplexity_columns(c)) row.push_back(std::move(column));
    table.rows.push_back(std::move(row));
    if (s2.contains("curve") && s2["curve"].is_array()) curves.series.push_back(stage2_series(c));
  }
  section.headlines.push_back({"pretrained-LM linearization cells measured (bench/pretrained_linearize_results.py)",
                               std::to_string(table.rows.size()), {}});
  section.blocks.push_back({{}, table, {}});
  if (!curves.series.empty())
    section.blocks.push_back({{}, {}, report::Figure{curves.title, report::render_svg(curves)}});
}

}  // namespace

report::Section translation_stage(const StageContext& context) {
  const auto& o = context.options;
  auto run = [&](std::vector<std::string> args) { return run_attnkit(o, std::move(args)); };
  auto say = [&](const std::string& text) {
    if (!o.quiet) fmt::print(stderr, "{}\n", text);
  };

  // 1-2. Data and vocabulary.
  const fs::path data = context.dir / "bible";
  run({"--quiet", "data", "parallel", "--out", data.string()});
  const auto train_lines = lines_of(read_file((data / "train.tsv").string()));
  const auto val_lines = lines_of(read_file((data / "val.tsv").string()));
  const auto test_lines = lines_of(read_file((data / "test.tsv").string()));
  std::string sources, targets;
  for (const auto& line : train_lines) {
    const auto [s, t] = split_pair(line);
    sources += s + "\n";
    targets += t + "\n";
  }
  io::write_file_atomically((context.dir / "train.source.txt").string(), sources);
  io::write_file_atomically((context.dir / "train.target.txt").string(), targets);
  const std::string vocab_size = o.quick ? "2000" : "4000";
  const fs::path tokenizer = context.dir / "tokenizer";
  run({"--quiet", "tokenizer", "train", "--kind", "unigram", "--vocab-size", vocab_size, "--cased", "--out",
       tokenizer.string(), (context.dir / "train.source.txt").string(), (context.dir / "train.target.txt").string()});
  say(fmt::format("{} training pairs, a Unigram vocabulary of {}", train_lines.size(), vocab_size));

  // 3. Training for a CPU budget.
  const int budget = o.quick ? 15 : 180;
  const fs::path run_dir = context.dir / "run";
  fs::remove_all(run_dir);
  run({"--threads", "1", "--quiet", "--seed", std::to_string(o.seed), "train", "--task.name", "translation",
       "--task.data", (data / "train.tsv").string(), "--task.tokenizer", tokenizer.string(), "--task.truncate", "64",
       "--task.batch_size", "32", "--task.eval_examples", o.quick ? "20" : "100", "--task.label_smoothing", "0.1",
       "--model.hidden", "128", "--model.layers", "2", "--model.heads", "4", "--model.intermediate", "512",
       "--model.pre_ln", "true", "--optimizer.lr", "1e-3", "--schedule.warmup", "50", "--run.steps", "100000",
       "--run.cpu_budget", std::to_string(budget), "--run.eval_every", "0", "--run.log_every", "10", "--run.dir",
       run_dir.string()});
  report::LinePlot loss_plot{"Translation: training loss against CPU time", "CPU seconds of training steps",
                             "training loss (label-smoothed cross entropy)"};
  report::Series loss_series{"WEB -> RV1909", {}, {}, "lines"};
  nlohmann::json final_eval;
  int64_t steps = 0;
  double cpu = 0;
  for (const auto& line : lines_of(read_file((run_dir / "metrics.jsonl").string()))) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("eval")) final_eval = j["eval"];
    if (j.contains("loss") && j.contains("cpu_seconds")) {
      loss_series.x.push_back(j["cpu_seconds"].get<double>());
      loss_series.y.push_back(j["loss"].get<double>());
      steps = j["step"].get<int64_t>();
      cpu = j["cpu_seconds"].get<double>();
    }
  }
  if (!final_eval.is_object() || !final_eval.contains("bleu"))
    throw Error(fmt::format("{}: no final evaluation in metrics.jsonl", run_dir.string()));
  loss_plot.series.push_back(loss_series);
  const double bleu = final_eval["bleu"].get<double>();
  say(fmt::format("{} steps in {:.0f} CPU s: validation BLEU {:.2f}", steps, cpu, 100 * bleu));

  // 4. Test verses (Esther, Mark, Galatians are never seen in training).
  std::string test_sources;
  std::vector<std::pair<std::string, std::string>> samples;
  for (size_t i = 0; i < test_lines.size() && samples.size() < 3; i += test_lines.size() / 3 + 1) {
    samples.push_back(split_pair(test_lines[i]));
    test_sources += samples.back().first + "\n";
  }
  io::write_file_atomically((context.dir / "test_sources.txt").string(), test_sources);
  const auto translated = lines_of(run({"--threads", "1", "--quiet", "generate", "--model", run_dir.string(),
                                        "--sources", (context.dir / "test_sources.txt").string(), "--strategy",
                                        "beam", "--beams", "4", "--max-new-tokens", "60"})
                                       .out);
  report::Table sample_table{"test verses (books never seen in training), beam search of width 4",
                             {"English (WEB)", "Spanish (RV 1909)", "attnkit"},
                             {}};
  for (size_t i = 0; i < samples.size(); ++i) {
    // Beam search prints "translation<TAB>[score S]".
    const std::string output = i < translated.size() ? translated[i].substr(0, translated[i].find('\t')) : "";
    sample_table.rows.push_back({samples[i].first, samples[i].second, output});
  }

  // 5. Heads at the three sites.
  const size_t score_pairs = o.quick ? 12 : 60;
  std::string scoring;
  for (size_t i = 0; i < val_lines.size() && i < score_pairs; ++i) scoring += val_lines[i] + "\n";
  io::write_file_atomically((context.dir / "heads_pairs.tsv").string(), scoring);
  const fs::path heads_dir = context.dir / "heads";
  std::vector<std::string> heads_args = {"--threads", "1", "--quiet", "analyze", "heads", "--model", run_dir.string(),
                                         "--data", (context.dir / "heads_pairs.tsv").string(), "--out",
                                         heads_dir.string()};
  if (o.quick) heads_args.insert(heads_args.end(), {"--fractions", "25,50,75,100"});
  run(heads_args);
  const report::Section heads = report::read_section(heads_dir / "section.json");

  report::Section section;
  section.headlines.push_back({fmt::format("translation BLEU (validation, {} CPU s of training)", budget),
                               fmt::format("{:.2f}", 100 * bleu), {}});
  section.blocks.push_back({fmt::format(
      "Machine translation on a real parallel corpus shipped by Debian: the World English Bible "
      "(sword-text-web) against the Reina-Valera 1909 (sword-text-sparv), {} verse pairs for training, "
      "{} for validation, {} for test, split by book (`attnkit data parallel`). A joint Unigram vocabulary "
      "of {}; an encoder-decoder of 2 + 2 pre-LN layers, hidden 128, 4 heads, shared embeddings, label "
      "smoothing 0.1, trained on one thread for {} CPU seconds of training steps (`--run.cpu_budget`): "
      "{} steps. Validation ({} verses, greedy): BLEU {:.2f}, chrF2 {:.1f}, token accuracy {:.3f} "
      "(sacreBLEU's definitions). A model of this size needs CPU hours, not minutes: the stage shows the "
      "pipeline; docs/analysis.md has the experiment at a larger budget.",
      train_lines.size(), val_lines.size(), test_lines.size(), vocab_size, budget, steps, o.quick ? 20 : 100,
      100 * bleu, final_eval.contains("chrf") ? 100 * final_eval["chrf"].get<double>() : 0.0,
      final_eval.contains("token_accuracy") ? final_eval["token_accuracy"].get<double>() : 0.0), {}, {}});
  section.blocks.push_back({{}, {}, report::Figure{"training loss (every 10th step)", report::render_svg(loss_plot)}});
  section.blocks.push_back({{}, sample_table, {}});
  section.blocks.push_back({fmt::format(
      "Michel et al.'s question on this model (`attnkit analyze heads` on {} validation verses; metric: "
      "corpus BLEU of greedy decodes as a fraction): which of the three attentions — encoder self "
      "attention, decoder self attention, and the decoder's attention over the source (cross) — can "
      "lose heads? The tables below keep one head per layer at one site (their Table 3) and count the "
      "heads each site loses as pruning goes on (their Figure 6).", score_pairs), {}, {}});
  for (const auto& h : heads.headlines) section.headlines.push_back({"heads: " + h.label, h.value, h.met});
  for (const auto& block : heads.blocks) section.blocks.push_back(block);
  add_bible_heads_results(section, o.source_dir / "docs");
  add_linearization_results(section, o.source_dir / "docs");
  add_lm_linearization_results(section, o.source_dir / "docs");
  add_pretrained_linearization_results(section, o.source_dir / "docs");
  return section;
}

}  // namespace attnkit::demo
