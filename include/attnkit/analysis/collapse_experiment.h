#pragma once
// The rank-collapse experiment behind `attnkit analyze collapse`: random stacks of each attention
// kind asked for, several seeds each (or one loaded model), every model analysed on its inputs
// (analyze_collapse) and the seeds merged per kind, plus the path counts of the architecture.
// to_json / write_collapse_json give collapse.json, the experiment's file format.
#include "attnkit/analysis/path_counts.h"
#include "attnkit/analysis/rank_collapse.h"
#include "attnkit/models/transformer_config.h"
#include "attnkit/models/transformer_model.h"

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnkit {
class ProgressReporter;
}

namespace attnkit::analysis {

// The attention kinds `--kind all` compares.
const std::vector<std::string>& all_attention_kinds();

// Sizes of a random stack; 0 = not given.
struct StackSizes {
  int64_t layers = 0, heads = 0, hidden = 0, intermediate = 0, vocab_size = 0;
};

// The config of a random stack: a preset (models::preset_names(); sizes not given take the preset
// defaults, ALBERT's embedding size is hidden / 2 but at least 8) or a TransformerConfig JSON file
// whose sizes the given ones override. No dropout; positions (and Synthesizer lengths) for at
// least seq_len tokens. Throws attnkit::Error "NAME: ..." (neither a preset nor a readable file,
// invalid JSON, an invalid config).
models::TransformerConfig random_stack_config(const std::string& preset_or_file, const StackSizes& sizes,
                                              int64_t seq_len);
// The same from a config in hand (e.g. a loaded model's stack: random weights of its shape).
models::TransformerConfig random_stack_config(models::TransformerConfig config, const StackSizes& sizes,
                                              int64_t seq_len);

struct CollapseExperimentOptions {
  // Either a loaded model, analysed once as it is ...
  models::TransformerModel model{nullptr};
  // ... or random stacks of `config` with each attention kind of `kinds` (empty: the config's),
  // `seeds` models per kind built after torch::manual_seed(seed + s), weights normal(0, init_std).
  models::TransformerConfig config;
  std::vector<std::string> kinds;
  int64_t seeds = 3;
  double init_std = 0.02;
  std::string source;  // the loaded model's directory, or the stacks' preset or config file
  uint64_t seed = 0;   // also the seed of the analysis (short-path subsets)
  at::ScalarType dtype = at::kDouble;  // the models run in kDouble or kFloat
  // Inputs: `input_ids` [windows, seq_len] (int64) for every model, described by `input_source`;
  // when undefined, `samples` random sequences of `seq_len` ids per model (seed + 1000 + s).
  at::Tensor input_ids;
  std::string input_source;
  int64_t samples = 8;
  int64_t seq_len = 32;
  CollapseOptions analysis;  // variants, gamma, subsets, short paths, keep_layer_outputs
};

struct CollapseExperiment {
  std::string model_source;  // what was analysed, e.g. "random bert stack, init std 0.02, 3 seeds from 0"
  models::ModelFamily family = models::ModelFamily::Custom;
  std::string dtype;         // "float64" | "float32"
  std::string input_source;  // e.g. "random token ids in [0, 1000), seed 1002" (the last model's)
  int64_t samples = 0, seq_len = 0, subsets = 0;
  std::vector<Variant> variants;
  std::vector<CollapseResult> results;  // one per kind, in order, seeds merged
  PathDistribution paths;               // of the architecture's layers and heads
  // With analysis.keep_layer_outputs, per kind, from its first model: "KIND/input_ids" and
  // "KIND/VARIANT/layer_L" (KIND through file_name_part).
  std::vector<std::pair<std::string, at::Tensor>> layer_outputs;
};

// Runs every model; `progress` (may be null) gets its total set and one tick per forward pass.
// Throws attnkit::Error for an invalid kind or inputs the models cannot take.
CollapseExperiment run_collapse_experiment(const CollapseExperimentOptions& options,
                                           ProgressReporter* progress = nullptr);

// "linear:elu" -> "linear_elu": a kind as part of a file or tensor name.
std::string file_name_part(const std::string& kind);
// Per layer, the geometric mean over inputs of the relative composite residual (NaN where X vanished
// for every input: see VariantCurve::vanished_from_layer).
std::vector<double> geometric_means(const VariantCurve& curve);

nlohmann::json to_json(const PathDistribution& paths);
// collapse.json's content: model, inputs, path counts and every result (see docs/analysis.md).
nlohmann::json to_json(const CollapseExperiment& experiment);
// to_json(experiment) indented by 2 with a final newline, written atomically to `path`.
void write_collapse_json(const CollapseExperiment& experiment, const std::string& path);

}  // namespace attnkit::analysis
