#pragma once
// Rank collapse of self-attention (Dong, Cordonnier, Loukas 2021, "Attention is not all you
// need: pure attention loses rank doubly exponentially with depth"), measured on any
// TransformerModel and any attention kind.
//
// Residual of a layer output X [n, d]: res(X) = X − 1·xᵀ with x the MEAN token. For the
// Frobenius norm the mean is the exact minimiser of ‖X − 1xᵀ‖; for the paper's composite norm
// ‖X‖_{1,∞} = sqrt(‖X‖₁·‖X‖_∞) (‖·‖₁ = largest column abs sum, ‖·‖_∞ = largest row abs sum) we
// also use the mean (not the exact minimiser, which has no closed form): the composite residual is
// therefore an upper bound of the paper's, and both are 0 exactly when X has rank ≤ 1 with equal
// rows. Every residual and norm is computed in float64, whatever the model's dtype.
//
// Everything here is a pure function over a model + token ids returning plain structs; the CLI
// (`attnkit analyze collapse`) writes them as collapse.json and SVG plots.
#include "attnkit/layers/transformer_block.h"
#include "attnkit/models/transformer_model.h"

#include <ATen/core/Tensor.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attnkit::analysis {

// ---- norms of one matrix X [n, d] (any floating dtype; computed in float64) -------------------
double norm_1(const at::Tensor& x);          // max over columns of Σ_i |x_ij|
double norm_inf(const at::Tensor& x);        // max over rows of Σ_j |x_ij|
double composite_norm(const at::Tensor& x);  // sqrt(norm_1 · norm_inf)
// X − 1·mean(X)ᵀ in float64; X [n, d] or batched [..., n, d] (the mean over n per matrix).
at::Tensor residual(const at::Tensor& x);

struct ResidualNorms {
  double composite = 0, frobenius = 0;           // ‖res(X)‖
  double norm_composite = 0, norm_frobenius = 0; // ‖X‖
  // ‖res(X)‖ / ‖X‖; undefined (NaN) when X vanished (‖X‖ = 0 in float64): a residual relative to
  // nothing says nothing about rank, and reading it as 0 would read as "collapsed to rank one".
  double relative_composite() const;
  double relative_frobenius() const;
  bool vanished() const { return !(norm_frobenius > 0); }
};
// Throws attnkit::Error unless x is a floating [n, d] tensor with n, d >= 1.
ResidualNorms residual_norms(const at::Tensor& x);

// ---- samples and their spread ------------------------------------------------------------------
struct Spread {
  int64_t count = 0;
  double mean = 0, min = 0, q25 = 0, median = 0, q75 = 0, max = 0;
  double log10_mean = 0;  // mean of log10(value) over positive values (geometric mean, in log10)
};
struct Samples {
  std::vector<double> values;
  void add(double v) { values.push_back(v); }
  void append(const Samples& other);
  Spread spread() const;  // quantiles by linear interpolation; all 0 when empty
};

// ---- architecture variants built from the same weights (the paper's Figure 2) --------------------
enum class Variant { PureAttention, AttentionSkip, AttentionMlp, AttentionLayerNorm, FullBlock };
struct VariantInfo {
  Variant variant;
  const char* name;  // "pure_attention", "attention_skip", "attention_mlp", ...
  const char* label; // for plots
  layers::BlockPaths paths;
};
const std::vector<VariantInfo>& variant_infos();
const VariantInfo& variant_info(Variant variant);
Variant parse_variant(const std::string& name);  // throws attnkit::Error listing the names

// The output of the embeddings and of every layer, [batch, n, hidden] each (layers + 1 tensors),
// with `paths[l]` applied to layer l (empty = the model's current paths everywhere; one entry =
// the same paths for every layer). Runs without grad, in eval mode, without GPT-2's final LN;
// restores the blocks' paths and the training flag afterwards. ALBERT's shared blocks work (the
// paths are set per layer right before the call).
std::vector<at::Tensor> layer_outputs(models::TransformerModel& model, const at::Tensor& input_ids,
                                      const std::vector<layers::BlockPaths>& paths = {});

// ---- the doubly exponential bound (softmax only) ---------------------------------------------
// β_l = max over heads h of ‖W_QK,h‖₁ · ‖W_V,h‖_{1,∞} with W_QK,h = W_Q,h W_K,hᵀ [d, d] and
// W_V,h = W_V,h W_O,h [d, d] (the head's value and output projections, biases ignored), in the
// paper's row convention (X W). Throws attnkit::Error for non-softmax kinds.
std::vector<double> attention_betas(models::TransformerModel& model);

struct LayerBound {
  Samples beta;                   // per model (seed)
  Samples log10_measured;         // log10 ‖res(X_l)‖_{1,∞} of pure attention, per input
  Samples log10_one_step;         // log10 of c_l·‖res(X_{l−1})‖³ (measured previous layer)
  Samples log10_cumulative;       // log10 of the bound from the input: b_l = c_l·b_{l−1}³, b_0 = r_0
  Samples log10_relative_bound;   // log10 of the cumulative bound / ‖X_l‖_{1,∞} (for the plot)
  // Inputs whose relative residual here and one layer before is above the round-off floor (a
  // residual at round-off says nothing about the bound), and how many of them are within it.
  int64_t compared = 0;
  int64_t one_step_holds = 0;     // measured ≤ one-step bound
  int64_t cumulative_holds = 0;   // measured ≤ cumulative bound
};
struct BoundComparison {
  bool available = false;
  std::string reason;  // why not, e.g. "linear attention: the bound is for softmax"
  double gamma = 1.0;  // c_l = 4·γ·β_l·H / sqrt(d_qk)
  double round_off_floor = 0;  // relative residuals at or below it are not compared
  std::vector<LayerBound> layers;  // layers + 1 entries; entry 0 has only log10_measured
};

// Least-squares fits of the pure-attention curve (geometric mean over inputs, per layer) above
// `floor` (round-off level): ln r_l = a + b·l (exponential decay, rate e^b per layer) and
// ln(−ln r_l) = a' + b'·l (doubly exponential: r_l ≈ r_0^{(e^{b'})^l}; e^{b'} = 3 is the paper's
// cubic regime). Needs 2 points; `points` says how many were used.
struct LineFit {
  double slope = 0, intercept = 0, r2 = 0;
  int64_t points = 0;
};
struct CollapseFit {
  LineFit log_residual;        // ln r vs l
  LineFit log_neg_log;         // ln(−ln r) vs l, points with r < 1 only
  double exponential_rate = 0; // e^slope of log_residual
  double double_exponential_base = 0;  // e^slope of log_neg_log
  int64_t layers_above_floor = 0;
};
CollapseFit fit_collapse(const std::vector<double>& relative_residual, double floor = 1e-13);
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

// ---- short paths ------------------------------------------------------------------------------
// The full block with self attention kept in only k of the L layers (the others pass their input
// through the skip connection): the network restricted to paths through at most those k layers'
// heads. For each k, every k-subset of layers when there are at most `subsets` of them, otherwise
// `subsets` random ones. Compared with the unrestricted output Y: ‖Y_k − Y‖_F / ‖Y‖_F, the mean
// cosine of corresponding tokens, the relative residual of Y_k, and (when the word embeddings
// have the hidden width) the share of positions whose nearest word embedding by dot product
// (the tied LM/MLM decoder, after GPT-2's final LN) agrees with Y's.
struct TruncationPoint {
  int64_t k = 0;
  int64_t subsets = 0;
  Samples relative_distance, cosine, relative_residual, prediction_agreement;
};

// ---- one analysis -----------------------------------------------------------------------------
struct LayerResidual {
  // composite, frobenius: one value per input; the relative ones only for inputs whose X here did
  // not vanish, and `vanished` counts the others.
  Samples relative_composite, relative_frobenius, composite, frobenius;
  int64_t vanished = 0;
};
// Geometric mean of a layer's relative composite residuals; NaN when X vanished for every input.
double geometric_mean_relative(const LayerResidual& layer);

struct VariantCurve {
  Variant variant = Variant::FullBlock;
  std::vector<LayerResidual> layers;  // layers + 1 entries (0 = embedding output)
  std::vector<at::Tensor> outputs;    // float64 layer outputs when keep_layer_outputs
  // The first layer at which X vanished for some input (-1: never), and for how many inputs.
  int64_t vanished_from_layer() const;
};

struct CollapseOptions {
  std::vector<Variant> variants = {Variant::PureAttention, Variant::AttentionSkip,
                                   Variant::AttentionMlp, Variant::AttentionLayerNorm,
                                   Variant::FullBlock};
  double gamma = 1.0;
  bool bound = true;         // only for softmax models; `reason` says why not otherwise
  bool short_paths = true;
  int64_t subsets = 8;       // per k in the short-path experiment
  uint64_t seed = 0;         // subset sampling
  // Relative residuals at or below this are round-off (not compared with the bound, not fitted);
  // 0 = by the model's dtype: 1e-13 for float64, 1e-5 for float32.
  double round_off_floor = 0;
  bool keep_layer_outputs = false;
  std::function<void()> on_forward;  // called after every forward pass (progress)
};

struct CollapseResult {
  std::string kind;  // stack_kind_label of the model, e.g. "softmax"
  int64_t layers = 0, heads = 0, hidden = 0, models = 0, inputs = 0, seq_len = 0;
  double round_off_floor = 0;  // the floor used (see CollapseOptions)
  std::vector<VariantCurve> curves;  // in options.variants order
  BoundComparison bound;
  std::vector<TruncationPoint> short_paths;  // k = 0..L
  // Appends another model's (seed's) samples: same kind, sizes and options.
  void merge(const CollapseResult& other);
};

// The attention of a stack as results name it: its spec ("softmax", "linear:hedgehog:64"), the one
// kind every layer has when a hybrid's per-layer overrides (a linearized model) cover every layer
// alike, else "hybrid: L0 KIND, L1 KIND, ...".
std::string stack_kind_label(const models::TransformerConfig& config);

// Forward passes analyze_collapse makes for a model of this config (for a progress bar).
int64_t forward_passes(const models::TransformerConfig& config, const CollapseOptions& options);

// The whole analysis for one model on input_ids [batch, n] (int64). Throws attnkit::Error for
// bad inputs (wrong shape, ids out of the vocabulary, n > max_positions, ...).
CollapseResult analyze_collapse(models::TransformerModel& model, const at::Tensor& input_ids,
                                const CollapseOptions& options = {});

// collapse.json content for one result (every number above, spreads instead of raw samples).
nlohmann::json to_json(const CollapseResult& result);
nlohmann::json to_json(const Spread& spread);

}  // namespace attnkit::analysis
