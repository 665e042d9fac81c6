#pragma once
// The head experiments behind `attnkit analyze heads` and `attnkit prune` (analysis/heads.h):
//   run_heads_experiment  importance, ablations (optional) and the pruning profiles (importance,
//                         random orders, reverse; with the statistics of add_profile_statistics) of a
//                         model directory on a data file (a sequence classifier on labelled
//                         examples, or a causal language model on windows of text); with a second
//                         data file the correlation of the two importance maps; or, for a run
//                         directory, every checkpoint's importance and profile (no ablations).
//   prune_model           physical head pruning of a model directory (given heads, or a fraction
//                         of the least important ones) written in either layout.
// How a data file becomes tensors is the caller's (HeadsDataReader: the CLI tokenises with
// train::classification_tensors for a classifier and data::read_language_model_data for a
// language model, layers this one does not use). to_json gives heads.json and
// heads_over_training.json; the figures are report/head_plots.h's write_heads_outputs.
#include "attnkit/analysis/heads.h"
#include "attnkit/io/model_directory.h"

#include <ATen/core/Tensor.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnkit {
class ProgressReporter;
}

namespace attnkit::analysis {

// What analyze heads scores a model on: an encoder-decoder on translation pairs, else its sequence
// classifier when it has one, else its causal language-model head.
enum class HeadsTaskKind { Classification, LanguageModel, Translation };
const char* to_string(HeadsTaskKind kind);  // "classification" | "language model" | "translation"
// Throws attnkit::Error "MODEL_DIR: analyze heads needs ..." when the model has none of them.
HeadsTaskKind heads_task_kind(const std::string& model_dir, const io::LoadedModel& model);

// A data file as the model's task takes it: input_ids and attention_mask [N, n] (int64; an
// undefined mask = all real); for a classifier labels [N] and label_count distinct labels in the
// file; a language model's data has no labels (windows of text). An encoder-decoder's data is
// `translation` (teacher-forced pairs) and its metric under the current gates (e.g. corpus BLEU of
// decodes, which needs layers this one may not use; empty: teacher-forced token accuracy).
struct HeadsInputs {
  at::Tensor input_ids, attention_mask, labels;
  int64_t label_count = 0;
  TranslationData translation;
  std::function<double()> metric;
  std::string metric_name;
  // Optional, with `metric`: the per-item statistics of its latest call (HeadTask::metric_items).
  std::function<metrics::ItemStatistics()> metric_items;
};
// Reads `data_path` for the model loaded from `model_dir` (for the task heads_task_kind picks).
using HeadsDataReader = std::function<HeadsInputs(
    const std::string& data_path, const std::string& model_dir, const io::LoadedModel& model)>;
// A progress reporter for one phase ("importance batches", ...), or null for none; the
// experiment sets its total and ticks it.
using HeadsProgress = std::function<std::unique_ptr<ProgressReporter>(const std::string& unit)>;

// The task of `model` (heads_task_kind: classification_task or language_model_task) on
// `data_path` (read by `read`). Throws attnkit::Error when the model has neither a classifier nor
// a causal LM head, the file has no examples, or more labels than the classifier.
HeadTask load_heads_task(const std::string& model_dir, const io::LoadedModel& model,
                         const std::string& data_path, const HeadsDataReader& read,
                         int64_t batch_size, int64_t score_examples);

struct HeadsExperimentOptions {
  std::string model;  // a model directory with a sequence classifier or a causal LM head ...
  std::string run;    // ... or a run directory (exactly one)
  std::string data;   // required
  std::string data2;  // optional second data file (with `model`): importance correlation
  // Optional: the importance (and the profiles' orders) from this file, the metrics (baseline,
  // ablations, profiles) on `data`: heads chosen on one text, judged on another.
  std::string score_data;
  HeadsDataReader read_data;
  int64_t batch_size = 32;
  int64_t score_examples = 0;         // 0 = all
  std::vector<double> fractions;      // PruningOptions::fractions (empty: 10%, ..., 100%)
  bool exact = false;
  int64_t min_heads = 1;
  bool ablation = true;               // with `model` only
  uint64_t seed = 0;                  // the first random order's
  // Random pruning orders (seeds seed, seed + 1, ...) of heads, and of key/value groups where the
  // model has them; >= 1 (checked before any work). 1 = one random order per unit.
  int64_t random_orders = 1;
  // Optional (with `model`): a PassStore file (analysis/heads.h) that keeps every metric pass, so
  // that an interrupted analysis resumes; pass_settings names what the passes depend on besides
  // the mask (a store written with other settings is an error).
  std::string pass_store, pass_settings;
};

// The statistics of the profiles (docs/analysis.md): paired bootstrap over the evaluation items
// (metrics::paired_bootstrap's resamples), a t interval over the random orders.
struct ProfileStatisticsOptions {
  size_t samples = 1000;
  uint64_t seed = 12345;
  double budget = 0.05;  // the perplexity increase of PerplexityBudget
};

// A profile step against the unpruned model on the same items (paired).
struct StepVsBaseline {
  size_t step = 0;                       // index into the profile's steps (>= 1)
  metrics::PairedBootstrap bootstrap;    // A = the step, B = the unpruned model
  metrics::BootstrapEstimate relative;   // score_A / score_B - 1, resample by resample
};

// The importance order against the random orders at one step index (the same asked fraction):
// importance - the random orders' mean, its interval from a two-stage bootstrap (per resample the
// items as paired_bootstrap draws them and, from a second PCG64 stream seeded seed + 1, as many
// random orders drawn with replacement as there are).
struct ImportanceVsRandom {
  size_t step = 0;
  double fraction = 0;  // the importance order's
  size_t orders = 0;
  metrics::BootstrapEstimate difference;
  metrics::VerdictText verdict;  // "importance beats random", "random beats importance" or "level"
};

// The random orders of one unit at one step index: mean and t interval over the orders.
struct RandomBandStep {
  double fraction = 0;  // the orders' mean
  int64_t pruned_min = 0, pruned_max = 0;
  metrics::SeedSummary metric;
  std::optional<metrics::SeedSummary> perplexity;  // a language model's
};

struct RandomBand {
  bool groups = false;                  // key/value groups (else heads)
  std::vector<uint64_t> seeds;
  std::vector<RandomBandStep> steps;    // every step index; empty with fewer than 2 orders
  std::vector<ImportanceVsRandom> importance_vs_random;  // steps >= 1, where items exist
};

// A language model's profile: the largest pruned count whose perplexity increase over the unpruned
// model (point estimate) stays within the budget, at every step up to it; and where the bootstrap
// interval's upper end stays within it too.
struct PerplexityBudget {
  double budget = 0.05;
  size_t step = 0;  // the last step within (0: not even the first pruning step)
  int64_t pruned = 0;
  double fraction = 0;
  double increase = 0;           // perplexity / unpruned perplexity - 1 at `step`
  metrics::Interval interval;    // its bootstrap interval
  bool upper_within = false;     // interval.high <= budget
  size_t step_upper = 0;         // the same walk on the interval's upper end
  int64_t pruned_upper = 0;
  std::vector<int64_t> kept_per_layer;  // heads kept per row (head_rows) at `step`
};

struct ProfileStatistics {
  std::vector<StepVsBaseline> vs_baseline;  // steps 1, 2, ...; empty when the task has no items
  std::optional<PerplexityBudget> budget;   // items of perplexity only
};

// One model's analysis (report/head_plots.h's HeadsReport is this).
struct HeadsAnalysis {
  std::string model;  // what was analysed (directory)
  std::string metric_name;
  std::string score_data;                 // where the importance came from ("" = the data)
  std::vector<SiteRows> sites;            // the tables' rows per attention site
  std::optional<double> baseline_loss;    // the task's evaluation_loss, when it has one (LM)
  HeadImportance importance;
  HeadAblation ablation;                  // only the baseline without ablations
  // With a pass store: the metric passes it held when opened (done by an earlier, interrupted
  // process) and all it holds at the end.
  int64_t passes_loaded = 0, passes_stored = 0;
  // Each ablation against the unpruned model, [row][head] as ablation.single / all_but_one: the
  // paired bootstrap (statistics_options' samples and seed) of the ablated model's items against
  // the unpruned one's; difference = ablated − unpruned. Empty without ablations or items.
  std::vector<std::vector<metrics::PairedBootstrap>> single_vs_unpruned, all_but_one_vs_unpruned;
  // importance, random (seed), reverse, random (seed + 1, ..., seed + random_orders - 1); then, for
  // a model with key/value groups, whole groups by importance and at random (seed, seed + 1, ...)
  // (PruningProfile::groups)
  std::vector<PruningProfile> profiles;
  ProfileStatisticsOptions statistics_options;
  std::vector<ProfileStatistics> statistics;  // one per profile
  std::vector<RandomBand> random_bands;       // heads; then groups where the model has them
};

// The statistics of analysis.profiles from their steps' items (analysis.statistics and
// random_bands, replaced).
void add_profile_statistics(HeadsAnalysis& analysis, const ProfileStatisticsOptions& options = {});

struct CrossDataImportance {
  std::string data;
  HeadImportance importance;
  Correlation correlation;  // of analysis.importance.importance and importance.importance
};

struct CheckpointHeads {
  int64_t step = 0;
  std::string directory;
  HeadsAnalysis analysis;
};

struct HeadsExperiment {
  // With a model: its analysis, and the cross-data importance when data2 was given.
  HeadsAnalysis analysis;
  std::optional<CrossDataImportance> cross_data;
  // With a run: the run directory and every checkpoint by step.
  std::string run;
  std::vector<CheckpointHeads> checkpoints;
};

// Throws attnkit::Error (one line) for options that are not exactly one of model and run, no
// data, no read_data, random_orders < 1, or what the analysis finds wrong.
HeadsExperiment run_heads_experiment(const HeadsExperimentOptions& options,
                                     const HeadsProgress& progress = nullptr);

// Checkpoints of a run directory: RUN/checkpoints/*N (else RUN/*N) folders with a
// model.safetensors, by step N. Throws attnkit::Error when there are none.
std::vector<std::pair<int64_t, std::string>> run_checkpoints(const std::string& run);

nlohmann::json to_json(const HeadsAnalysis& analysis);
// With a model: heads.json ({model, metric[, baseline_loss, baseline_perplexity], importance,
// ablation, profiles, random_orders[, cross_data]}; "profiles" holds importance, the first random
// order, reverse (and the groups' importance and first random order), each with its "statistics"
// where the task has items; "random_orders" the bootstrap settings, the bands (RandomBand) and the
// other random orders' "profiles"); with a run: heads_over_training.json ({run, checkpoints:
// [{step, checkpoint, analysis}]}).
nlohmann::json to_json(const HeadsExperiment& experiment);
// The importance table of a heads.json. Throws attnkit::Error "WHAT PATH: not a heads.json of
// attnkit analyze heads (...)" for a file without one.
HeadTable read_heads_importance(const std::string& path, const std::string& what);

struct PruneOptions {
  std::string model, out;
  std::string format;  // "attnkit" | "huggingface"; empty: the input's
  // Exactly one of: the heads to remove (unpruned numbering): `heads` for a model with one
  // attention site, or `heads_by_site` for any model (models::SiteHeads; "" = the only site) ...
  std::optional<models::HeadIndices> heads;
  std::optional<models::SiteHeads> heads_by_site;
  // ... or a fraction of all heads, least important first, by the importance of a heads.json
  // (importance_file) or else scored on `data` (read by read_data); exactly one of the two.
  double fraction = -1;
  int64_t min_heads = 1;
  std::string importance_file;
  std::string data;
  HeadsDataReader read_data;
  int64_t batch_size = 32, score_examples = 0;
};

struct PruneResult {
  int64_t heads_before = 0, heads_after = 0;
  int64_t parameters_before = 0, parameters_after = 0;
  models::HeadIndices pruned_heads;  // the model's config now (unpruned numbering), first site
  std::map<std::string, models::HeadIndices> pruned_by_site;  // every site's
  std::string format;                // the layout written
};

// Loads, prunes and writes options.out (tokenizer files copied along, as convert does).
PruneResult prune_model(const PruneOptions& options, const HeadsProgress& progress = nullptr);

}  // namespace attnkit::analysis
