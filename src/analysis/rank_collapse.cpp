#include "attnkit/analysis/rank_collapse.h"

#include "attnkit/analysis/path_counts.h"
#include "attnkit/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <random>

namespace attnkit::analysis {
namespace {

using layers::AttentionKind;
using layers::BlockPaths;

void check_matrix(const at::Tensor& x, const char* what) {
  if (!x.defined() || x.dim() != 2 || x.size(0) < 1 || x.size(1) < 1 ||
      !at::isFloatingType(x.scalar_type()))
    throw Error(fmt::format("{}: expected a floating [n, d] matrix with n, d >= 1, got {}", what,
                            x.defined() ? fmt::format("[{}] {}", fmt::join(x.sizes(), ", "),
                                                      c10::toString(x.scalar_type()))
                                        : std::string("an undefined tensor")));
}

double ratio(double numerator, double denominator) {
  return denominator > 0 ? numerator / denominator : 0.0;
}

// log10 that stays finite for 0 (clamped at the smallest normal double).
double safe_log10(double v) { return std::log10(std::max(v, DBL_MIN)); }

}  // namespace

// ---- norms ----------------------------------------------------------------------------------

double norm_1(const at::Tensor& x) {
  check_matrix(x, "norm_1");
  return x.to(at::kDouble).abs().sum(0).max().item<double>();
}

double norm_inf(const at::Tensor& x) {
  check_matrix(x, "norm_inf");
  return x.to(at::kDouble).abs().sum(1).max().item<double>();
}

double composite_norm(const at::Tensor& x) { return std::sqrt(norm_1(x) * norm_inf(x)); }

at::Tensor residual(const at::Tensor& x) {
  if (!x.defined() || x.dim() < 2 || !at::isFloatingType(x.scalar_type()))
    throw Error("residual: expected a floating [..., n, d] tensor");
  const at::Tensor d = x.to(at::kDouble);
  return d - d.mean(-2, /*keepdim=*/true);
}

double ResidualNorms::relative_composite() const { return vanished() ? NAN : composite / norm_composite; }
double ResidualNorms::relative_frobenius() const { return vanished() ? NAN : frobenius / norm_frobenius; }

ResidualNorms residual_norms(const at::Tensor& x) {
  check_matrix(x, "residual_norms");
  const at::Tensor d = x.to(at::kDouble);
  const at::Tensor r = residual(d);
  ResidualNorms n;
  n.composite = composite_norm(r);
  n.frobenius = r.norm().item<double>();
  n.norm_composite = composite_norm(d);
  n.norm_frobenius = d.norm().item<double>();
  return n;
}

// ---- samples ----------------------------------------------------------------------------------

void Samples::append(const Samples& other) {
  values.insert(values.end(), other.values.begin(), other.values.end());
}

Spread Samples::spread() const {
  Spread s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  auto quantile = [&](double q) {
    const double pos = q * double(sorted.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
  };
  s.min = sorted.front();
  s.max = sorted.back();
  s.q25 = quantile(0.25);
  s.median = quantile(0.5);
  s.q75 = quantile(0.75);
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / double(sorted.size());
  double log_sum = 0;
  int64_t positive = 0;
  for (double v : sorted)
    if (v > 0) {
      log_sum += std::log10(v);
      ++positive;
    }
  s.log10_mean = positive > 0 ? log_sum / double(positive) : -INFINITY;
  return s;
}

double geometric_mean_relative(const LayerResidual& layer) {
  const Spread rel = layer.relative_composite.spread();
  return rel.count == 0 ? NAN : std::pow(10.0, rel.log10_mean);
}

int64_t VariantCurve::vanished_from_layer() const {
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].vanished > 0) return static_cast<int64_t>(l);
  return -1;
}

// ---- variants ---------------------------------------------------------------------------------

const std::vector<VariantInfo>& variant_infos() {
  // BlockPaths{skip, mlp, layer_norm, attention}
  static const std::vector<VariantInfo> infos = {
      {Variant::PureAttention, "pure_attention", "pure attention", BlockPaths{false, false, false, true}},
      {Variant::AttentionSkip, "attention_skip", "attention + skip", BlockPaths{true, false, false, true}},
      {Variant::AttentionMlp, "attention_mlp", "attention + MLP", BlockPaths{false, true, false, true}},
      {Variant::AttentionLayerNorm, "attention_layer_norm", "attention + LN",
       BlockPaths{false, false, true, true}},
      {Variant::FullBlock, "full_block", "full block (skip + MLP + LN)", BlockPaths{true, true, true, true}},
  };
  return infos;
}

const VariantInfo& variant_info(Variant variant) {
  for (const auto& info : variant_infos())
    if (info.variant == variant) return info;
  throw Error("unknown rank-collapse variant");
}

Variant parse_variant(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& info : variant_infos()) {
    if (name == info.name) return info.variant;
    names.push_back(info.name);
  }
  throw Error(fmt::format("unknown variant '{}' (known: {})", name, fmt::join(names, ", ")));
}

// ---- forward with per-layer paths ---------------------------------------------------------------

std::vector<at::Tensor> layer_outputs(models::TransformerModel& model, const at::Tensor& input_ids,
                                      const std::vector<BlockPaths>& paths) {
  const int64_t L = model->config().layers;
  if (!input_ids.defined() || input_ids.dim() != 2 || input_ids.scalar_type() != at::kLong ||
      input_ids.size(1) < 1)
    throw Error("rank collapse: input_ids must be a non-empty [batch, n] int64 tensor");
  if (paths.size() > 1 && static_cast<int64_t>(paths.size()) != L)
    throw Error(fmt::format("rank collapse: {} paths given for {} layers (give 0, 1 or {})",
                            paths.size(), L, L));
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  std::vector<BlockPaths> saved;
  for (int64_t i = 0; i < model->block_count(); ++i)
    saved.push_back(std::dynamic_pointer_cast<layers::TransformerBlockImpl>(model->blocks->ptr(i))
                        ->paths());
  auto restore = [&] {
    for (int64_t i = 0; i < model->block_count(); ++i)
      std::dynamic_pointer_cast<layers::TransformerBlockImpl>(model->blocks->ptr(i))
          ->set_paths(saved[static_cast<size_t>(i)]);
    model->train(was_training);
  };
  model->eval();
  std::vector<at::Tensor> out;
  try {
    at::Tensor h = model->embeddings->forward(input_ids);
    out.push_back(h);
    for (int64_t l = 0; l < L; ++l) {
      auto block = model->block(l);
      if (!paths.empty()) block->set_paths(paths.size() == 1 ? paths[0] : paths[size_t(l)]);
      h = block->forward(h).hidden;
      out.push_back(h);
    }
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return out;
}

// ---- bound --------------------------------------------------------------------------------------

namespace {

// The attention of every layer: the stack's, or a hybrid's per-layer overrides (a linearized model).
std::vector<layers::AttentionSpec> layer_specs(const models::TransformerConfig& config) {
  std::vector<layers::AttentionSpec> specs;
  for (int64_t layer = 0; layer < config.layers; ++layer) specs.push_back(config.layer_attention(layer));
  return specs;
}

std::string bound_unavailable_reason(const models::TransformerConfig& config) {
  // Every layer's kind (a hybrid's overrides included; the stack's own where none).
  for (const auto& layer : layer_specs(config))
    if (layer.kind != AttentionKind::Softmax)
      return fmt::format("'{}' attention: the bound of Dong et al. is for softmax attention", layer.to_string());
  const auto& spec = config.attention;
  if (spec.causal) return "causal softmax: the bound of Dong et al. is for unmasked attention";
  if (spec.talking_heads) return "talking-heads softmax: the bound assumes independent heads";
  return "";
}

}  // namespace

std::string stack_kind_label(const models::TransformerConfig& config) {
  const auto specs = layer_specs(config);
  std::vector<std::string> names;
  for (const auto& spec : specs) names.push_back(spec.to_string());
  if (names.empty() || std::all_of(names.begin(), names.end(), [&](const std::string& n) { return n == names[0]; }))
    return names.empty() ? config.attention.to_string() : names[0];
  std::string label = "hybrid";
  for (size_t layer = 0; layer < names.size(); ++layer) label += fmt::format("{}L{} {}", layer ? ", " : ": ", layer, names[layer]);
  return label;
}

namespace {

std::vector<int64_t> layer_range(int64_t count) {
  std::vector<int64_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// All k-subsets of {0..L-1} when there are at most `limit`, else `limit` random ones.
std::vector<std::vector<int64_t>> layer_subsets(int64_t L, int64_t k, int64_t limit,
                                                std::mt19937_64& rng) {
  std::vector<std::vector<int64_t>> subsets;
  if (binomial(L, k).to_double() <= double(limit)) {
    std::vector<bool> chosen(static_cast<size_t>(L), false);
    std::fill(chosen.begin(), chosen.begin() + k, true);
    do {
      std::vector<int64_t> s;
      for (int64_t i = 0; i < L; ++i)
        if (chosen[size_t(i)]) s.push_back(i);
      subsets.push_back(std::move(s));
    } while (std::prev_permutation(chosen.begin(), chosen.end()));
    return subsets;
  }
  std::vector<int64_t> order = layer_range(L);
  for (int64_t i = 0; i < limit; ++i) {
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> s(order.begin(), order.begin() + k);
    std::sort(s.begin(), s.end());
    subsets.push_back(std::move(s));
  }
  return subsets;
}

int64_t subset_count(int64_t L, int64_t k, int64_t limit) {
  return binomial(L, k).to_double() <= double(limit) ? static_cast<int64_t>(binomial(L, k).to_double())
                                                     : limit;
}

bool has_variant(const CollapseOptions& options, Variant v) {
  return std::find(options.variants.begin(), options.variants.end(), v) != options.variants.end();
}

bool bound_needs_extra_pass(const models::TransformerConfig& config, const CollapseOptions& options) {
  return options.bound && bound_unavailable_reason(config).empty() &&
         !has_variant(options, Variant::PureAttention);
}

// Token predictions through the tied word embeddings (after the final LN when the model has one).
at::Tensor nearest_tokens(models::TransformerModel& model, const at::Tensor& last) {
  at::Tensor h = last;
  if (model->final_norm) h = model->final_norm->forward(h);
  return at::matmul(h, model->word_embeddings().to(h.dtype()).t()).argmax(-1);
}

void notify(const CollapseOptions& options) {
  if (options.on_forward) options.on_forward();
}

}  // namespace

std::vector<double> attention_betas(models::TransformerModel& model) {
  const auto& config = model->config();
  const std::string reason = bound_unavailable_reason(config);
  if (!reason.empty()) throw Error("attention_betas: " + reason);
  torch::NoGradGuard no_grad;
  std::vector<double> betas;
  for (int64_t l = 0; l < config.layers; ++l) {
    auto& mha = model->block(l)->attention;
    const int64_t H = mha->heads(), dk = mha->key_size(), dv = mha->value_size();
    const at::Tensor wq = mha->q->weight.to(at::kDouble), wk = mha->k->weight.to(at::kDouble);
    const at::Tensor wv = mha->v->weight.to(at::kDouble), wo = mha->o->weight.to(at::kDouble);
    double beta = 0;
    for (int64_t h = 0; h < H; ++h) {
      // torch Linear: y = x Wᵀ, W [out, in]; the paper's W_Q,h = Wq[h]ᵀ [d, dk].
      const at::Tensor q_h = wq.narrow(0, h * dk, dk), k_h = wk.narrow(0, h * dk, dk);
      const at::Tensor v_h = wv.narrow(0, h * dv, dv), o_h = wo.narrow(1, h * dv, dv);
      const at::Tensor w_qk = at::matmul(q_h.t(), k_h);          // [d, d]
      const at::Tensor w_vo = at::matmul(v_h.t(), o_h.t());      // [d, d]
      beta = std::max(beta, norm_1(w_qk) * composite_norm(w_vo));
    }
    betas.push_back(beta);
  }
  return betas;
}

// ---- fits -------------------------------------------------------------------------------------

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  LineFit f;
  f.points = static_cast<int64_t>(std::min(x.size(), y.size()));
  if (f.points < 2) return f;
  const double n = double(f.points);
  double mx = 0, my = 0;
  for (int64_t i = 0; i < f.points; ++i) mx += x[size_t(i)], my += y[size_t(i)];
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0, syy = 0;
  for (int64_t i = 0; i < f.points; ++i) {
    const double dx = x[size_t(i)] - mx, dy = y[size_t(i)] - my;
    sxx += dx * dx, sxy += dx * dy, syy += dy * dy;
  }
  if (sxx == 0) return f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  f.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  return f;
}

CollapseFit fit_collapse(const std::vector<double>& relative_residual, double floor) {
  CollapseFit fit;
  std::vector<double> l1, y1, l2, y2;
  for (size_t l = 0; l < relative_residual.size(); ++l) {
    const double r = relative_residual[l];
    if (!(r > floor) || !std::isfinite(r)) continue;
    l1.push_back(double(l));
    y1.push_back(std::log(r));
    if (r < 1) {
      l2.push_back(double(l));
      y2.push_back(std::log(-std::log(r)));
    }
  }
  fit.layers_above_floor = static_cast<int64_t>(l1.size());
  fit.log_residual = fit_line(l1, y1);
  fit.log_neg_log = fit_line(l2, y2);
  if (fit.log_residual.points >= 2) fit.exponential_rate = std::exp(fit.log_residual.slope);
  if (fit.log_neg_log.points >= 2) fit.double_exponential_base = std::exp(fit.log_neg_log.slope);
  return fit;
}

// ---- the analysis -----------------------------------------------------------------------------

int64_t forward_passes(const models::TransformerConfig& config, const CollapseOptions& options) {
  int64_t passes = static_cast<int64_t>(options.variants.size());
  if (bound_needs_extra_pass(config, options)) ++passes;
  if (options.short_paths) {
    ++passes;  // the unrestricted output
    for (int64_t k = 0; k <= config.layers; ++k) passes += subset_count(config.layers, k, options.subsets);
  }
  return passes;
}

namespace {

LayerResidual measure_layer(const at::Tensor& hidden) {
  LayerResidual r;
  for (int64_t b = 0; b < hidden.size(0); ++b) {
    const ResidualNorms n = residual_norms(hidden[b]);
    if (n.vanished()) {
      ++r.vanished;
    } else {
      r.relative_composite.add(n.relative_composite());
      r.relative_frobenius.add(n.relative_frobenius());
    }
    r.composite.add(n.composite);
    r.frobenius.add(n.frobenius);
  }
  return r;
}

BoundComparison compare_with_bound(models::TransformerModel& model,
                                   const std::vector<at::Tensor>& pure, double gamma, double floor) {
  BoundComparison bound;
  bound.available = true;
  bound.gamma = gamma;
  bound.round_off_floor = floor;
  const auto betas = attention_betas(model);
  const auto& mha = model->block(0)->attention;
  const double H = double(mha->heads()), dk = double(mha->key_size());
  const int64_t L = static_cast<int64_t>(betas.size()), batch = pure[0].size(0);
  bound.layers.resize(static_cast<size_t>(L + 1));
  for (int64_t b = 0; b < batch; ++b) {
    ResidualNorms previous = residual_norms(pure[0][b]);
    double cumulative = safe_log10(previous.composite);
    bound.layers[0].log10_measured.add(cumulative);
    for (int64_t l = 1; l <= L; ++l) {
      const double log_c = safe_log10(4.0 * gamma * betas[size_t(l - 1)] * H / std::sqrt(dk));
      const ResidualNorms n = residual_norms(pure[size_t(l)][b]);
      const double measured = safe_log10(n.composite);
      const double one_step = log_c + 3.0 * safe_log10(previous.composite);
      cumulative = log_c + 3.0 * cumulative;
      auto& layer = bound.layers[size_t(l)];
      layer.log10_measured.add(measured);
      layer.log10_one_step.add(one_step);
      layer.log10_cumulative.add(cumulative);
      layer.log10_relative_bound.add(cumulative - safe_log10(n.norm_composite));
      if (n.relative_composite() > floor && previous.relative_composite() > floor) {
        ++layer.compared;
        // A tiny tolerance: both sides are logs of float64 values.
        layer.one_step_holds += measured <= one_step + 1e-9 ? 1 : 0;
        layer.cumulative_holds += measured <= cumulative + 1e-9 ? 1 : 0;
      }
      previous = n;
    }
  }
  for (int64_t l = 1; l <= L; ++l) bound.layers[size_t(l)].beta.add(betas[size_t(l - 1)]);
  return bound;
}

std::vector<TruncationPoint> short_path_experiment(models::TransformerModel& model,
                                                   const at::Tensor& input_ids,
                                                   const CollapseOptions& options) {
  const int64_t L = model->config().layers;
  const BlockPaths full{true, true, true, true};
  const at::Tensor y = layer_outputs(model, input_ids, {full}).back().to(at::kDouble);
  notify(options);
  const bool tied = model->config().effective_embedding_size() == model->config().hidden;
  torch::NoGradGuard no_grad;
  at::Tensor predicted;
  if (tied) predicted = nearest_tokens(model, y);
  std::mt19937_64 rng(options.seed);
  std::vector<TruncationPoint> points;
  for (int64_t k = 0; k <= L; ++k) {
    TruncationPoint point;
    point.k = k;
    for (const auto& subset : layer_subsets(L, k, options.subsets, rng)) {
      std::vector<BlockPaths> paths(static_cast<size_t>(L), full);
      for (auto& p : paths) p.attention = false;
      for (int64_t layer : subset) paths[size_t(layer)].attention = true;
      const at::Tensor yk = layer_outputs(model, input_ids, paths).back().to(at::kDouble);
      notify(options);
      ++point.subsets;
      at::Tensor agree;
      if (tied) agree = nearest_tokens(model, yk).eq(predicted).to(at::kDouble).mean(-1);
      for (int64_t b = 0; b < y.size(0); ++b) {
        point.relative_distance.add(ratio((yk[b] - y[b]).norm().item<double>(), y[b].norm().item<double>()));
        point.cosine.add(at::cosine_similarity(yk[b], y[b], -1).mean().item<double>());
        const ResidualNorms n = residual_norms(yk[b]);
        if (!n.vanished()) point.relative_residual.add(n.relative_frobenius());
        if (tied) point.prediction_agreement.add(agree[b].item<double>());
      }
    }
    points.push_back(std::move(point));
  }
  return points;
}

void append_layers(std::vector<LayerResidual>& into, const std::vector<LayerResidual>& from) {
  if (into.size() != from.size()) throw Error("rank collapse: cannot merge results of different depths");
  for (size_t l = 0; l < into.size(); ++l) {
    into[l].relative_composite.append(from[l].relative_composite);
    into[l].relative_frobenius.append(from[l].relative_frobenius);
    into[l].composite.append(from[l].composite);
    into[l].frobenius.append(from[l].frobenius);
    into[l].vanished += from[l].vanished;
  }
}

}  // namespace

CollapseResult analyze_collapse(models::TransformerModel& model, const at::Tensor& input_ids,
                                const CollapseOptions& options) {
  const auto& config = model->config();
  if (!input_ids.defined() || input_ids.dim() != 2 || input_ids.size(0) < 1 || input_ids.size(1) < 2)
    throw Error("rank collapse: input_ids must be [batch, n] with batch >= 1 and n >= 2 tokens");
  if (options.subsets < 1)
    throw Error(fmt::format("rank collapse: subsets must be >= 1 (got {})", options.subsets));
  if (!(options.gamma > 0)) throw Error(fmt::format("rank collapse: gamma must be > 0 (got {})", options.gamma));
  CollapseResult result;
  result.kind = stack_kind_label(config);
  result.layers = config.layers;
  result.heads = config.heads;
  result.hidden = config.hidden;
  result.models = 1;
  result.inputs = input_ids.size(0);
  result.seq_len = input_ids.size(1);
  result.round_off_floor = options.round_off_floor > 0 ? options.round_off_floor
                           : model->word_embeddings().scalar_type() == at::kDouble ? 1e-13
                                                                                   : 1e-5;
  std::vector<at::Tensor> pure;
  for (Variant v : options.variants) {
    const auto outputs = layer_outputs(model, input_ids, {variant_info(v).paths});
    notify(options);
    VariantCurve curve;
    curve.variant = v;
    for (const auto& h : outputs) curve.layers.push_back(measure_layer(h));
    if (options.keep_layer_outputs)
      for (const auto& h : outputs) curve.outputs.push_back(h.to(at::kDouble));
    if (v == Variant::PureAttention) pure = outputs;
    result.curves.push_back(std::move(curve));
  }
  if (options.bound) {
    result.bound.reason = bound_unavailable_reason(config);
    result.bound.gamma = options.gamma;
    if (result.bound.reason.empty()) {
      if (pure.empty()) {
        pure = layer_outputs(model, input_ids, {variant_info(Variant::PureAttention).paths});
        notify(options);
      }
      result.bound = compare_with_bound(model, pure, options.gamma, result.round_off_floor);
    }
  } else {
    result.bound.reason = "not computed (disabled)";
  }
  if (options.short_paths) result.short_paths = short_path_experiment(model, input_ids, options);
  return result;
}

void CollapseResult::merge(const CollapseResult& other) {
  if (other.kind != kind || other.layers != layers || other.curves.size() != curves.size() ||
      other.short_paths.size() != short_paths.size() || other.seq_len != seq_len)
    throw Error("rank collapse: cannot merge results of different kinds, sizes or options");
  models += other.models;
  inputs += other.inputs;
  for (size_t i = 0; i < curves.size(); ++i) append_layers(curves[i].layers, other.curves[i].layers);
  if (bound.available && other.bound.available) {
    for (size_t l = 0; l < bound.layers.size(); ++l) {
      auto& a = bound.layers[l];
      const auto& b = other.bound.layers[l];
      a.beta.append(b.beta);
      a.log10_measured.append(b.log10_measured);
      a.log10_one_step.append(b.log10_one_step);
      a.log10_cumulative.append(b.log10_cumulative);
      a.log10_relative_bound.append(b.log10_relative_bound);
      a.compared += b.compared;
      a.one_step_holds += b.one_step_holds;
      a.cumulative_holds += b.cumulative_holds;
    }
  }
  for (size_t k = 0; k < short_paths.size(); ++k) {
    auto& a = short_paths[k];
    const auto& b = other.short_paths[k];
    a.subsets += b.subsets;
    a.relative_distance.append(b.relative_distance);
    a.cosine.append(b.cosine);
    a.relative_residual.append(b.relative_residual);
    a.prediction_agreement.append(b.prediction_agreement);
  }
}

// ---- JSON ---------------------------------------------------------------------------------------

nlohmann::json to_json(const Spread& s) {
  return {{"count", s.count}, {"mean", s.mean},     {"min", s.min},   {"q25", s.q25},
          {"median", s.median}, {"q75", s.q75},     {"max", s.max},   {"log10_mean", s.log10_mean}};
}

namespace {

nlohmann::json fit_json(const LineFit& f) {
  return {{"slope", f.slope}, {"intercept", f.intercept}, {"r2", f.r2}, {"points", f.points}};
}

}  // namespace

nlohmann::json to_json(const CollapseResult& r) {
  nlohmann::json j;
  j["kind"] = r.kind;
  j["layers"] = r.layers;
  j["heads"] = r.heads;
  j["hidden"] = r.hidden;
  j["models"] = r.models;
  j["inputs"] = r.inputs;
  j["seq_len"] = r.seq_len;
  j["round_off_floor"] = r.round_off_floor;
  j["variants"] = nlohmann::json::array();
  for (const auto& curve : r.curves) {
    const auto& info = variant_info(curve.variant);
    nlohmann::json v{{"name", info.name},
                     {"label", info.label},
                     {"paths",
                      {{"skip", info.paths.skip},
                       {"mlp", info.paths.mlp},
                       {"layer_norm", info.paths.layer_norm}}}};
    std::vector<double> geometric;
    for (size_t l = 0; l < curve.layers.size(); ++l) {
      const auto& layer = curve.layers[l];
      const Spread rel = layer.relative_composite.spread();
      geometric.push_back(geometric_mean_relative(layer));
      v["layers"].push_back({{"layer", l},
                             {"vanished", layer.vanished},
                             {"relative_composite", to_json(rel)},
                             {"relative_frobenius", to_json(layer.relative_frobenius.spread())},
                             {"composite", to_json(layer.composite.spread())},
                             {"frobenius", to_json(layer.frobenius.spread())}});
    }
    const int64_t vanished_from = curve.vanished_from_layer();
    if (vanished_from >= 0)
      v["vanished"] = {{"from_layer", vanished_from},
                       {"inputs", curve.layers[size_t(vanished_from)].vanished},
                       {"meaning", "X = 0 in float64 from this layer on for these inputs: their relative residual is "
                                   "undefined and left out of the spreads and the fit"}};
    const CollapseFit fit = fit_collapse(geometric, r.round_off_floor);
    v["fit"] = {{"on", "geometric mean of the relative composite residual, layers above round_off_floor"},
                {"log_residual", fit_json(fit.log_residual)},
                {"log_neg_log_residual", fit_json(fit.log_neg_log)},
                {"exponential_rate_per_layer", fit.exponential_rate},
                {"double_exponential_base", fit.double_exponential_base},
                {"layers_above_floor", fit.layers_above_floor}};
    j["variants"].push_back(std::move(v));
  }
  nlohmann::json b{{"available", r.bound.available},
                   {"gamma", r.bound.gamma},
                   {"round_off_floor", r.round_off_floor}};
  if (!r.bound.available) b["reason"] = r.bound.reason;
  b["formula"] =
      "||res(X_l)||_{1,inf} <= c_l ||res(X_{l-1})||_{1,inf}^3, c_l = 4 gamma beta_l H / sqrt(d_qk), "
      "beta_l = max_h ||W_QK,h||_1 ||W_VO,h||_{1,inf}; cumulative: b_l = c_l b_{l-1}^3, b_0 = "
      "measured input residual (all as log10)";
  b["layers"] = nlohmann::json::array();
  for (size_t l = 0; l < r.bound.layers.size(); ++l) {
    const auto& layer = r.bound.layers[l];
    nlohmann::json e{{"layer", l}, {"log10_measured", to_json(layer.log10_measured.spread())}};
    if (l > 0) {
      e["beta"] = to_json(layer.beta.spread());
      e["log10_one_step_bound"] = to_json(layer.log10_one_step.spread());
      e["log10_cumulative_bound"] = to_json(layer.log10_cumulative.spread());
      e["log10_relative_cumulative_bound"] = to_json(layer.log10_relative_bound.spread());
      e["compared"] = layer.compared;
      e["one_step_holds"] = layer.one_step_holds;
      e["cumulative_holds"] = layer.cumulative_holds;
    }
    b["layers"].push_back(std::move(e));
  }
  j["bound"] = std::move(b);
  j["short_paths"] = nlohmann::json::array();
  for (const auto& p : r.short_paths) {
    nlohmann::json e{{"k", p.k},
                     {"subsets", p.subsets},
                     {"relative_distance", to_json(p.relative_distance.spread())},
                     {"cosine", to_json(p.cosine.spread())},
                     {"relative_residual_frobenius", to_json(p.relative_residual.spread())}};
    if (!p.prediction_agreement.values.empty())
      e["prediction_agreement"] = to_json(p.prediction_agreement.spread());
    j["short_paths"].push_back(std::move(e));
  }
  return j;
}

}  // namespace attnkit::analysis
