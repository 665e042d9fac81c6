// attnkit_bench_train: training throughput of ONE GPT-2-shaped causal LM case; one JSON line.
//
//   attnkit_bench_train --kind softmax|linear|cosformer --n N --batch B [--hidden H] [--layers L]
//                       [--heads A] [--vocab V] [--steps S] [--warmup W] [--threads T]
//                       [--default-malloc]
//
// The model is attnkit's TaskModel (pre-LN GPT-2 blocks, tanh gelu, tied LM head, dropout 0) with
// the given attention kind; one step = forward, next-token cross entropy, backward, AdamW (lr 1e-4,
// weight decay 0.01 on matrices). Random token ids, fixed per step. bench/peers/train_peer.py is
// the same model and loop in python3-torch eager with the same CLI and JSON fields.
//   tokens_per_s  batch·n·steps / time of the timed steps (after `warmup` untimed steps)
//   extra_peak    ru_maxrss at the end − resident set before the first step (MiB)
#include <torch/torch.h>

#include "attnkit/models/task_model.h"
#include "attnkit/runtime.h"
#include "attnkit/train/optimizers.h"

#include "flags.h"  // tools/flags.h
#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>

namespace {

double current_rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

}  // namespace

int main(int argc, char** argv) try {
  using attnkit::cli::at_least;
  std::string kind = "softmax";
  int64_t n = 256, batch = 8, hidden = 256, layers = 4, heads = 4, vocab = 8192;
  int steps = 10, warmup = 2, threads = 2;
  CLI::App app{"attnkit training-throughput benchmark (one case)"};
  app.add_option("--kind", kind, "softmax, linear (elu features) or cosformer")
      ->capture_default_str()->check(CLI::IsMember({"softmax", "linear", "cosformer"}));
  app.add_option("--n", n, "sequence length")->capture_default_str()->check(at_least(1));
  app.add_option("--batch", batch, "batch size")->capture_default_str()->check(at_least(1));
  app.add_option("--hidden", hidden, "hidden size")->capture_default_str()->check(at_least(1));
  app.add_option("--layers", layers, "layers")->capture_default_str()->check(at_least(1));
  app.add_option("--heads", heads, "heads")->capture_default_str()->check(at_least(1));
  app.add_option("--vocab", vocab, "vocabulary size")->capture_default_str()->check(at_least(1));
  app.add_option("--steps", steps, "timed training steps")->capture_default_str()->check(at_least(1));
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str()->check(at_least(0));
  app.add_option("--threads", threads, "intra-op (and BLAS) threads")->capture_default_str()->check(at_least(1));
  bool default_malloc = false;
  app.add_flag("--default-malloc", default_malloc,
               "leave glibc malloc as it is (attnkit's CLI calls reuse_freed_memory)");
  if (const auto status = attnkit::cli::parse_flags(app, argc, argv, "attnkit_bench_train")) return *status;
  // The process set-up `attnkit train` uses (tools/attnkit/main.cpp).
  if (!default_malloc) attnkit::reuse_freed_memory();
  at::set_num_threads(threads);
  attnkit::set_blas_threads(threads);
  torch::manual_seed(0);

  auto config = attnkit::models::TransformerConfig::gpt2(vocab, hidden, layers, heads);
  config.max_positions = n;
  config.dropout = 0.0;
  config.attention = attnkit::layers::AttentionSpec::parse(kind);  // "linear" is an alias of linear:elu
  config.attention.causal = true;
  attnkit::models::HeadsConfig heads_config;
  heads_config.causal_lm = true;
  attnkit::models::TaskModel model(config, heads_config);
  model->train();
  attnkit::train::OptimizerOptions options;
  options.learning_rate = 1e-4;
  auto optimizer = attnkit::train::make_optimizer(*model, options);
  auto ids = torch::randint(vocab, {batch, n}, torch::kLong);
  auto targets = attnkit::models::next_token_targets(ids);
  attnkit::models::TaskInputs in;
  in.input_ids = ids;

  const double baseline = current_rss_mib();
  auto step = [&] {
    optimizer->zero_grad();
    auto logits = model->forward(in).causal_lm_logits;
    auto loss = attnkit::models::cross_entropy(logits, targets);
    loss.backward();
    optimizer->step();
    return loss.item<double>();
  };
  for (int i = 0; i < warmup; ++i) step();
  const auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  for (int i = 0; i < steps; ++i) loss = step();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json out{{"impl", "attnkit"},
                     {"kind", kind},
                     {"n", n},
                     {"batch", batch},
                     {"steps", steps},
                     {"step_ms", 1000.0 * seconds / steps},
                     {"tokens_per_s", static_cast<double>(batch * n * steps) / seconds},
                     {"extra_peak_mib", peak_rss_mib() - baseline},
                     {"loss", loss},
                     {"threads", threads},
                     {"malloc", default_malloc ? "default" : "reuse_freed_memory"}};
  std::cout << out.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  return attnkit::cli::report_failure("attnkit_bench_train", e);
}
