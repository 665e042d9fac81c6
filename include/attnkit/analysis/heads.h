#pragma once
// Head importance, ablations and the pruning profile (Michel, Levy, Neubig 2019, "Are sixteen
// heads really better than one?"). Every function works through the head gates ξ of a model's
// attention sites (models::AttentionSiteRef: encoder self, decoder self, cross attention; one
// gate set per depth, so ALBERT's shared blocks are scored per depth), whatever the attention
// kind and whatever heads were physically pruned before (layers may differ in head count).
// Head tables have one row per (site, layer): the first site's layers, then the next site's
// (head_rows); a model with one site has one row per layer. Per-layer normalisation is per row,
// i.e. per layer within each site; pruning ranks the heads of all sites together. A HeadTask says
// how to get the loss and the metric; classification_task builds one for a sequence classifier,
// language_model_task for a causal language model (GPT-2's LM head), translation_task for an
// encoder-decoder (its three sites).
//
//   importance  I_h = Σ_x Σ_t |Σ_d ctx_h[t, d] · ∂L(x)/∂ctx_h[t, d]| / tokens, as the authors'
//               code computes it (per token, then summed), optionally divided per layer by its L2
//               norm (default) and min-max scaled over all heads; beside it the gate gradient
//               E_x |∂L(x)/∂ξ_h| (per batch) that the paper's formula names.
//   ablation    the metric with each head alone masked (and its drop, the accuracy-difference
//               proxy); all-but-one: per layer, the metric with only head h kept in that layer.
//   profile     heads masked globally in steps, least important first (or random / most
//               important first as baselines), keeping at least N heads per layer, optionally
//               re-scoring after each step ("exact"); the metric after each step.
#include "attnkit/metrics/stats.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/model.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_model.h"

#include <ATen/core/Tensor.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnkit {
class ProgressReporter;
}

namespace attnkit::analysis {

// Per row (a layer of a site, head_rows), one value per head of that layer.
using HeadTable = std::vector<std::vector<double>>;

// Which site and layer each row of a head table is: the sites' layers in site order.
struct HeadRow {
  int64_t site = 0;   // index into the sites
  int64_t layer = 0;  // depth within the site's stack
};
std::vector<HeadRow> head_rows(const std::vector<models::AttentionSiteRef>& sites);
// A site's rows in the tables: rows first_row .. first_row + layers - 1.
struct SiteRows {
  std::string name;
  int64_t layers = 0, first_row = 0;
};
std::vector<SiteRows> site_rows(const std::vector<models::AttentionSiteRef>& sites);

struct HeadLoss {
  at::Tensor loss;                       // scalar, differentiable
  std::vector<at::Tensor> head_contexts; // per row [batch, heads, n, dv] (output_head_contexts)
  int64_t tokens = 0;                    // real tokens of the batch (the importance's divisor)
};

class PassStore;

struct HeadTask {
  std::vector<models::AttentionSiteRef> sites;  // whose gates are set (the rows of the tables)
  int64_t batches = 0;                          // batches of the scoring data
  // Forward of scoring batch `index` with head contexts asked for.
  std::function<HeadLoss(int64_t index)> loss;
  // The metric over the evaluation data under the current gates (higher is better).
  std::function<double()> metric;
  std::string metric_name = "accuracy";
  // Optional: the mean loss over the evaluation data under the current gates (the language-model
  // task's mean next-token cross entropy; its exp is the perplexity). Empty for classification.
  std::function<double()> evaluation_loss;
  // Optional: the mean loss of the data in the latest metric() call, from that same pass (the
  // language-model task's); the profiles record it at every step.
  std::function<double()> metric_loss;
  // Optional: per-item statistics of the latest metric() call, from that same pass (the items the
  // profiles' paired bootstrap resamples): the language-model task's per-window negative
  // log-likelihood and predicted tokens (perplexity), the classifier's per-example correct of 1
  // (accuracy), the translation task's per-pair teacher-forced correct tokens of its target tokens
  // (accuracy) or what its caller gives with its metric (the CLI: sacreBLEU's per-sentence BLEU
  // statistics of the decodes). Items without a counted position are left out (the same ones at
  // every pass). The profiles record them at every step.
  std::function<metrics::ItemStatistics()> metric_items;
  // Optional (attach_pass_store): every metric pass by its mask, kept in a file, so that an
  // interrupted analysis resumes without repeating the passes it had done.
  std::shared_ptr<PassStore> passes;
};

// One metric pass under a mask: the metric, and the task's loss and items of that pass.
struct MetricPass {
  double metric = 0;
  std::optional<double> loss;
  metrics::ItemStatistics items;
  double cpu_seconds = 0;  // the process's CPU time the pass took (the store's record of its cost)
};

// Metric passes by mask in a JSON-lines file: a first line {"settings": ...} naming what the
// passes were computed with, then one line per pass {"mask", "metric", "loss", "items"}, appended
// and flushed as each pass ends (a torn last line, from a killed process, is dropped on reading).
class PassStore {
 public:
  // Reads `path` when it exists. Throws attnkit::Error when its settings differ from `settings`
  // (other model, data or options: its passes are not these), or a line before the last is bad.
  PassStore(std::string path, std::string settings);
  const MetricPass* find(const std::string& key) const;
  void add(const std::string& key, const MetricPass& pass);  // appends and flushes a line
  const std::string& path() const { return path_; }
  int64_t loaded() const { return loaded_; }      // passes the file held when opened
  int64_t recalled() const { return recalled_; }  // passes found since opening
  int64_t stored() const { return int64_t(passes_.size()); }

  // The task's own metric, loss and items (attach_pass_store moves them here), and the latest
  // pass (computed or found), which the task's metric_loss / metric_items then give.
  std::function<double()> metric;
  std::function<double()> metric_loss;
  std::function<metrics::ItemStatistics()> metric_items;
  MetricPass latest;
  // The metric under the gates now set, whose mask is `key`: the stored pass, else computed and
  // stored.
  double evaluate(const std::string& key);

 private:
  std::string path_;
  std::map<std::string, MetricPass> passes_;
  int64_t loaded_ = 0, recalled_ = 0;
};

// Makes `task`'s metric passes go through a PassStore at `path` (see there); `settings` names
// everything the passes depend on besides the mask (model, data, decoding options).
void attach_pass_store(HeadTask& task, const std::string& path, const std::string& settings);

// A sequence classifier over fixed data: input_ids [N, n] (int64), attention_mask [N, n] (nonzero
// = real token; undefined = all real), labels [N]. Loss: cross entropy; metric: accuracy. The
// scoring data is the first `score_examples` examples (0 = all), in batches of batch_size.
// `task_model` must have sequence_labels > 0 (checked: attnkit::Error). Runs in eval mode.
HeadTask classification_task(models::TaskModel task_model,
                             const at::Tensor& input_ids, const at::Tensor& attention_mask,
                             const at::Tensor& labels, int64_t batch_size = 32,
                             int64_t score_examples = 0);

// A causal language model (a TaskModel with causal_lm, e.g. GPT-2) over fixed windows: input_ids
// [N, n] (int64, n >= 2), attention_mask [N, n] (nonzero = real token; undefined = all real).
// Predictions count at positions t where tokens t and t + 1 are both real (next_token_targets,
// and padding at t masked too). Loss: mean next-token cross entropy over them (per batch); the
// importance's divisor is the batch's real tokens, as for classification; metric
// "next_token_accuracy": the argmax equals the next token, over all counted positions of the
// data; evaluation_loss: the mean cross entropy over them; metric_items: per window, its summed
// cross entropy and counted positions (metrics::perplexity_item_statistics). Scoring data: the first
// `score_examples` windows (0 = all), in batches of batch_size. Throws attnkit::Error when the
// model has no causal LM head or the data has no position to predict. Runs in eval mode.
HeadTask language_model_task(models::TaskModel task_model, const at::Tensor& input_ids,
                             const at::Tensor& attention_mask, int64_t batch_size = 32,
                             int64_t score_examples = 0);

// Teacher-forced pairs of an encoder-decoder: source_ids / source_mask [N, S], decoder_input_ids /
// decoder_mask [N, L] (the decoder's start token + target), labels [N, L] (what each decoder
// position predicts: target + end token, models::kIgnoreLabel elsewhere). Masks: nonzero = real.
struct TranslationData {
  at::Tensor source_ids, source_mask, decoder_input_ids, decoder_mask, labels;
};

// An encoder-decoder over fixed pairs (Michel et al.'s translation experiment): rows of the
// tables are the sites encoder.self, decoder.self, decoder.cross (attention_sites()). Loss: mean
// target cross entropy under teacher forcing (per batch); the importance's divisor is the batch's
// target tokens (labels not ignored); evaluation_loss: the mean target cross entropy over all
// pairs. Metric: `metric` under the current gates when given (the CLI's corpus BLEU of decodes,
// named metric_name, with per-item statistics `metric_items` when given), else "token_accuracy"
// (teacher-forced argmax = label; per pair its correct of its target tokens). Scoring data: the
// first `score_examples` pairs (0 = all), batch_size at a time. Throws attnkit::Error for
// tensors of mismatched shapes or no label to predict. Runs in eval mode.
HeadTask translation_task(models::EncoderDecoderModel model, const TranslationData& data,
                          std::function<double()> metric = nullptr,
                          const std::string& metric_name = "bleu", int64_t batch_size = 32,
                          int64_t score_examples = 0,
                          std::function<metrics::ItemStatistics()> metric_items = nullptr);

// Gates ξ: 1 = kept, 0 = masked; per row, one per head of that layer now.
using HeadMask = std::vector<std::vector<double>>;
HeadMask full_mask(const std::vector<models::AttentionSiteRef>& sites);
// One stack's self attention (a model with one site).
HeadMask full_mask(const models::TransformerModelImpl& model);
int64_t count_heads(const HeadMask& mask, double value = 1.0);
// Sets every site's gates from `mask` (rows as head_rows); an empty mask removes them.
void set_head_gates(const std::vector<models::AttentionSiteRef>& sites, const HeadMask& mask);

struct ImportanceOptions {
  bool normalize_layers = true;  // divide each layer by its L2 norm
  bool min_max = false;          // then scale all heads to [0, 1]
  int64_t max_batches = 0;       // 0 = every scoring batch
};

struct HeadImportance {
  HeadTable importance;     // as options ask (normalised / scaled)
  HeadTable raw;            // Σ |Σ_d ctx·∂L/∂ctx| / tokens, before any normalisation
  HeadTable gate_gradient;  // Σ_batches |∂L/∂ξ_h| / batches
  int64_t batches = 0, tokens = 0;
  // Grouped-query attention (filled when some layer has key/value groups; empty otherwise): per
  // row, one value per key/value group (head_groups), the same quantity with the group's heads
  // summed inside the absolute value, Σ_x Σ_t |Σ_{h∈g} Σ_d ctx_h·∂L/∂ctx_h| / tokens (the
  // importance of a gate on the whole group), raw and normalised as `importance` is.
  HeadTable group_importance, group_raw;
};

// Per row (head_rows), the key/value group of each of its query heads now: 0, 0, 0, 1, 1, 1, ...
// for grouped layers (MultiHeadAttentionImpl::kv_of_head), 0, 1, 2, ... (one group per head)
// otherwise.
std::vector<std::vector<int64_t>> head_groups(const std::vector<models::AttentionSiteRef>& sites);

// Under `mask` (masked heads get importance 0). Leaves the model's gates removed.
HeadImportance head_importance(HeadTask& task, const HeadMask& mask,
                               const ImportanceOptions& options = {},
                               ProgressReporter* progress = nullptr);

struct HeadAblation {
  double baseline = 0;
  HeadTable single;       // metric with head h of layer l alone masked
  HeadTable drop;         // baseline - single (the accuracy-difference proxy)
  HeadTable all_but_one;  // metric with only head h kept in layer l (others of l masked)
  // With the task's metric_items: the items of every pass, in order: the unpruned model, then per
  // row and head, that head masked and that head kept alone (empty without metric_items).
  std::vector<metrics::ItemStatistics> items;
};

// Metric passes: 1 + 2 · heads. Leaves the gates removed.
HeadAblation head_ablation(HeadTask& task, ProgressReporter* progress = nullptr);

enum class PruningOrder { Importance, Random, Reverse };
const char* to_string(PruningOrder order);

struct PruningOptions {
  // Fractions of all heads to have masked after each step, increasing, in (0, 1]; empty:
  // 0.1, 0.2, ..., 1.0. A step that the per-layer minimum stops short prunes what it may.
  std::vector<double> fractions;
  bool exact = false;           // re-score after each step (Importance and Reverse orders)
  int64_t min_heads_per_layer = 1;
  PruningOrder order = PruningOrder::Importance;
  uint64_t seed = 0;            // Random order
  ImportanceOptions importance;
  // Optional: the importance of the unpruned model under these importance options, already
  // computed (the Importance and Reverse orders then start from it instead of scoring again).
  const HeadImportance* initial_importance = nullptr;
  // Prune whole key/value groups (every query head of a group at once), ranked by their group
  // importance; fractions and min_heads_per_layer then count groups.
  bool groups = false;
};

struct PruningStep {
  double fraction = 0;     // heads masked / all heads
  int64_t pruned = 0;      // heads masked
  double metric = 0;
  std::vector<int64_t> pruned_by_site;  // heads masked at each site (Michel et al.'s Figure 6)
  std::optional<double> loss;           // the task's metric_loss at this step, when it has one
  metrics::ItemStatistics items;        // the task's metric_items at this step (width 0: none)
};

struct PruningProfile {
  PruningOrder order = PruningOrder::Importance;
  uint64_t seed = 0;  // the Random order's (PruningOptions::seed)
  bool exact = false;
  bool groups = false;  // steps count key/value groups (PruningOptions::groups)
  std::vector<PruningStep> steps;  // the first is the unpruned model (fraction 0)
  std::vector<HeadMask> masks;     // the mask after each step (same length as steps)
};

// The unpruned model's step (fraction 0) of a profile: one metric pass under gates of 1, with the
// task's loss and items. Leaves the gates removed.
PruningStep unpruned_step(HeadTask& task);

// Leaves the gates removed. Throws attnkit::Error for fractions outside (0, 1] or not increasing.
// `baseline`, when given, is the unpruned model's step (fraction 0) from an earlier pass of the
// same task, taken as the first step instead of evaluating again.
PruningProfile pruning_profile(HeadTask& task, const PruningOptions& options = {},
                               ProgressReporter* progress = nullptr,
                               const PruningStep* baseline = nullptr);

// The least important heads to prune so that about `fraction` of all heads of all sites go
// (ranked together; keeping min_heads_per_layer per layer), per site as {layer: [heads]} in the
// model's current numbering of each layer. Shared blocks (ALBERT): a head is pruned only where it
// is chosen at every depth the block serves, and the key is the block.
std::vector<models::HeadIndices> heads_to_prune(const std::vector<models::AttentionSiteRef>& sites,
                                                const HeadTable& importance, double fraction,
                                                int64_t min_heads_per_layer = 1);
// The same for one stack's self attention.
models::HeadIndices heads_to_prune(const models::TransformerModelImpl& model,
                                   const HeadTable& importance, double fraction,
                                   int64_t min_heads_per_layer = 1);
// In the unpruned numbering (what Model::prune_heads takes) from the current one.
models::HeadIndices to_original_numbering(const models::AttentionSiteRef& site,
                                          const models::HeadIndices& current);
models::HeadIndices to_original_numbering(const models::TransformerModelImpl& model,
                                          const models::HeadIndices& current);

// Pearson and Spearman correlation of two importance tables of the same shape (cross-data).
struct Correlation {
  double pearson = 0, spearman = 0;
};
Correlation importance_correlation(const HeadTable& a, const HeadTable& b);

nlohmann::json to_json(const HeadImportance& importance);
nlohmann::json to_json(const HeadAblation& ablation);
// Steps carry "pruned_by_site" keyed by the site names when `sites` are given.
nlohmann::json to_json(const PruningProfile& profile, const std::vector<SiteRows>& sites = {});
// [{"name", "layers", "first_row"}] (heads.json's "sites").
nlohmann::json to_json(const std::vector<SiteRows>& sites);

}  // namespace attnkit::analysis
