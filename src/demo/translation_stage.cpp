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
// The model is small and the budget minutes, so its BLEU is low: the stage shows the pipeline and
// the shape of the result, docs/analysis.md the experiment at a larger budget.
#include "attnkit/demo/demo.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/process.h"
#include "attnkit/report/plot.h"
#include "cli_runner.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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
  return section;
}

}  // namespace attnkit::demo
