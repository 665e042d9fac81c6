#include "attnkit/analysis/collapse_experiment.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/layers/attention_spec.h"
#include "attnkit/progress.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/utils.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

namespace attnkit::analysis {
namespace {

using models::TransformerConfig;

// `kind` for every layer (a hybrid's per-layer overrides give way to it).
TransformerConfig with_kind(TransformerConfig config, const std::string& kind) {
  const auto spec = layers::AttentionSpec::parse(kind);
  config.layer_attention_specs.clear();
  config.attention.kind = spec.kind;
  config.attention.feature_map = spec.feature_map;
  config.attention.mixture = spec.mixture;
  config.attention.talking_heads = spec.talking_heads;
  config.validate();
  return config;
}

TransformerConfig config_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(fmt::format("{}: neither a preset ({}) nor a readable config JSON file", path,
                            fmt::join(models::preset_names(), ", ")));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path, "config"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
  TransformerConfig config;
  try {
    models::from_json(j, config);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
  return config;
}

}  // namespace

const std::vector<std::string>& all_attention_kinds() {
  static const std::vector<std::string> kinds = {
      "softmax",           "linear:elu",         "linear:relu",
      "linear:favor",      "cosformer",          "synthesizer-dense",
      "synthesizer-random", "synthesizer-factorized-dense", "synthesizer-factorized-random"};
  return kinds;
}

TransformerConfig random_stack_config(const std::string& preset_or_file, const StackSizes& sizes,
                                      int64_t seq_len) {
  if (!models::is_preset(preset_or_file)) return random_stack_config(config_file(preset_or_file), sizes, seq_len);
  const models::ModelFamily family = models::parse_model_family(preset_or_file);
  models::PresetSizes preset;
  if (sizes.hidden > 0) preset.hidden = sizes.hidden;
  if (sizes.layers > 0) preset.layers = sizes.layers;
  if (sizes.heads > 0) preset.heads = sizes.heads;
  if (sizes.vocab_size > 0) preset.vocab_size = sizes.vocab_size;
  preset.intermediate = sizes.intermediate;
  // A factorised embedding, as ALBERT's own configs have (E < H).
  if (family == models::ModelFamily::Albert) preset.embedding_size = std::max<int64_t>(preset.hidden / 2, 8);
  // The preset has the sizes already; the overload adds no dropout and the lengths.
  return random_stack_config(models::preset(family, preset), {}, seq_len);
}

TransformerConfig random_stack_config(TransformerConfig config, const StackSizes& sizes, int64_t seq_len) {
  if (sizes.layers > 0) config.layers = sizes.layers;
  if (sizes.heads > 0) config.heads = sizes.heads;
  if (sizes.hidden > 0) config.hidden = sizes.hidden;
  if (sizes.intermediate > 0) config.intermediate = sizes.intermediate;
  if (sizes.vocab_size > 0) config.vocab_size = sizes.vocab_size;
  config.dropout = 0.0;
  config.max_positions = std::max(config.max_positions, seq_len);
  config.attention.max_length = std::max(config.attention.max_length, seq_len);
  config.validate();
  return config;
}

std::string file_name_part(const std::string& kind) {
  std::string s = kind;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
  return s;
}

std::vector<double> geometric_means(const VariantCurve& curve) {
  std::vector<double> y;
  for (const auto& layer : curve.layers) y.push_back(geometric_mean_relative(layer));
  return y;
}

CollapseExperiment run_collapse_experiment(const CollapseExperimentOptions& o, ProgressReporter* progress) {
  const bool loaded = static_cast<bool>(o.model);
  const TransformerConfig base = loaded ? o.model->config() : o.config;
  std::vector<TransformerConfig> configs;
  if (loaded || o.kinds.empty()) configs.push_back(base);  // its own attention, a hybrid's layers included
  else
    for (const auto& kind : o.kinds) configs.push_back(with_kind(base, kind));
  const int64_t model_count = loaded ? 1 : o.seeds;

  CollapseOptions options = o.analysis;
  options.seed = o.seed;
  if (progress != nullptr) {
    int64_t total = 0;
    for (const auto& config : configs) total += model_count * forward_passes(config, options);
    progress->set_total(total);
    options.on_forward = [progress, next = options.on_forward] {
      progress->tick();
      if (next) next();
    };
  }

  CollapseExperiment e;
  e.model_source = loaded ? o.source
                          : fmt::format("random {} stack, init std {:g}, {} seeds from {}", o.source,
                                        o.init_std, o.seeds, o.seed);
  e.family = base.family;
  e.dtype = o.dtype == at::kDouble ? "float64" : "float32";
  e.input_source = o.input_source;
  e.samples = o.samples;
  e.seq_len = o.seq_len;
  e.subsets = options.subsets;
  e.variants = options.variants;
  for (const auto& config : configs) {
    CollapseResult merged;
    for (int64_t s = 0; s < model_count; ++s) {
      models::TransformerModel model = o.model;
      if (!model) {
        torch::manual_seed(o.seed + uint64_t(s));
        model = models::TransformerModel(config);
        model->reset_parameters(o.init_std);
      }
      model->to(o.dtype);
      at::Tensor ids = o.input_ids;
      if (!ids.defined()) {
        const uint64_t input_seed = o.seed + 1000 + uint64_t(s);
        e.input_source = fmt::format("random token ids in [0, {}), seed {}", config.vocab_size, input_seed);
        auto generator = at::detail::createCPUGenerator(input_seed);
        ids = at::randint(0, config.vocab_size, {o.samples, o.seq_len}, generator, at::kLong);
      }
      CollapseResult r = analyze_collapse(model, ids, options);
      if (s == 0 && options.keep_layer_outputs) {
        const std::string kind = file_name_part(r.kind);
        e.layer_outputs.emplace_back(kind + "/input_ids", ids);
        for (const auto& curve : r.curves)
          for (size_t l = 0; l < curve.outputs.size(); ++l)
            e.layer_outputs.emplace_back(fmt::format("{}/{}/layer_{}", kind, variant_info(curve.variant).name, l),
                                         curve.outputs[l]);
      }
      if (s == 0) merged = std::move(r);
      else merged.merge(r);
    }
    e.results.push_back(std::move(merged));
  }
  e.paths = path_length_distribution(base.layers, base.heads);
  return e;
}

nlohmann::json to_json(const PathDistribution& d) {
  nlohmann::json j{{"layers", d.layers},
                   {"heads", d.heads},
                   {"total", d.total.to_string()},
                   {"mean_length", d.mean_length},
                   {"lengths", nlohmann::json::array()}};
  for (const auto& p : d.lengths)
    j["lengths"].push_back({{"k", p.length}, {"count", p.count.to_string()}, {"fraction", p.fraction}});
  return j;
}

nlohmann::json to_json(const CollapseExperiment& e) {
  nlohmann::json j;
  j["analysis"] = "rank collapse (Dong, Cordonnier, Loukas 2021)";
  j["model"] = {{"source", e.model_source}, {"family", models::model_family_name(e.family)}, {"dtype", e.dtype}};
  j["inputs"] = {{"source", e.input_source}, {"samples", e.samples}, {"seq_len", e.seq_len}};
  j["residual"] = "res(X) = X - 1 x^T with x the mean token (exact minimiser for Frobenius, an "
                  "upper bound of the minimum for the composite norm sqrt(||.||_1 ||.||_inf))";
  j["short_paths_subsets"] = e.subsets;
  j["paths"] = to_json(e.paths);
  j["results"] = nlohmann::json::array();
  for (const auto& r : e.results) j["results"].push_back(to_json(r));
  return j;
}

void write_collapse_json(const CollapseExperiment& experiment, const std::string& path) {
  io::write_file_atomically(path, to_json(experiment).dump(2) + "\n");
}

}  // namespace attnkit::analysis
