// `attnkit analyze collapse`: rank collapse of self-attention (Dong et al. 2021) for a random
// stack or a trained model, any attention kind (analysis/collapse_experiment.h). Writes
// collapse.json and SVG plots (report/collapse_plots.h); see docs/analysis.md.
#include "attnkit/analysis/collapse_experiment.h"
#include "attnkit/error.h"
#include "attnkit/io/gguf_model.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/layers/attention_spec.h"
#include "attnkit/progress.h"
#include "attnkit/report/collapse_plots.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/token_windows.h"
#include "command.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

#include <filesystem>
#include <memory>
#include <sstream>

namespace attnkit::cli {
namespace {

namespace fs = std::filesystem;
using analysis::CollapseResult;

struct CollapseCommand {
  std::string model_dir;
  std::string random;  // preset name or config JSON file
  int64_t layers = 0, heads = 0, hidden = 0, intermediate = 0, vocab = 0;
  std::string kinds;
  int64_t seeds = 3;
  double init_std = 0.02;
  int64_t samples = 8;
  int64_t seq_len = 32;
  std::string data;
  std::string tokenizer;
  double gamma = 1.0;
  int64_t subsets = 8;
  bool no_short_paths = false;
  std::string dtype = "float64";
  std::string variants;
  std::string save_layer_outputs;
  std::string out;
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// --random names a model directory (Hugging Face or attnkit, a run or checkpoint) or a .gguf file
// rather than a preset or a config JSON file.
bool random_names_a_model(const CollapseCommand& c) {
  return !c.random.empty() && !models::is_preset(c.random) &&
         (fs::is_directory(c.random) || io::is_gguf_file(c.random));
}

// --data: the file's lines tokenised and cut into at most --samples windows of --seq-len tokens.
void read_data_windows(const CollapseCommand& c, analysis::CollapseExperimentOptions& options) {
  const std::string tokenizer_path =
      !c.tokenizer.empty() ? c.tokenizer
      : !c.model_dir.empty() ? io::resolve_model_path(c.model_dir)
      : random_names_a_model(c) ? io::resolve_model_path(c.random)
                                : std::string();
  if (tokenizer_path.empty())
    throw Error("--data needs a tokenizer: give --model DIR (its tokenizer), --random MODEL or --tokenizer PATH");
  const text::Tokenizer tokenizer = io::load_tokenizer(tokenizer_path);
  text::TokenWindows windows;
  try {
    windows = text::read_token_windows(c.data, tokenizer, c.seq_len, c.samples);
  } catch (const Error& e) {
    throw Error(fmt::format("--data {}", e.what()));
  }
  options.input_ids = at::tensor(windows.ids, at::kLong).view({windows.count, c.seq_len});
  options.input_source = fmt::format("{}: {} windows of {} tokens (tokenizer {})", c.data, windows.count,
                                     c.seq_len, tokenizer_path);
}

void print_summary(const CollapseResult& r) {
  fmt::print("{} ({} layers, {} heads, {} models, {} inputs of {} tokens)\n", r.kind, r.layers,
             r.heads, r.models, r.inputs, r.seq_len);
  for (const auto& curve : r.curves) {
    const auto y = analysis::geometric_means(curve);
    const auto fit = analysis::fit_collapse(y, r.round_off_floor);
    auto value = [](double v) { return std::isnan(v) ? std::string("undefined") : fmt::format("{:.3e}", v); };
    fmt::print("  {:<30} relative residual: layer 1 {}, layer {} {}; fit rate {:.3g}/layer, "
               "double-exponential base {:.3g}\n",
               analysis::variant_info(curve.variant).label, value(y.size() > 1 ? y[1] : NAN), y.size() - 1,
               value(y.back()), fit.exponential_rate, fit.double_exponential_base);
    if (const int64_t from = curve.vanished_from_layer(); from >= 0)
      fmt::print("  {:<30} X vanished (= 0 in float64) from layer {} for {} of {} inputs: their relative residual "
                 "is undefined, not collapse\n",
                 "", from, curve.layers[size_t(from)].vanished, r.inputs);
  }
  if (r.bound.available) {
    int64_t compared = 0, one_step = 0, cumulative = 0;
    for (const auto& layer : r.bound.layers) {
      compared += layer.compared;
      one_step += layer.one_step_holds;
      cumulative += layer.cumulative_holds;
    }
    fmt::print("  bound (gamma={:g}), over layers x inputs above round-off: one-step holds {}/{}, "
               "cumulative holds {}/{}; log10 cumulative bound at layer {}: {:.3g}\n",
               r.bound.gamma, one_step, compared, cumulative, compared, r.layers,
               r.bound.layers.back().log10_cumulative.spread().mean);
  } else {
    fmt::print("  bound: n/a ({})\n", r.bound.reason);
  }
}

int run_collapse(const CollapseCommand& c, const GlobalOptions& global) {
  if (c.model_dir.empty() == c.random.empty())
    throw Error("analyze collapse: give exactly one of --model DIR and --random CONFIG");
  if (!c.model_dir.empty() && (!c.kinds.empty() || c.layers || c.heads || c.hidden))
    throw Error("analyze collapse: --kind, --layers, --heads and --hidden apply to --random "
                "stacks; a loaded model has its own");
  if (c.dtype != "float64" && c.dtype != "float32")
    throw Error(fmt::format("--dtype must be float64 or float32 (got {})", c.dtype));

  analysis::CollapseExperimentOptions options;
  options.dtype = c.dtype == "float64" ? at::kDouble : at::kFloat;
  options.seed = global.seed;
  options.seeds = c.seeds;
  options.init_std = c.init_std;
  options.samples = c.samples;
  options.seq_len = c.seq_len;
  if (!c.variants.empty()) {
    options.analysis.variants.clear();
    for (const auto& name : split(c.variants, ',')) options.analysis.variants.push_back(analysis::parse_variant(name));
  }
  options.analysis.gamma = c.gamma;
  options.analysis.subsets = c.subsets;
  options.analysis.short_paths = !c.no_short_paths;
  options.analysis.keep_layer_outputs = !c.save_layer_outputs.empty();
  if (!c.random.empty()) {
    const analysis::StackSizes sizes{c.layers, c.heads, c.hidden, c.intermediate, c.vocab};
    try {
      if (random_names_a_model(c)) {
        // Random weights of a model's shape: its (first) stack's config, its weights left alone.
        const auto loaded = io::load_model(c.random);
        options.config = analysis::random_stack_config(loaded.model->attention_sites().front().stack->config(),
                                                       sizes, c.seq_len);
      } else {
        options.config = analysis::random_stack_config(c.random, sizes, c.seq_len);
      }
    } catch (const Error& e) {
      throw Error(fmt::format("--random {}", e.what()));
    }
    options.kinds = c.kinds == "all" ? analysis::all_attention_kinds() : split(c.kinds, ',');
    for (const auto& kind : options.kinds) layers::AttentionSpec::parse(kind);  // before --out exists
    options.source = c.random;
  } else {
    // The model's first layer stack: a task model's, or an encoder-decoder's encoder (the
    // decoder's blocks need the encoder's memory, which the collapse experiment does not feed).
    const auto loaded = io::load_model(c.model_dir);
    options.model = loaded.model->attention_sites().front().stack;
    options.source = loaded.model->shape() == models::ModelShape::EncoderDecoder
                         ? c.model_dir + " (encoder)"
                         : c.model_dir;
  }
  if (!c.data.empty()) read_data_windows(c, options);

  ProgressOptions progress_options;
  progress_options.unit = "forward passes";
  progress_options.log_every = 0;  // redraw at most ~10 times a second
  // A bar on a terminal; in a log a line a minute (a trained model's analysis takes many minutes).
  progress_options.log_seconds = 60;
  progress_options.quiet = global.quiet;
  ProgressReporter progress(progress_options);
  fs::create_directories(c.out);
  const auto experiment = analysis::run_collapse_experiment(options, &progress);
  progress.finish();

  analysis::write_collapse_json(experiment, (fs::path(c.out) / "collapse.json").string());
  std::vector<std::string> written = {"collapse.json"};
  for (const auto& [name, plot] : report::collapse_plots(experiment)) {
    report::write_svg(plot, (fs::path(c.out) / name).string());
    written.push_back(name);
  }
  if (!c.save_layer_outputs.empty()) {
    io::save_safetensors(c.save_layer_outputs, experiment.layer_outputs);
    written.push_back(c.save_layer_outputs);
  }
  if (!global.quiet) {
    for (const auto& r : experiment.results) print_summary(r);
    fmt::print("wrote {} in {}\n", fmt::join(written, ", "), c.out);
  }
  return 0;
}

}  // namespace

void register_analyze_command(CLI::App& app, GlobalOptions& global) {
  auto* analyze = app.add_subcommand("analyze", "dissect a model: rank collapse, ...");
  analyze->require_subcommand(1);
  auto c = std::make_shared<CollapseCommand>();
  auto* cmd = analyze->add_subcommand(
      "collapse",
      "rank collapse of self-attention (Dong et al. 2021): per-layer relative residual of pure "
      "attention, attention + skip, + MLP, + LN and the full block from the same weights, the "
      "paper's bound, path lengths and the short-path experiment; writes collapse.json and SVGs");
  cmd->add_option("--model", c->model_dir, "a trained model directory (Hugging Face or attnkit; an encoder-decoder's encoder), a .gguf file, checkpoint or run directory");
  cmd->add_option("--random", c->random,
                  "a random stack: preset bert|albert|gpt2 (sizes from --layers --heads --hidden "
                  "--intermediate --vocab), a TransformerConfig JSON file, or a model (directory or .gguf "
                  "file: random weights of its shape, its tokenizer for --data); those options override "
                  "a file's or model's sizes");
  cmd->add_option("--layers", c->layers, "layers of the random stack (default 12)")->check(at_least(1));
  cmd->add_option("--heads", c->heads, "heads per layer (default 4)")->check(at_least(1));
  cmd->add_option("--hidden", c->hidden, "hidden width (default 64)")->check(at_least(1));
  cmd->add_option("--intermediate", c->intermediate, "MLP width (default 4 x hidden)")->check(at_least(1));
  cmd->add_option("--vocab", c->vocab, "vocabulary size of the random stack (default 1000)")->check(at_least(2));
  cmd->add_option("--kind", c->kinds,
                  "attention kind(s) of the random stack, comma-separated, or 'all' (softmax, "
                  "linear:elu, linear:relu, linear:favor, cosformer, synthesizer-dense, "
                  "synthesizer-random, synthesizer-factorized-dense, "
                  "synthesizer-factorized-random); any kind of the attention-kind grammar "
                  "(e.g. talking-heads, linear:favor:M:SEED, synthesizer-random-fixed, "
                  "mixture:A+B); default softmax");
  cmd->add_option("--seeds", c->seeds, "random models per kind (seeds --seed, --seed+1, ...)")
      ->capture_default_str()->check(at_least(1));
  cmd->add_option("--init-std", c->init_std, "std of the random dense/embedding weights")->capture_default_str();
  cmd->add_option("--samples", c->samples, "input sequences per model")->capture_default_str()->check(at_least(1));
  cmd->add_option("--seq-len", c->seq_len, "tokens per input sequence")->capture_default_str()->check(at_least(2));
  cmd->add_option("--data", c->data, "text file, one text per line, tokenised and cut into --seq-len windows "
                                     "(default: random token ids)");
  cmd->add_option("--tokenizer", c->tokenizer, "tokenizer for --data (default: the --model directory's)");
  cmd->add_option("--gamma", c->gamma, "the bound's gamma (c = 4 gamma beta H / sqrt(d_qk))")->capture_default_str();
  cmd->add_option("--subsets", c->subsets, "layer subsets per k in the short-path experiment")
      ->capture_default_str()->check(at_least(1));
  cmd->add_flag("--no-short-paths", c->no_short_paths, "skip the short-path experiment");
  cmd->add_option("--variants", c->variants,
                  "comma-separated subset of pure_attention, attention_skip, attention_mlp, "
                  "attention_layer_norm, full_block (default all)");
  cmd->add_option("--dtype", c->dtype, "dtype the model runs in: float64 or float32")->capture_default_str();
  cmd->add_option("--save-layer-outputs", c->save_layer_outputs,
                  "also write every variant's layer outputs (first model) as float64 safetensors");
  cmd->add_option("--out", c->out, "output directory (collapse.json, *.svg)")->required();
  cmd->callback([c, &global] { global.action = [c, &global] { return run_collapse(*c, global); }; });
}

}  // namespace attnkit::cli
