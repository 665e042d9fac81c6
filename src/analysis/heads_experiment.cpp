#include "attnkit/analysis/heads_experiment.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/progress.h"
#include "attnkit/strings.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

// Files up to this size are fingerprinted by their content, larger ones by their modification time.
constexpr uintmax_t kHashedFileBytes = uintmax_t(64) << 20;

// What a file, or each file of a directory, is now (a PassStore's settings: a model or data file
// changed in place makes its stored passes stale): name, size, and for a file of at most
// kHashedFileBytes (data files, small models) a 64-bit FNV-1a hash of its bytes, so a script that
// writes the same text again does not make an analysis start over; for a larger one (a model's
// weights, read whole anyway only by the load) its modification time.
std::string fingerprint(const std::string& path) {
  const auto one = [](const fs::path& p) {
    const uintmax_t size = fs::file_size(p);
    if (size > kHashedFileBytes)
      return fmt::format("{}:{}:{}", p.filename().string(), size, fs::last_write_time(p).time_since_epoch().count());
    return fmt::format("{}:{}:fnv1a-{:016x}", p.filename().string(), size, fnv1a64(read_file(p.string())));
  };
  if (!fs::is_directory(path)) return one(path);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path))
    if (entry.is_regular_file()) files.push_back(one(entry.path()));
  std::sort(files.begin(), files.end());
  return fmt::format("{}", fmt::join(files, " "));
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
  if (!o.pass_store.empty())
    attach_pass_store(task, o.pass_store,
                      fmt::format("model {} [{}]; data {} [{}]; {}", loaded.path, fingerprint(loaded.path), o.data,
                                  fingerprint(o.data), o.pass_settings));
  HeadsAnalysis r;
  r.model = model_dir;
  r.score_data = o.score_data;
  r.metric_name = task.metric_name;
  r.sites = site_rows(task.sites);
  {
    auto bar = phase(progress, "importance batches", task.batches);
    r.importance = head_importance(task, full_mask(task.sites), {}, bar.get());
  }
  // One pass of the unpruned model: every profile's first step, and a language model's loss.
  const PruningStep baseline = unpruned_step(task);
  if (baseline.loss) {
    r.baseline_loss = baseline.loss;
  } else if (task.evaluation_loss) {
    torch::NoGradGuard no_grad;
    r.baseline_loss = task.evaluation_loss();
  }
  if (ablation) {
    const int64_t heads = count_heads(full_mask(task.sites));
    auto bar = phase(progress, "evaluations (ablation)", 1 + 2 * heads);
    r.ablation = head_ablation(task, bar.get());
    // The items of every ablation pass (the unpruned model, then per row and head: that head
    // masked, only that head kept), for their intervals.
    const auto& passes = r.ablation.items;
    if (int64_t(passes.size()) == 1 + 2 * heads && passes.front().width > 0) {
      const metrics::PairedBootstrapOptions bootstrap{r.statistics_options.samples,
                                                      r.statistics_options.seed};
      size_t k = 1;
      for (const auto& row : r.ablation.single) {
        r.single_vs_unpruned.emplace_back();
        r.all_but_one_vs_unpruned.emplace_back();
        for (size_t h = 0; h < row.size(); ++h, k += 2) {
          r.single_vs_unpruned.back().push_back(metrics::paired_bootstrap(passes[k], passes[0], bootstrap));
          r.all_but_one_vs_unpruned.back().push_back(
              metrics::paired_bootstrap(passes[k + 1], passes[0], bootstrap));
        }
      }
    }
  } else {
    r.ablation.baseline = baseline.metric;
  }
  auto profile = [&](PruningOrder order, bool groups, uint64_t seed) {
    PruningOptions options;
    options.fractions = o.fractions;
    options.exact = o.exact;
    options.min_heads_per_layer = o.min_heads;
    options.order = order;
    options.seed = seed;
    options.groups = groups;
    options.initial_importance = &r.importance;  // the default importance options, unpruned
    const std::string seeded = order == PruningOrder::Random && o.random_orders > 1
                                   ? fmt::format(" {}", seed) : "";
    auto bar = phase(progress,
                     fmt::format("profile steps ({}{}{})", to_string(order), seeded,
                                 groups ? ", key/value groups" : ""),
                     int64_t(options.fractions.empty() ? 10 : options.fractions.size()) + 1);
    r.profiles.push_back(pruning_profile(task, options, bar.get(), &baseline));
  };
  for (auto order : {PruningOrder::Importance, PruningOrder::Random, PruningOrder::Reverse})
    profile(order, false, o.seed);
  for (int64_t k = 1; k < o.random_orders; ++k) profile(PruningOrder::Random, false, o.seed + uint64_t(k));
  // Grouped-query attention: whole key/value groups too, by group importance and at random.
  if (!r.importance.group_raw.empty()) {
    profile(PruningOrder::Importance, true, o.seed);
    for (int64_t k = 0; k < o.random_orders; ++k) profile(PruningOrder::Random, true, o.seed + uint64_t(k));
  }
  add_profile_statistics(r);
  if (task.passes) {
    r.passes_loaded = task.passes->loaded();
    r.passes_stored = task.passes->stored();
  }
  return r;
}

// Per row, the heads a mask keeps.
std::vector<int64_t> kept_per_row(const HeadMask& mask) {
  std::vector<int64_t> out;
  for (const auto& row : mask) out.push_back(std::count(row.begin(), row.end(), 1.0));
  return out;
}

ProfileStatistics statistics_of(const PruningProfile& p, const ProfileStatisticsOptions& options) {
  ProfileStatistics out;
  if (p.steps.empty() || p.steps.front().items.width == 0) return out;
  const metrics::PairedBootstrapOptions bootstrap{options.samples, options.seed};
  const auto& base = p.steps.front().items;
  for (size_t k = 1; k < p.steps.size(); ++k) {
    const auto& items = p.steps[k].items;
    StepVsBaseline s;
    s.step = k;
    s.bootstrap = metrics::paired_bootstrap(items, base, bootstrap);
    const auto scores = metrics::resampled_scores({&items, &base}, bootstrap);
    std::vector<double> ratios(scores[0].size());
    // A resample whose unpruned score is 0 (accuracy) has an infinite (or, at 0 too, no) change.
    for (size_t j = 0; j < ratios.size(); ++j)
      ratios[j] = scores[1][j] != 0 ? scores[0][j] / scores[1][j] - 1
                                    : (scores[0][j] == 0 ? 0.0 : INFINITY);
    const double a = s.bootstrap.a.score, b = s.bootstrap.b.score;
    s.relative = metrics::bootstrap_estimate(b != 0 ? a / b - 1 : (a == 0 ? 0.0 : INFINITY), ratios);
    out.vs_baseline.push_back(std::move(s));
  }
  if (base.metric != metrics::SummedMetric::kPerplexity) return out;
  PerplexityBudget b;
  b.budget = options.budget;
  for (const auto& s : out.vs_baseline) {
    if (s.relative.score > options.budget) break;
    b.step = s.step;
  }
  for (const auto& s : out.vs_baseline) {
    if (s.relative.interval.high > options.budget) break;
    b.step_upper = s.step;
  }
  b.pruned = p.steps[b.step].pruned;
  b.fraction = p.steps[b.step].fraction;
  b.pruned_upper = p.steps[b.step_upper].pruned;
  if (b.step > 0) {
    const auto& at = out.vs_baseline[b.step - 1];
    b.increase = at.relative.score;
    b.interval = at.relative.interval;
  }
  b.upper_within = b.interval.high <= options.budget;
  b.kept_per_layer = kept_per_row(p.masks[b.step]);
  out.budget = std::move(b);
  return out;
}

RandomBand random_band(const HeadsAnalysis& r, bool groups, const ProfileStatisticsOptions& options) {
  RandomBand band;
  band.groups = groups;
  const PruningProfile* importance = nullptr;
  std::vector<const PruningProfile*> random;
  for (const auto& p : r.profiles) {
    if (p.groups != groups) continue;
    if (p.order == PruningOrder::Importance && !importance) importance = &p;
    if (p.order == PruningOrder::Random) {
      random.push_back(&p);
      band.seeds.push_back(p.seed);
    }
  }
  if (random.empty()) return band;
  const size_t steps = random.front()->steps.size();
  for (const auto* p : random)
    if (p->steps.size() != steps) throw Error("profile statistics: the random orders differ in steps");
  if (random.size() >= 2)
    for (size_t k = 0; k < steps; ++k) {
      RandomBandStep s;
      std::vector<double> metric, perplexity;
      s.pruned_min = s.pruned_max = random.front()->steps[k].pruned;
      for (const auto* p : random) {
        const auto& step = p->steps[k];
        s.fraction += step.fraction / double(random.size());
        s.pruned_min = std::min(s.pruned_min, step.pruned);
        s.pruned_max = std::max(s.pruned_max, step.pruned);
        metric.push_back(step.metric);
        if (step.loss && std::isfinite(*step.loss)) perplexity.push_back(std::exp(*step.loss));
      }
      s.metric = metrics::summarize_seeds(metric);
      if (perplexity.size() == random.size()) s.perplexity = metrics::summarize_seeds(perplexity);
      band.steps.push_back(std::move(s));
    }
  if (!importance || importance->steps.size() != steps) return band;
  for (const auto* p : random)
    if (p->steps.front().items.width == 0) return band;
  if (importance->steps.front().items.width == 0) return band;
  const metrics::PairedBootstrapOptions bootstrap{options.samples, options.seed};
  for (size_t k = 1; k < steps; ++k) {
    std::vector<const metrics::ItemStatistics*> systems{&importance->steps[k].items};
    for (const auto* p : random) systems.push_back(&p->steps[k].items);
    const auto scores = metrics::resampled_scores(systems, bootstrap);
    const size_t orders = random.size();
    double random_mean = 0;
    for (size_t j = 0; j < orders; ++j) random_mean += metrics::corpus_score(*systems[1 + j]) / double(orders);
    metrics::Pcg64 draw(options.seed + 1);
    std::vector<double> differences(options.samples);
    for (size_t i = 0; i < options.samples; ++i) {
      double mean = 0;
      for (size_t j = 0; j < orders; ++j) mean += scores[1 + draw.below(orders)][i];
      differences[i] = scores[0][i] - mean / double(orders);
    }
    ImportanceVsRandom c;
    c.step = k;
    c.fraction = importance->steps[k].fraction;
    c.orders = orders;
    c.difference = metrics::bootstrap_estimate(metrics::corpus_score(*systems[0]) - random_mean, differences);
    c.verdict = metrics::verdict(c.difference.interval, metrics::higher_is_better(systems[0]->metric),
                                 "importance", "random");
    band.importance_vs_random.push_back(std::move(c));
  }
  return band;
}

json band_json(const RandomBand& band, const std::string& item_metric) {
  json steps = json::array();
  for (const auto& s : band.steps) {
    json step = {{"fraction", s.fraction}, {"pruned_min", s.pruned_min}, {"pruned_max", s.pruned_max},
                 {"metric", metrics::result_json(s.metric)}};
    if (s.perplexity) step["perplexity"] = metrics::result_json(*s.perplexity);
    steps.push_back(std::move(step));
  }
  json comparisons = json::array();
  for (const auto& c : band.importance_vs_random) {
    json d = {{"score", c.difference.score}, {"mean", c.difference.mean}, {"low", c.difference.interval.low},
              {"high", c.difference.interval.high}, {"half_width", c.difference.half_width}};
    comparisons.push_back({{"step", c.step},
                           {"fraction", c.fraction},
                           {"orders", c.orders},
                           {"metric", item_metric},
                           {"difference", d},
                           {"verdict", c.verdict.verdict == metrics::Verdict::kABeatsB   ? "a"
                                       : c.verdict.verdict == metrics::Verdict::kBBeatsA ? "b"
                                                                                        : "level"},
                           {"verdict_text", c.verdict.text}});
  }
  return {{"unit", band.groups ? "group" : "head"},
          {"seeds", band.seeds},
          {"steps", steps},
          {"importance_vs_random", comparisons}};
}

json statistics_json(const ProfileStatistics& s) {
  json steps = json::array();
  for (const auto& v : s.vs_baseline) {
    json step = metrics::result_json(v.bootstrap, "pruned", "unpruned");
    step["step"] = v.step;
    step["relative"] = {{"score", v.relative.score}, {"mean", v.relative.mean},
                        {"low", v.relative.interval.low}, {"high", v.relative.interval.high},
                        {"half_width", v.relative.half_width}};
    steps.push_back(std::move(step));
  }
  json out = {{"vs_unpruned", steps}};
  if (s.budget) {
    const auto& b = *s.budget;
    out["perplexity_budget"] = {{"budget", b.budget},
                                {"step", b.step},
                                {"pruned", b.pruned},
                                {"fraction", b.fraction},
                                {"increase", b.increase},
                                {"low", b.interval.low},
                                {"high", b.interval.high},
                                {"upper_within", b.upper_within},
                                {"step_upper", b.step_upper},
                                {"pruned_upper", b.pruned_upper},
                                {"kept_per_layer", b.kept_per_layer}};
  }
  return out;
}

}  // namespace

void add_profile_statistics(HeadsAnalysis& r, const ProfileStatisticsOptions& options) {
  r.statistics_options = options;
  r.statistics.clear();
  r.random_bands.clear();
  for (const auto& p : r.profiles) r.statistics.push_back(statistics_of(p, options));
  for (bool groups : {false, true}) {
    RandomBand band = random_band(r, groups, options);
    if (!band.seeds.empty()) r.random_bands.push_back(std::move(band));
  }
}

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
                            batch_size, score_examples, data.metric_items);
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
  if (o.random_orders < 1)
    throw Error(fmt::format("analyze heads: --random-orders must be at least 1 (got {})", o.random_orders));
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
  HeadsExperimentOptions each = o;
  each.pass_store.clear();  // a store holds one model's passes
  for (const auto& [step, dir] : run_checkpoints(o.run))
    e.checkpoints.push_back({step, dir, analyze(dir, each, false, progress)});
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
  // "profiles" keeps one random order per unit (the first seed), as with one order; the other
  // orders go to random_orders.profiles.
  json profiles = json::array(), more_random = json::array();
  bool random_seen[2] = {false, false};
  for (size_t i = 0; i < r.profiles.size(); ++i) {
    const auto& profile = r.profiles[i];
    json p = to_json(profile, r.sites);
    if (i < r.statistics.size() && !r.statistics[i].vs_baseline.empty())
      p["statistics"] = statistics_json(r.statistics[i]);
    if (profile.order != PruningOrder::Random) {
      profiles.push_back(std::move(p));
      continue;
    }
    p["seed"] = profile.seed;
    bool& seen = random_seen[profile.groups ? 1 : 0];
    (seen ? more_random : profiles).push_back(std::move(p));
    seen = true;
  }
  std::string item_metric;
  for (const auto& p : r.profiles)
    if (!p.steps.empty() && p.steps.front().items.width > 0)
      item_metric = metrics::metric_name(p.steps.front().items.metric);
  json ablation = to_json(r.ablation);
  // {score, low, high, verdict} of ablated − unpruned per [row][head]: the verdict is "ablated
  // beats unpruned", "unpruned beats ablated" or "level" (metrics::verdict).
  auto intervals = [](const std::vector<std::vector<metrics::PairedBootstrap>>& table) {
    json rows = json::array();
    for (const auto& row : table) {
      json cells = json::array();
      for (const auto& b : row)
        cells.push_back({{"difference", b.difference.score},
                         {"low", b.difference.interval.low},
                         {"high", b.difference.interval.high},
                         {"verdict", metrics::verdict(b, "ablated", "unpruned").text}});
      rows.push_back(std::move(cells));
    }
    return rows;
  };
  if (!r.single_vs_unpruned.empty()) {
    ablation["single_vs_unpruned"] = intervals(r.single_vs_unpruned);
    ablation["all_but_one_vs_unpruned"] = intervals(r.all_but_one_vs_unpruned);
  }
  json j = {{"model", r.model},
            {"metric", r.metric_name},
            {"importance_data", r.score_data.empty() ? json(nullptr) : json(r.score_data)},
            {"sites", to_json(r.sites)},
            {"importance", to_json(r.importance)},
            {"ablation", ablation},
            {"profiles", profiles}};
  json bands = json::array();
  for (const auto& band : r.random_bands) bands.push_back(band_json(band, item_metric));
  j["random_orders"] = {{"bootstrap_samples", r.statistics_options.samples},
                        {"bootstrap_seed", r.statistics_options.seed},
                        {"item_metric", item_metric.empty() ? json(nullptr) : json(item_metric)},
                        {"bands", bands},
                        {"profiles", more_random}};
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
