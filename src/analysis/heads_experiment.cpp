#include "attnkit/analysis/heads_experiment.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/progress.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace attnkit::analysis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::unique_ptr<ProgressReporter> phase(const HeadsProgress& progress, const std::string& unit,
                                        int64_t total) {
  if (!progress) return nullptr;
  auto reporter = progress(unit);
  if (reporter) reporter->set_total(total);
  return reporter;
}

HeadsAnalysis analyze(const std::string& model_dir, const HeadsExperimentOptions& o, bool ablation,
                      const HeadsProgress& progress) {
  const auto loaded = io::load_model(model_dir);
  auto task = load_heads_task(model_dir, loaded, o.data, o.read_data, o.batch_size, o.score_examples);
  if (!o.score_data.empty()) {
    // Importance (and the orders of the profiles) from score_data, every metric on data: heads are
    // chosen on one text and judged on another.
    auto scoring = load_heads_task(model_dir, loaded, o.score_data, o.read_data, o.batch_size,
                                   o.score_examples);
    task.batches = scoring.batches;
    task.loss = std::move(scoring.loss);
  }
  HeadsAnalysis r;
  r.model = model_dir;
  r.score_data = o.score_data;
  r.metric_name = task.metric_name;
  r.sites = site_rows(task.sites);
  {
    auto bar = phase(progress, "importance batches", task.batches);
    r.importance = head_importance(task, full_mask(task.sites), {}, bar.get());
  }
  if (task.evaluation_loss) {
    torch::NoGradGuard no_grad;
    r.baseline_loss = task.evaluation_loss();
  }
  if (ablation) {
    const int64_t heads = count_heads(full_mask(task.sites));
    auto bar = phase(progress, "evaluations (ablation)", 1 + 2 * heads);
    r.ablation = head_ablation(task, bar.get());
  } else {
    torch::NoGradGuard no_grad;
    r.ablation.baseline = task.metric();
  }
  auto profile = [&](PruningOrder order, bool groups) {
    PruningOptions options;
    options.fractions = o.fractions;
    options.exact = o.exact;
    options.min_heads_per_layer = o.min_heads;
    options.order = order;
    options.seed = o.seed;
    options.groups = groups;
    auto bar = phase(progress,
                     fmt::format("profile steps ({}{})", to_string(order), groups ? ", key/value groups" : ""),
                     int64_t(options.fractions.empty() ? 10 : options.fractions.size()) + 1);
    r.profiles.push_back(pruning_profile(task, options, bar.get()));
  };
  for (auto order : {PruningOrder::Importance, PruningOrder::Random, PruningOrder::Reverse})
    profile(order, false);
  // Grouped-query attention: whole key/value groups too, by group importance and at random.
  if (!r.importance.group_raw.empty())
    for (auto order : {PruningOrder::Importance, PruningOrder::Random}) profile(order, true);
  return r;
}

}  // namespace

const char* to_string(HeadsTaskKind kind) {
  switch (kind) {
    case HeadsTaskKind::Classification: return "classification";
    case HeadsTaskKind::LanguageModel: return "language model";
    case HeadsTaskKind::Translation: return "translation";
  }
  return "?";
}

HeadsTaskKind heads_task_kind(const std::string& model_dir, const io::LoadedModel& model) {
  if (model.model && model.model->shape() == models::ModelShape::EncoderDecoder)
    return HeadsTaskKind::Translation;
  if (model.heads.sequence_labels > 0) return HeadsTaskKind::Classification;
  if (model.heads.causal_lm) return HeadsTaskKind::LanguageModel;
  throw Error(fmt::format("{}: analyze heads needs a sequence classifier or a causal language-model "
                          "head (the model has neither; fine-tune a classifier with attnkit train "
                          "--init)",
                          model_dir));
}

HeadTask load_heads_task(const std::string& model_dir, const io::LoadedModel& model,
                         const std::string& data_path, const HeadsDataReader& read,
                         int64_t batch_size, int64_t score_examples) {
  const HeadsTaskKind kind = heads_task_kind(model_dir, model);
  if (!read) throw Error("analyze heads: no data reader");
  const auto data = read(data_path, model_dir, model);
  const at::Tensor& rows = kind == HeadsTaskKind::Translation ? data.translation.labels : data.input_ids;
  if (!rows.defined() || rows.dim() != 2 || rows.size(0) == 0)
    throw Error(fmt::format("{}: no examples", data_path));
  if (kind == HeadsTaskKind::Translation) {
    auto encoder_decoder = std::dynamic_pointer_cast<models::EncoderDecoderModelImpl>(model.model);
    if (!encoder_decoder) throw Error(fmt::format("{}: not an attnkit encoder-decoder", model_dir));
    return translation_task(models::EncoderDecoderModel(encoder_decoder), data.translation,
                            data.metric, data.metric_name.empty() ? "bleu" : data.metric_name,
                            batch_size, score_examples);
  }
  if (kind == HeadsTaskKind::LanguageModel)
    return language_model_task(model.task, data.input_ids, data.attention_mask, batch_size,
                               score_examples);
  if (!data.labels.defined() || data.labels.size(0) == 0)
    throw Error(fmt::format("{}: no examples", data_path));
  if (data.label_count > model.heads.sequence_labels)
    throw Error(fmt::format("{}: {} labels, but the model's classifier has {}", data_path,
                            data.label_count, model.heads.sequence_labels));
  return classification_task(model.task, data.input_ids, data.attention_mask, data.labels,
                             batch_size, score_examples);
}

HeadsExperiment run_heads_experiment(const HeadsExperimentOptions& o, const HeadsProgress& progress) {
  if (o.model.empty() == o.run.empty())
    throw Error("analyze heads: give exactly one of --model DIR and --run RUN_DIR");
  if (o.data.empty()) throw Error("analyze heads: --data FILE is required");
  HeadsExperiment e;
  if (!o.model.empty()) {
    e.analysis = analyze(o.model, o, o.ablation, progress);
    if (!o.data2.empty()) {
      const auto loaded = io::load_model(o.model);
      auto task = load_heads_task(o.model, loaded, o.data2, o.read_data, o.batch_size, o.score_examples);
      CrossDataImportance cross;
      cross.data = o.data2;
      cross.importance = head_importance(task, full_mask(task.sites));
      cross.correlation =
          importance_correlation(e.analysis.importance.importance, cross.importance.importance);
      e.cross_data = std::move(cross);
    }
    return e;
  }
  e.run = o.run;
  for (const auto& [step, dir] : run_checkpoints(o.run))
    e.checkpoints.push_back({step, dir, analyze(dir, o, false, progress)});
  return e;
}

std::vector<std::pair<int64_t, std::string>> run_checkpoints(const std::string& run) {
  if (!fs::is_directory(run)) throw Error(fmt::format("--run {}: not a directory", run));
  auto out = io::run_model_checkpoints(run);
  if (out.empty())
    throw Error(fmt::format("--run {}: no checkpoints (folders ending in a step number with a "
                            "model.safetensors)",
                            run));
  return out;
}

json to_json(const HeadsAnalysis& r) {
  json profiles = json::array();
  for (const auto& p : r.profiles) profiles.push_back(to_json(p, r.sites));
  json j = {{"model", r.model},
            {"metric", r.metric_name},
            {"importance_data", r.score_data.empty() ? json(nullptr) : json(r.score_data)},
            {"sites", to_json(r.sites)},
            {"importance", to_json(r.importance)},
            {"ablation", to_json(r.ablation)},
            {"profiles", profiles}};
  if (r.baseline_loss) {
    j["baseline_loss"] = *r.baseline_loss;
    j["baseline_perplexity"] = std::exp(*r.baseline_loss);
  }
  return j;
}

json to_json(const HeadsExperiment& e) {
  if (!e.run.empty()) {
    json per = json::array();
    for (const auto& c : e.checkpoints)
      per.push_back({{"step", c.step}, {"checkpoint", c.directory}, {"analysis", to_json(c.analysis)}});
    return {{"run", e.run}, {"checkpoints", per}};
  }
  json j = to_json(e.analysis);
  if (e.cross_data)
    j["cross_data"] = {{"data", e.cross_data->data},
                       {"importance", to_json(e.cross_data->importance)},
                       {"pearson", e.cross_data->correlation.pearson},
                       {"spearman", e.cross_data->correlation.spearman}};
  return j;
}

HeadTable read_heads_importance(const std::string& path, const std::string& what) {
  const std::string text = read_file(path);
  try {
    return json::parse(text).at("importance").at("importance").get<HeadTable>();
  } catch (const json::exception& e) {
    throw Error(fmt::format("{} {}: not a heads.json of attnkit analyze heads ({})", what, path,
                            e.what()));
  }
}

PruneResult prune_model(const PruneOptions& o, const HeadsProgress& progress) {
  const int given = int(o.heads.has_value() || o.heads_by_site.has_value()) + int(o.fraction >= 0);
  if (given != 1) throw Error("prune: give exactly one of --heads JSON and --fraction F");
  if (o.fraction >= 0 && o.data.empty() == o.importance_file.empty())
    throw Error("prune: --fraction needs the importance from --data FILE or --importance heads.json");
  auto loaded = io::load_model(o.model);
  auto& model = *loaded.model;
  const auto sites = model.attention_sites();
  PruneResult r;
  r.parameters_before = models::parameter_count(model.module());
  for (const auto& site : sites) r.heads_before += site.layers() * site.stack->config().heads;
  // Heads to remove per site, in the unpruned numbering.
  std::vector<models::HeadIndices> prune(sites.size());
  if (o.heads || o.heads_by_site) {
    const models::SiteHeads given = o.heads ? models::SiteHeads{{"", *o.heads}} : *o.heads_by_site;
    for (const auto& [site, heads] : model.resolve_site_heads(given, "prune: --heads"))
      for (size_t s = 0; s < sites.size(); ++s)
        if (sites[s].name == site.name) prune[s] = heads;
  } else {
    HeadTable importance;
    if (!o.importance_file.empty()) {
      importance = read_heads_importance(o.importance_file, "--importance");
    } else {
      auto task = load_heads_task(o.model, loaded, o.data, o.read_data, o.batch_size, o.score_examples);
      auto bar = phase(progress, "importance batches", task.batches);
      importance = head_importance(task, full_mask(task.sites), {}, bar.get()).importance;
    }
    const auto chosen = heads_to_prune(sites, importance, o.fraction, o.min_heads);
    for (size_t s = 0; s < sites.size(); ++s) prune[s] = to_original_numbering(sites[s], chosen[s]);
  }
  for (size_t s = 0; s < sites.size(); ++s) model.prune_heads(sites[s].name, prune[s]);
  r.format = o.format.empty() ? loaded.format : o.format;
  io::save_model(loaded, o.out, r.format);
  r.heads_after = model.head_count();
  for (const auto& site : model.attention_sites()) {
    const auto& c = site.stack->config();
    r.pruned_by_site[site.name] =
        site.attention == models::AttentionSite::Cross ? c.pruned_cross_heads : c.pruned_heads;
  }
  r.pruned_heads = r.pruned_by_site.at(sites.front().name);
  r.parameters_after = models::parameter_count(model.module());
  return r;
}

}  // namespace attnkit::analysis
