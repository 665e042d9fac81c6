// `attnkit analyze collapse`: rank collapse of self-attention (Dong et al. 2021) for a random
// stack or a trained model, any attention kind. Writes collapse.json and SVG plots; see
// docs/analysis.md.
#include "attnkit/analysis/path_counts.h"
#include "attnkit/analysis/rank_collapse.h"
#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/transformer_model.h"
#include "attnkit/report/plot.h"
#include "attnkit/text/pretrained.h"
#include "command.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <unistd.h>

namespace attnkit::cli {
namespace {

namespace fs = std::filesystem;
using analysis::CollapseResult;
using analysis::Variant;
using models::TransformerConfig;

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

// A simple progress bar on stderr, only when it is a terminal.
class ProgressBar {
 public:
  ProgressBar(int64_t total, bool enabled) : total_(std::max<int64_t>(total, 1)), enabled_(enabled) {}
  void tick() {
    ++done_;
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done_ < total_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double fraction = std::min(1.0, double(done_) / double(total_));
    const int width = 30, filled = static_cast<int>(fraction * width);
    const double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0;
    std::fprintf(stderr, "\r[%s%s] %3d%% %lld/%lld forward passes, ETA %.0fs ",
                 std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(),
                 int(fraction * 100), static_cast<long long>(done_), static_cast<long long>(total_), eta);
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_ && done_ > 0) std::fprintf(stderr, "\n");
  }

 private:
  int64_t total_, done_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

const std::vector<std::string>& all_kinds() {
  static const std::vector<std::string> kinds = {
      "softmax",           "linear:elu",         "linear:relu",
      "linear:favor",      "cosformer",          "synthesizer-dense",
      "synthesizer-random", "synthesizer-factorized-dense", "synthesizer-factorized-random"};
  return kinds;
}

TransformerConfig random_config(const CollapseCommand& c) {
  TransformerConfig config;
  const int64_t hidden = c.hidden > 0 ? c.hidden : 64, layers = c.layers > 0 ? c.layers : 12,
                heads = c.heads > 0 ? c.heads : 4, vocab = c.vocab > 0 ? c.vocab : 1000;
  const int64_t intermediate = c.intermediate > 0 ? c.intermediate : 4 * hidden;
  if (c.random == "bert") {
    config = TransformerConfig::bert(vocab, hidden, layers, heads, intermediate);
  } else if (c.random == "albert") {
    config = TransformerConfig::albert(vocab, std::max<int64_t>(hidden / 2, 8), hidden, layers, heads,
                                       intermediate);
  } else if (c.random == "gpt2") {
    config = TransformerConfig::gpt2(vocab, hidden, layers, heads);
    config.intermediate = intermediate;
  } else {
    std::ifstream in(c.random);
    if (!in)
      throw Error(fmt::format("--random {}: neither a preset (bert, albert, gpt2) nor a readable "
                              "config JSON file",
                              c.random));
    nlohmann::json j;
    try {
      in >> j;
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("--random {}: not valid JSON ({})", c.random, e.what()));
    }
    try {
      models::from_json(j, config);
    } catch (const Error& e) {
      throw Error(fmt::format("--random {}: {}", c.random, e.what()));
    }
    if (c.layers > 0) config.layers = c.layers;
    if (c.heads > 0) config.heads = c.heads;
    if (c.hidden > 0) config.hidden = c.hidden;
    if (c.intermediate > 0) config.intermediate = c.intermediate;
    if (c.vocab > 0) config.vocab_size = c.vocab;
  }
  config.dropout = 0.0;
  config.max_positions = std::max(config.max_positions, c.seq_len);
  config.attention.max_length = std::max(config.attention.max_length, c.seq_len);
  config.validate();
  return config;
}

TransformerConfig with_kind(TransformerConfig config, const std::string& kind) {
  const auto spec = layers::AttentionSpec::parse(kind);
  config.attention.kind = spec.kind;
  config.attention.feature_map = spec.feature_map;
  config.attention.mixture = spec.mixture;
  config.attention.talking_heads = spec.talking_heads;
  config.validate();
  return config;
}

models::TransformerModel load_model_directory(const std::string& directory) {
  io::LoadedModel loaded = io::load_model(directory);
  return loaded.model;
}

// Token ids [samples, seq_len]: the data file's lines tokenised and concatenated, cut into
// consecutive windows; random ids in [0, vocab) without data.
at::Tensor make_inputs(const CollapseCommand& c, const TransformerConfig& config, uint64_t seed,
                       std::string& source) {
  if (c.data.empty()) {
    source = fmt::format("random token ids in [0, {}), seed {}", config.vocab_size, seed);
    auto generator = at::detail::createCPUGenerator(seed);
    return at::randint(0, config.vocab_size, {c.samples, c.seq_len}, generator, at::kLong);
  }
  const std::string tokenizer_path = !c.tokenizer.empty() ? c.tokenizer : c.model_dir;
  if (tokenizer_path.empty())
    throw Error("--data needs a tokenizer: give --model DIR (its tokenizer) or --tokenizer PATH");
  const text::Tokenizer tokenizer = text::load_tokenizer(tokenizer_path);
  std::ifstream in(c.data);
  if (!in) throw Error(fmt::format("--data {}: cannot read the file", c.data));
  std::vector<int64_t> ids;
  const size_t needed = size_t(c.samples * c.seq_len);
  std::string line;
  while (ids.size() < needed && std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    for (uint32_t id : tokenizer.encode(line).ids) ids.push_back(int64_t(id));
  }
  const int64_t windows = static_cast<int64_t>(ids.size()) / c.seq_len;
  if (windows < 1)
    throw Error(fmt::format("--data {}: {} tokens, fewer than one window of --seq-len {}", c.data,
                            ids.size(), c.seq_len));
  const int64_t used = std::min(windows, c.samples);
  source = fmt::format("{}: {} windows of {} tokens (tokenizer {})", c.data, used, c.seq_len,
                       tokenizer_path);
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + used * c.seq_len), at::kLong)
      .view({used, c.seq_len});
}

std::string file_safe(const std::string& kind) {
  std::string s = kind;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
  return s;
}

std::vector<double> layer_axis(int64_t count) {
  std::vector<double> x;
  for (int64_t l = 0; l < count; ++l) x.push_back(double(l));
  return x;
}

std::vector<double> geometric_means(const analysis::VariantCurve& curve) {
  std::vector<double> y;
  for (const auto& layer : curve.layers) y.push_back(std::pow(10.0, layer.relative_composite.spread().log10_mean));
  return y;
}

// Per-layer relative residual, one curve per variant, the relative bound dashed.
report::LinePlot residual_plot(const CollapseResult& r) {
  report::LinePlot plot;
  plot.title = fmt::format("{}: relative residual per layer ({} layers, {} heads, {} models x {} inputs each)",
                           r.kind, r.layers, r.heads, r.models, r.inputs / std::max<int64_t>(r.models, 1));
  plot.x_label = "layer";
  plot.y_label = "||res(X)||_{1,inf} / ||X||_{1,inf} (geometric mean)";
  plot.log_y = true;
  double lowest = 1.0;
  for (const auto& curve : r.curves) {
    report::Series s;
    s.title = analysis::variant_info(curve.variant).label;
    s.x = layer_axis(static_cast<int64_t>(curve.layers.size()));
    s.y = geometric_means(curve);
    for (double v : s.y)
      if (v > 0) lowest = std::min(lowest, v);
    plot.series.push_back(std::move(s));
  }
  if (r.bound.available) {
    report::Series s;
    s.title = fmt::format("bound, pure attention (gamma={:g})", r.bound.gamma);
    s.dashed = true;
    s.style = "lines";
    double lowest_bound = INFINITY;
    for (size_t l = 1; l < r.bound.layers.size(); ++l) {
      const double log10_bound = r.bound.layers[l].log10_relative_bound.spread().mean;
      lowest_bound = std::min(lowest_bound, log10_bound);
      s.x.push_back(double(l));
      s.y.push_back(std::pow(10.0, log10_bound));
    }
    if (lowest_bound > 1) s.title += fmt::format(": off the scale, >= 1e{:.0f}", std::floor(lowest_bound));
    plot.series.push_back(std::move(s));
  }
  plot.y_min = std::max(1e-18, lowest / 10);
  plot.y_max = 10;
  return plot;
}

report::LinePlot kinds_plot(const std::vector<CollapseResult>& results, Variant variant) {
  report::LinePlot plot;
  plot.title = fmt::format("{} per attention kind", analysis::variant_info(variant).label);
  plot.x_label = "layer";
  plot.y_label = "relative residual (composite norm, geometric mean)";
  plot.log_y = true;
  double lowest = 1.0;
  for (const auto& r : results)
    for (const auto& curve : r.curves)
      if (curve.variant == variant) {
        report::Series s;
        s.title = r.kind;
        s.x = layer_axis(static_cast<int64_t>(curve.layers.size()));
        s.y = geometric_means(curve);
        for (double v : s.y)
          if (v > 0) lowest = std::min(lowest, v);
        plot.series.push_back(std::move(s));
      }
  plot.y_min = std::max(1e-18, lowest / 10);
  plot.y_max = 10;
  return plot;
}

report::LinePlot short_paths_plot(const CollapseResult& r) {
  report::LinePlot plot;
  plot.title = fmt::format("{}: attention kept in k of {} layers (full block otherwise)", r.kind, r.layers);
  plot.x_label = "k (layers whose attention is kept)";
  plot.y_label = "mean over inputs and layer subsets";
  report::Series distance{"||Y_k - Y||_F / ||Y||_F", {}, {}}, cosine{"token cosine(Y_k, Y)", {}, {}},
      agreement{"nearest-embedding agreement", {}, {}};
  for (const auto& p : r.short_paths) {
    distance.x.push_back(double(p.k));
    distance.y.push_back(p.relative_distance.spread().mean);
    cosine.x.push_back(double(p.k));
    cosine.y.push_back(p.cosine.spread().mean);
    if (!p.prediction_agreement.values.empty()) {
      agreement.x.push_back(double(p.k));
      agreement.y.push_back(p.prediction_agreement.spread().mean);
    }
  }
  plot.series = {distance, cosine};
  if (!agreement.x.empty()) plot.series.push_back(agreement);
  return plot;
}

report::LinePlot path_plot(const analysis::PathDistribution& d) {
  report::LinePlot plot;
  plot.title = fmt::format("Path lengths, {} layers x {} heads: C(L,k) H^k of (1+H)^L = {:.3g} paths",
                           d.layers, d.heads, d.total.to_double());
  plot.x_label = "path length k (attention heads on the path)";
  plot.y_label = "fraction of paths";
  report::Series s{"C(L,k) H^k / (1+H)^L", {}, {}};
  for (const auto& p : d.lengths) {
    s.x.push_back(double(p.length));
    s.y.push_back(p.fraction);
  }
  plot.series.push_back(std::move(s));
  return plot;
}

nlohmann::json path_json(const analysis::PathDistribution& d) {
  nlohmann::json j{{"layers", d.layers},
                   {"heads", d.heads},
                   {"total", d.total.to_string()},
                   {"mean_length", d.mean_length},
                   {"lengths", nlohmann::json::array()}};
  for (const auto& p : d.lengths)
    j["lengths"].push_back({{"k", p.length}, {"count", p.count.to_string()}, {"fraction", p.fraction}});
  return j;
}

void print_summary(const CollapseResult& r) {
  fmt::print("{} ({} layers, {} heads, {} models, {} inputs of {} tokens)\n", r.kind, r.layers,
             r.heads, r.models, r.inputs, r.seq_len);
  for (const auto& curve : r.curves) {
    const auto y = geometric_means(curve);
    const auto fit = analysis::fit_collapse(y, r.round_off_floor);
    fmt::print("  {:<30} relative residual: layer 1 {:.3e}, layer {} {:.3e}; fit rate {:.3g}/layer, "
               "double-exponential base {:.3g}\n",
               analysis::variant_info(curve.variant).label, y.size() > 1 ? y[1] : 0.0, y.size() - 1,
               y.back(), fit.exponential_rate, fit.double_exponential_base);
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
  const auto dtype = c.dtype == "float64" ? at::kDouble : at::kFloat;

  analysis::CollapseOptions options;
  if (!c.variants.empty()) {
    options.variants.clear();
    for (const auto& name : split(c.variants, ',')) options.variants.push_back(analysis::parse_variant(name));
  }
  options.gamma = c.gamma;
  options.subsets = c.subsets;
  options.short_paths = !c.no_short_paths;
  options.seed = global.seed;
  options.keep_layer_outputs = !c.save_layer_outputs.empty();

  std::vector<std::string> kinds;
  TransformerConfig base;
  std::string source;
  models::TransformerModel loaded{nullptr};
  if (!c.random.empty()) {
    base = random_config(c);
    kinds = c.kinds == "all" ? all_kinds() : split(c.kinds, ',');
    if (kinds.empty()) kinds = {base.attention.to_string()};
    source = fmt::format("random {} stack, init std {:g}, {} seeds from {}", c.random, c.init_std,
                         c.seeds, global.seed);
  } else {
    loaded = load_model_directory(c.model_dir);
    base = loaded->config();
    kinds = {base.attention.to_string()};
    source = c.model_dir;
  }
  std::vector<TransformerConfig> configs;
  for (const auto& kind : kinds) configs.push_back(loaded ? base : with_kind(base, kind));
  const int64_t model_count = loaded ? 1 : c.seeds;
  int64_t total = 0;
  for (const auto& config : configs) total += model_count * analysis::forward_passes(config, options);
  ProgressBar progress(total, !global.quiet && isatty(STDERR_FILENO));
  options.on_forward = [&progress] { progress.tick(); };

  fs::create_directories(c.out);
  std::string input_source;
  std::vector<CollapseResult> results;
  io::NamedTensors saved;
  for (size_t i = 0; i < configs.size(); ++i) {
    CollapseResult merged;
    for (int64_t s = 0; s < model_count; ++s) {
      models::TransformerModel model = loaded;
      if (!model) {
        torch::manual_seed(global.seed + uint64_t(s));
        model = models::TransformerModel(configs[i]);
        model->reset_parameters(c.init_std);
      }
      model->to(dtype);
      const at::Tensor ids = make_inputs(c, configs[i], global.seed + 1000 + uint64_t(s), input_source);
      CollapseResult r = analysis::analyze_collapse(model, ids, options);
      if (s == 0 && options.keep_layer_outputs) {
        saved.emplace_back(file_safe(r.kind) + "/input_ids", ids);
        for (const auto& curve : r.curves)
          for (size_t l = 0; l < curve.outputs.size(); ++l)
            saved.emplace_back(fmt::format("{}/{}/layer_{}", file_safe(r.kind),
                                           analysis::variant_info(curve.variant).name, l),
                               curve.outputs[l]);
      }
      if (s == 0) merged = std::move(r);
      else merged.merge(r);
    }
    results.push_back(std::move(merged));
  }
  progress.finish();

  const auto paths = analysis::path_length_distribution(base.layers, base.heads);
  nlohmann::json j;
  j["analysis"] = "rank collapse (Dong, Cordonnier, Loukas 2021)";
  j["model"] = {{"source", source}, {"family", base.family}, {"dtype", c.dtype}};
  j["inputs"] = {{"source", input_source}, {"samples", c.samples}, {"seq_len", c.seq_len}};
  j["residual"] = "res(X) = X - 1 x^T with x the mean token (exact minimiser for Frobenius, an "
                  "upper bound of the minimum for the composite norm sqrt(||.||_1 ||.||_inf))";
  j["short_paths_subsets"] = c.subsets;
  j["paths"] = path_json(paths);
  j["results"] = nlohmann::json::array();
  for (const auto& r : results) j["results"].push_back(analysis::to_json(r));
  io::write_file_atomically((fs::path(c.out) / "collapse.json").string(), j.dump(2) + "\n");

  std::vector<std::string> written = {"collapse.json"};
  auto plot = [&](const report::LinePlot& p, const std::string& name) {
    report::write_svg(p, (fs::path(c.out) / name).string());
    written.push_back(name);
  };
  for (const auto& r : results) {
    plot(residual_plot(r), "residual_" + file_safe(r.kind) + ".svg");
    if (!r.short_paths.empty()) plot(short_paths_plot(r), "short_paths_" + file_safe(r.kind) + ".svg");
  }
  if (results.size() > 1)
    for (Variant v : options.variants) plot(kinds_plot(results, v), std::string("kinds_") + analysis::variant_info(v).name + ".svg");
  plot(path_plot(paths), "path_lengths.svg");
  if (!c.save_layer_outputs.empty()) {
    io::save_safetensors(c.save_layer_outputs, saved);
    written.push_back(c.save_layer_outputs);
  }
  if (!global.quiet) {
    for (const auto& r : results) print_summary(r);
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
  cmd->add_option("--model", c->model_dir, "a trained model directory (HF BERT/ALBERT/GPT-2 or attnkit)");
  cmd->add_option("--random", c->random,
                  "a random stack: preset bert|albert|gpt2 (sizes from --layers --heads --hidden "
                  "--intermediate --vocab) or a TransformerConfig JSON file (those options override it)");
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
