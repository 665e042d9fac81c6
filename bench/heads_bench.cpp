// attnkit_bench_heads: inference throughput of ONE case, pruned or not; one JSON line
// (bench/heads_compare.py runs the grid, one fresh process per case).
//
//   attnkit_bench_heads --pruned 0|0.5 --batch B --n N [--layers 12] [--heads 12] [--hidden 768]
//                       [--repeats R] [--warmup W] [--threads T]
//   attnkit_bench_heads --model PATH [--pruned-groups G] --batch B --n N [...]
//
// Without --model the model is attnkit's BERT (post-LN, GELU, random weights normal(0, 0.02),
// dropout 0, eval, NoGradGuard). --pruned F physically removes the first round(F·heads) heads of
// every layer (TransformerModel::prune_heads: rows of Q/K/V, columns of the output projection), so
// every layer keeps the same number of heads. --model reads a trained model (a directory or a
// .gguf file; its transformer stack, causal or not as its config says) and --pruned-groups G
// removes the last G key/value groups of every layer with their query heads (a grouped-query
// model; --pruned F, without groups, removes query heads as above). Timed: `repeats` forward
// passes of random ids after `warmup` untimed ones.
//   tokens_per_s  batch·n·repeats / time of the timed passes
#include <torch/torch.h>

#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/models/transformer_model.h"
#include "attnkit/runtime.h"

#include "flags.h"  // tools/flags.h
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <iostream>

int main(int argc, char** argv) try {
  using attnkit::cli::at_least;
  double pruned = 0;
  int64_t batch = 16, n = 128, layers = 12, heads = 12, hidden = 768;
  int64_t pruned_groups = 0;
  int repeats = 3, warmup = 1, threads = 2;
  std::string model_path;
  CLI::App app{"attnkit pruned-vs-unpruned inference benchmark (one case)"};
  app.add_option("--pruned", pruned, "fraction of each layer's heads removed, 0 to 1")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--model", model_path, "a trained model (directory or .gguf) instead of the random BERT");
  app.add_option("--pruned-groups", pruned_groups, "with --model: key/value groups removed from every layer")
      ->capture_default_str()->check(at_least(0));
  app.add_option("--batch", batch, "batch size")->capture_default_str()->check(at_least(1));
  app.add_option("--n", n, "sequence length")->capture_default_str()->check(at_least(1));
  app.add_option("--layers", layers, "layers")->capture_default_str()->check(at_least(1));
  app.add_option("--heads", heads, "heads per layer")->capture_default_str()->check(at_least(1));
  app.add_option("--hidden", hidden, "hidden size")->capture_default_str()->check(at_least(1));
  app.add_option("--repeats", repeats, "timed forward passes")->capture_default_str()->check(at_least(1));
  app.add_option("--warmup", warmup, "untimed forward passes first")->capture_default_str()->check(at_least(0));
  app.add_option("--threads", threads, "intra-op (and BLAS) threads")->capture_default_str()->check(at_least(1));
  if (const auto status = attnkit::cli::parse_flags(app, argc, argv, "attnkit_bench_heads")) return *status;
  attnkit::reuse_freed_memory();  // the CLI's start-up settings
  at::set_num_threads(threads);
  attnkit::set_blas_threads(threads);
  torch::manual_seed(0);

  attnkit::models::TransformerModel model{nullptr};
  attnkit::models::TransformerConfig config;
  if (model_path.empty()) {
    if (pruned_groups > 0) throw attnkit::Error("--pruned-groups needs --model");
    config = attnkit::models::TransformerConfig::bert(30522, hidden, layers, heads, 4 * hidden);
    config.max_positions = std::max<int64_t>(512, n);
    config.dropout = config.attention_dropout = 0.0;
    model = attnkit::models::TransformerModel(config);
  } else {
    auto loaded = attnkit::io::load_model(model_path);
    model = loaded.transformer;
    if (!model) throw attnkit::Error(model_path + ": --model needs an encoder-only or decoder-only model");
    config = model->config();
    layers = config.layers;
    heads = config.heads;
    if (n > config.max_positions)
      throw attnkit::Error(model_path + ": --n exceeds the model's max_positions");
  }
  model->eval();
  const int64_t kv_heads = config.attention.kv_heads > 0 ? config.attention.kv_heads : heads;
  if (pruned_groups >= kv_heads)
    throw attnkit::Error("--pruned-groups must leave at least one key/value group of " + std::to_string(kv_heads));
  const int64_t removed = pruned_groups > 0 ? pruned_groups * (heads / kv_heads) : std::llround(pruned * double(heads));
  // Query heads: the first `removed`; groups: the last ones (head h is in group h / (heads / kv_heads)).
  const int64_t first = pruned_groups > 0 ? heads - removed : 0;
  attnkit::models::HeadIndices prune;
  for (int64_t l = 0; l < layers && removed > 0; ++l)
    for (int64_t h = first; h < first + removed; ++h) prune[l].push_back(h);
  model->prune_heads(prune);
  int64_t parameters = attnkit::models::parameter_count(*model);

  torch::NoGradGuard no_grad;
  attnkit::models::ModelInputs in;
  in.input_ids = torch::randint(config.vocab_size, {batch, n}, torch::kLong);
  in.attention_mask = torch::ones({batch, n}, torch::kLong);
  for (int i = 0; i < warmup; ++i) model->forward(in);
  const auto t0 = std::chrono::steady_clock::now();
  double checksum = 0;
  for (int i = 0; i < repeats; ++i) checksum += model->forward(in).last_hidden_state.sum().item<double>();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json out{{"impl", "attnkit"},
                     {"model", model_path.empty() ? std::string("random bert") : model_path},
                     {"pruned", pruned},
                     {"pruned_groups", pruned_groups},
                     {"heads_per_layer", heads - removed},
                     {"batch", batch},
                     {"n", n},
                     {"repeats", repeats},
                     {"forward_ms", 1000.0 * seconds / repeats},
                     {"tokens_per_s", static_cast<double>(batch * n * repeats) / seconds},
                     {"parameters", parameters},
                     {"threads", threads},
                     {"checksum", checksum}};
  std::cout << out.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  return attnkit::cli::report_failure("attnkit_bench_heads", e);
}
