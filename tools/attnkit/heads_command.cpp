// `attnkit analyze heads` and `attnkit prune`: head importance, ablations and the pruning profile
// (Michel et al. 2019; analysis/heads.h) of a sequence classifier on a data file, and physical
// head pruning of a model directory (either layout). See docs/analysis.md.
#include "attnkit/analysis/heads.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/progress.h"
#include "attnkit/report/head_plots.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/train/text_datasets.h"
#include "command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <regex>

namespace attnkit::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct DataOptions {
  std::string data, data2, tokenizer;
  int64_t max_length = 128;
  int64_t batch_size = 32;
  int64_t score_examples = 0;
};

void add_data_options(CLI::App* cmd, DataOptions& d) {
  cmd->add_option("--data", d.data,
                  "classification data (TSV text<TAB>label or JSONL {\"text\", \"label\"}); labels "
                  "as the model was trained (sorted distinct labels of the file)");
  cmd->add_option("--tokenizer", d.tokenizer, "tokenizer file or directory (default: the model directory)");
  cmd->add_option("--max-length", d.max_length, "tokens per example (longer ones are truncated)")
      ->check(at_least(2))
      ->capture_default_str();
  cmd->add_option("--batch-size", d.batch_size, "examples per forward pass")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--score-examples", d.score_examples,
                  "examples of the data the importance is computed on (0 = all)")
      ->check(at_least(0))
      ->capture_default_str();
}

struct Tensors {
  at::Tensor ids, mask, labels;
};

Tensors read_data(const std::string& path, const DataOptions& d, const std::string& model_dir,
                  const io::LoadedModel& loaded) {
  const auto tokenizer = text::load_tokenizer(d.tokenizer.empty() ? model_dir : d.tokenizer);
  const auto data = train::read_classification(path);
  if (data.examples.empty()) throw Error(fmt::format("{}: no examples", path));
  if (int64_t(data.labels.size()) > loaded.heads.sequence_labels)
    throw Error(fmt::format("{}: {} labels, but the model's classifier has {}", path,
                            data.labels.size(), loaded.heads.sequence_labels));
  const int64_t limit = std::min(d.max_length, loaded.config.max_positions);
  std::vector<std::vector<int64_t>> rows;
  int64_t longest = 1;
  for (const auto& e : data.examples) {
    auto enc = tokenizer.encode(e.text);
    std::vector<int64_t> row(enc.ids.begin(), enc.ids.end());
    if (int64_t(row.size()) > limit) row.resize(limit);
    if (row.empty()) row.push_back(loaded.config.pad_token_id);
    longest = std::max<int64_t>(longest, row.size());
    rows.push_back(std::move(row));
  }
  const int64_t N = int64_t(rows.size());
  Tensors t;
  t.ids = torch::full({N, longest}, loaded.config.pad_token_id, torch::kLong);
  t.mask = torch::zeros({N, longest}, torch::kLong);
  t.labels = torch::empty({N}, torch::kLong);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t n = int64_t(rows[i].size());
    t.ids[i].narrow(0, 0, n).copy_(torch::tensor(rows[i], torch::kLong));
    t.mask[i].narrow(0, 0, n).fill_(1);
    t.labels[i] = data.examples[i].label;
  }
  return t;
}

std::vector<double> parse_fractions(const std::string& text) {
  std::vector<double> out;
  if (text.empty()) return out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw Error(fmt::format("--fractions: '{}' is not a number (give percentages, e.g. 10,20,50)", item));
    out.push_back(v / 100.0);
  }
  return out;
}

struct AnalyzeHeads {
  std::string model, run, out;
  DataOptions data;
  std::string fractions;
  bool exact = false;
  bool no_ablation = false;
  int64_t min_heads = 1;
  std::string importance_only;
};

ProgressOptions bar(const std::string& unit, bool quiet) {
  ProgressOptions p;
  p.unit = unit;
  p.log_every = 0;
  p.plain_lines = false;
  p.quiet = quiet;
  return p;
}

report::HeadsReport analyze(const std::string& model_dir, const AnalyzeHeads& c,
                            const GlobalOptions& global, bool ablation) {
  auto loaded = io::load_model(model_dir);
  if (loaded.heads.sequence_labels <= 0)
    throw Error(fmt::format("{}: analyze heads needs a sequence classifier (the model has no "
                            "classification head; fine-tune one with attnkit train --init)",
                            model_dir));
  const auto t = read_data(c.data.data, c.data, model_dir, loaded);
  auto task = analysis::classification_task(loaded.task, t.ids, t.mask, t.labels, c.data.batch_size,
                                            c.data.score_examples);
  report::HeadsReport r;
  r.model = model_dir;
  r.metric_name = task.metric_name;
  {
    ProgressReporter progress(bar("importance batches", global.quiet));
    progress.set_total(task.batches);
    r.importance = analysis::head_importance(task, analysis::full_mask(*task.model), {}, &progress);
  }
  int64_t heads = 0;
  for (int64_t h : task.model->heads_per_layer()) heads += h;
  if (ablation) {
    ProgressReporter progress(bar("evaluations (ablation)", global.quiet));
    progress.set_total(1 + 2 * heads);
    r.ablation = analysis::head_ablation(task, &progress);
  } else {
    torch::NoGradGuard no_grad;
    r.ablation.baseline = task.metric();
  }
  for (auto order : {analysis::PruningOrder::Importance, analysis::PruningOrder::Random,
                     analysis::PruningOrder::Reverse}) {
    analysis::PruningOptions options;
    options.fractions = parse_fractions(c.fractions);
    options.exact = c.exact;
    options.min_heads_per_layer = c.min_heads;
    options.order = order;
    options.seed = global.seed;
    ProgressReporter progress(bar(fmt::format("profile steps ({})", analysis::to_string(order)),
                                  global.quiet));
    progress.set_total(int64_t(options.fractions.empty() ? 10 : options.fractions.size()) + 1);
    r.profiles.push_back(analysis::pruning_profile(task, options, &progress));
  }
  return r;
}

json report_json(const report::HeadsReport& r) {
  json profiles = json::array();
  for (const auto& p : r.profiles) profiles.push_back(analysis::to_json(p));
  return {{"model", r.model},
          {"metric", r.metric_name},
          {"importance", analysis::to_json(r.importance)},
          {"ablation", analysis::to_json(r.ablation)},
          {"profiles", profiles}};
}

// Checkpoints of a run directory: RUN/checkpoints/step-N (or any subfolder with a model) by step.
std::vector<std::pair<int64_t, std::string>> run_checkpoints(const std::string& run) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!fs::is_directory(run)) throw Error(fmt::format("--run {}: not a directory", run));
  const std::regex step(R"(.*?(\d+)$)");
  for (const auto* base : {"checkpoints", ""}) {
    const fs::path dir = fs::path(run) / base;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      std::smatch m;
      const std::string name = entry.path().filename().string();
      if (!entry.is_directory() || !std::regex_match(name, m, step)) continue;
      if (!fs::exists(entry.path() / "model.safetensors")) continue;
      out.emplace_back(std::stoll(m[1]), entry.path().string());
    }
    if (!out.empty()) break;
  }
  if (out.empty()) throw Error(fmt::format("--run {}: no checkpoints (folders ending in a step number with a model.safetensors)", run));
  std::sort(out.begin(), out.end());
  return out;
}

int run_analyze_heads(const AnalyzeHeads& c, const GlobalOptions& global) {
  if (c.model.empty() == c.run.empty())
    throw Error("analyze heads: give exactly one of --model DIR and --run RUN_DIR");
  if (c.data.data.empty()) throw Error("analyze heads: --data FILE is required");
  fs::create_directories(c.out);
  std::vector<std::string> written;
  if (!c.model.empty()) {
    const auto r = analyze(c.model, c, global, !c.no_ablation);
    json j = report_json(r);
    if (!c.data.data2.empty()) {
      AnalyzeHeads other = c;
      other.data.data = c.data.data2;
      auto loaded = io::load_model(c.model);
      const auto t = read_data(c.data.data2, c.data, c.model, loaded);
      auto task = analysis::classification_task(loaded.task, t.ids, t.mask, t.labels,
                                                c.data.batch_size, c.data.score_examples);
      const auto second = analysis::head_importance(task, analysis::full_mask(*task.model));
      const auto corr = analysis::importance_correlation(r.importance.importance, second.importance);
      j["cross_data"] = {{"data", c.data.data2},
                         {"importance", analysis::to_json(second)},
                         {"pearson", corr.pearson},
                         {"spearman", corr.spearman}};
      written.push_back("(cross-data correlation in heads.json)");
      if (!global.quiet)
        fmt::print("importance correlation {} vs {}: pearson {:.3f}, spearman {:.3f}\n", c.data.data,
                   c.data.data2, corr.pearson, corr.spearman);
    }
    io::write_file_atomically((fs::path(c.out) / "heads.json").string(), j.dump(2) + "\n");
    written.push_back("heads.json");
    io::write_file_atomically((fs::path(c.out) / "heads_importance.svg").string(),
                              report::head_heatmap_svg(r.importance.importance, "Head importance"));
    written.push_back("heads_importance.svg");
    report::write_svg(report::pruning_profile_plot(r.profiles, r.metric_name),
                      (fs::path(c.out) / "heads_profile.svg").string());
    written.push_back("heads_profile.svg");
    report::write_section(report::heads_section(r), fs::path(c.out));
    written.push_back("section.json");
    if (!global.quiet) {
      fmt::print("{} baseline {:.4f}\n", r.metric_name, r.ablation.baseline);
      for (const auto& p : r.profiles) {
        fmt::print("  {:<10}", analysis::to_string(p.order));
        for (const auto& s : p.steps) fmt::print(" {:.0f}%:{:.3f}", 100 * s.fraction, s.metric);
        fmt::print("\n");
      }
    }
  } else {
    const auto checkpoints = run_checkpoints(c.run);
    json per = json::array();
    std::vector<int64_t> steps;
    std::vector<analysis::PruningProfile> profiles;
    for (const auto& [step, dir] : checkpoints) {
      const auto r = analyze(dir, c, global, false);
      per.push_back({{"step", step}, {"checkpoint", dir}, {"analysis", report_json(r)}});
      steps.push_back(step);
      profiles.push_back(r.profiles.front());
      io::write_file_atomically((fs::path(c.out) / fmt::format("heads_importance_step{}.svg", step)).string(),
                                report::head_heatmap_svg(r.importance.importance,
                                                         fmt::format("Head importance at step {}", step)));
      written.push_back(fmt::format("heads_importance_step{}.svg", step));
    }
    io::write_file_atomically((fs::path(c.out) / "heads_over_training.json").string(),
                              json{{"run", c.run}, {"checkpoints", per}}.dump(2) + "\n");
    written.push_back("heads_over_training.json");
    report::write_svg(report::profile_over_steps_plot(steps, profiles, "accuracy"),
                      (fs::path(c.out) / "heads_profile_over_training.svg").string());
    written.push_back("heads_profile_over_training.svg");
  }
  if (!global.quiet) fmt::print("wrote {} in {}\n", fmt::join(written, ", "), c.out);
  return 0;
}

struct PruneCommand {
  std::string model, out, heads, importance, format;
  double fraction = -1;
  int64_t min_heads = 1;
  DataOptions data;
};

int run_prune(const PruneCommand& c, const GlobalOptions& global) {
  const int given = int(!c.heads.empty()) + int(c.fraction >= 0);
  if (given != 1) throw Error("prune: give exactly one of --heads JSON and --fraction F");
  if (c.fraction >= 0 && c.data.data.empty() == c.importance.empty())
    throw Error("prune: --fraction needs the importance from --data FILE or --importance heads.json");
  auto loaded = io::load_model(c.model);
  auto& model = *loaded.model;
  const auto before = models::parameter_count(*loaded.task);
  models::HeadIndices prune;
  if (!c.heads.empty()) {
    json parsed;
    try {
      parsed = json::parse(c.heads);
    } catch (const json::exception&) {
      throw Error("--heads: not JSON (expected {\"layer\": [heads]})");
    }
    prune = models::head_indices_from_json(parsed, "--heads");  // unpruned numbering, as HF
  } else {
    analysis::HeadTable importance;
    if (!c.importance.empty()) {
      json j;
      try {
        j = json::parse(read_file(c.importance));
        importance = j.at("importance").at("importance").get<analysis::HeadTable>();
      } catch (const json::exception& e) {
        throw Error(fmt::format("--importance {}: not a heads.json of attnkit analyze heads ({})",
                                c.importance, e.what()));
      }
    } else {
      const auto t = read_data(c.data.data, c.data, c.model, loaded);
      auto task = analysis::classification_task(loaded.task, t.ids, t.mask, t.labels,
                                                c.data.batch_size, c.data.score_examples);
      ProgressReporter progress(bar("importance batches", global.quiet));
      progress.set_total(task.batches);
      importance = analysis::head_importance(task, analysis::full_mask(model), {}, &progress).importance;
    }
    prune = analysis::to_original_numbering(
        model, analysis::heads_to_prune(model, importance, c.fraction, c.min_heads));
  }
  model.prune_heads(prune);
  const std::string format = c.format.empty() ? loaded.format : c.format;
  if (format == "attnkit") {
    io::save_attnkit_model(loaded.task, c.out);
  } else {
    io::HuggingFaceModel info = loaded.huggingface;
    if (loaded.format != "huggingface") {
      info.config_json = io::config_to_huggingface(loaded.task->config(), loaded.heads);
      info.layout = io::default_layout(loaded.task->config(), loaded.heads);
    }
    io::save_huggingface(loaded.task, info, c.out);
  }
  // Tokenizer files travel along, as with convert.
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.txt", "vocab.json", "merges.txt"}) {
    const fs::path from = fs::path(c.model) / name;
    if (fs::is_directory(c.model) && fs::exists(from))
      fs::copy_file(from, fs::path(c.out) / name, fs::copy_options::overwrite_existing);
  }
  if (!global.quiet) {
    int64_t left = 0, total = 0;
    for (int64_t h : model.heads_per_layer()) left += h;
    total = model.config().layers * model.config().heads;
    fmt::print("pruned {} of {} heads ({}); parameters {} -> {}; wrote {} ({} format)\n",
               total - left, total, models::head_indices_to_json(model.config().pruned_heads).dump(),
               before, models::parameter_count(*loaded.task), c.out, format);
  }
  return 0;
}

}  // namespace

void register_heads_commands(CLI::App& app, GlobalOptions& global) {
  auto* analyze_app = app.get_subcommand("analyze");
  auto c = std::make_shared<AnalyzeHeads>();
  auto* cmd = analyze_app->add_subcommand(
      "heads",
      "head importance, single-head and all-but-one ablations and the pruning profile (Michel et "
      "al. 2019) of a sequence classifier on a data file; writes heads.json, SVGs, section.json");
  cmd->add_option("--model", c->model, "model directory (attnkit or Hugging Face layout) with a classifier");
  cmd->add_option("--run", c->run, "run directory: every checkpoint's importance and profile over steps");
  add_data_options(cmd, c->data);
  cmd->add_option("--data2", c->data.data2, "second data file: correlation of the two importance maps");
  cmd->add_option("--fractions", c->fractions, "pruning steps in percent, e.g. 5,10,20,50 (default 10,20,...,100)");
  cmd->add_flag("--exact", c->exact, "re-score the importance after each pruning step");
  cmd->add_option("--min-heads", c->min_heads, "heads kept in every layer")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_flag("--no-ablation", c->no_ablation, "skip the 2·heads ablation passes");
  cmd->add_option("--out", c->out, "output directory")->required();
  cmd->callback([c, &global] { global.action = [c, &global] { return run_analyze_heads(*c, global); }; });

  auto p = std::make_shared<PruneCommand>();
  auto* prune = app.add_subcommand(
      "prune",
      "remove attention heads physically (rows of Q/K/V, columns of the output projection) and "
      "write the smaller model; config.json records pruned_heads as Hugging Face does");
  prune->add_option("--model", p->model, "model directory (attnkit or Hugging Face layout)")->required();
  prune->add_option("--out", p->out, "output directory")->required();
  prune->add_option("--heads", p->heads, "heads to remove, JSON {\"layer\": [heads]} (unpruned numbering)");
  prune->add_option("--fraction", p->fraction, "fraction of all heads to remove, least important first")
      ->check(CLI::Range(0.0, 1.0));
  prune->add_option("--importance", p->importance, "heads.json of attnkit analyze heads (for --fraction)");
  prune->add_option("--min-heads", p->min_heads, "heads kept in every layer")
      ->check(at_least(0))
      ->capture_default_str();
  prune->add_option("--format", p->format, "output layout (default: the input's)")
      ->check(CLI::IsMember({"attnkit", "huggingface"}));
  add_data_options(prune, p->data);
  prune->callback([p, &global] { global.action = [p, &global] { return run_prune(*p, global); }; });
}

}  // namespace attnkit::cli
