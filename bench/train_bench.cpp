// attnkit_bench_train: training throughput of ONE case; one JSON line.
//
//   attnkit_bench_train --kind KIND --n N --batch B [--model causal-lm|classifier|mlm] [--hidden H]
//                       [--layers L] [--heads A] [--intermediate I] [--vocab V] [--steps S]
//                       [--warmup W] [--threads T] [--default-malloc] [--mlm-head selected|all]
//
// --model causal-lm (default): attnkit's TaskModel as a GPT-2 (pre-LN blocks, tanh gelu, tied LM
// head, dropout 0) with the given attention kind; one step = forward, next-token cross entropy,
// backward, AdamW (lr 1e-4, weight decay 0.01 on matrices). bench/peers/train_peer.py is the same
// model and loop in python3-torch eager with the same CLI and JSON fields.
// --model classifier: the LRA model (bench/lra_results.py): a bidirectional BERT-shaped encoder
// over the tokens, mean pooling, 2 labels, cross entropy; the rest as above (Pathfinder-X's step).
// --model mlm: a BERT (post-LN, exact gelu, two token types, no pooler, positions max(512, n),
// dropout 0) with the masked-LM head tied to the word embeddings, bidirectional, no padding; the
// selected positions are a fixed 15% ((b·n + i) mod 20 < 3), their labels the input ids. With
// --mlm-head selected (default) the head runs on the selected positions only, as `attnkit train
// --task.name mlm` does (src/train/tasks/mlm.cpp); with all, on every position with the others
// ignored, as transformers' BertForMaskedLM does. bench/peers/mlm_peer.py is BertForMaskedLM.
// KIND is any attention kind of the grammar (softmax, linear:elu, cosformer, synthesizer-dense, …).
// Random token ids, fixed per step.
//   tokens_per_s  batch·n·steps / time of the timed steps (after `warmup` untimed steps)
//   step_cpu_ms   process CPU time (user + system) per timed step
//   extra_peak    ru_maxrss at the end − resident set before the first step (MiB)
#include <torch/torch.h>

#include "attnkit/models/task_model.h"
#include "attnkit/runtime.h"
#include "attnkit/train/optimizers.h"

#include "flags.h"  // tools/flags.h
#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
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

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
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
  std::string model_kind = "causal-lm";
  std::string mlm_head = "selected";
  int64_t n = 256, batch = 8, hidden = 256, layers = 4, heads = 4, intermediate = 0, vocab = 8192;
  int steps = 10, warmup = 2, threads = 2;
  CLI::App app{"attnkit training-throughput benchmark (one case)"};
  app.add_option("--kind", kind, "attention kind (softmax, linear = linear:elu, cosformer, synthesizer-dense, ...)")
      ->capture_default_str();
  app.add_option("--model", model_kind,
                 "causal-lm (GPT-2), classifier (bidirectional, mean pooling) or mlm (BERT, masked-LM head)")
      ->capture_default_str()->check(CLI::IsMember({"causal-lm", "classifier", "mlm"}));
  app.add_option("--mlm-head", mlm_head, "mlm: the head on the selected positions only, or on all")
      ->capture_default_str()->check(CLI::IsMember({"selected", "all"}));
  app.add_option("--intermediate", intermediate, "feed-forward size (0 = 4 x hidden)")->capture_default_str()->check(at_least(0));
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

  const bool classifier = model_kind == "classifier", mlm = model_kind == "mlm";
  if (intermediate == 0) intermediate = 4 * hidden;
  auto config = classifier || mlm ? attnkit::models::TransformerConfig::bert(vocab, hidden, layers, heads, intermediate)
                                  : attnkit::models::TransformerConfig::gpt2(vocab, hidden, layers, heads);
  config.intermediate = intermediate;
  config.max_positions = mlm ? std::max<int64_t>(512, n) : n;
  config.dropout = 0.0;
  config.attention = attnkit::layers::AttentionSpec::parse(kind);  // "linear" is an alias of linear:elu
  config.attention.causal = !classifier && !mlm;
  config.attention.max_length = n;  // the synthesizers' tables cover n
  if (classifier) {
    config.pooler = false;
    config.type_vocab_size = 0;
  }
  if (mlm) config.pooler = false;  // BertForMaskedLM has none
  attnkit::models::HeadsConfig heads_config;
  if (classifier) {
    heads_config.sequence_labels = 2;
    heads_config.sequence_pooling = attnkit::models::Pooling::Mean;
    heads_config.classifier_dropout = 0.0;
  } else if (mlm) {
    heads_config.masked_lm = true;
  } else {
    heads_config.causal_lm = true;
  }
  attnkit::models::TaskModel model(config, heads_config);
  model->train();
  attnkit::train::OptimizerOptions options;
  options.learning_rate = 1e-4;
  auto optimizer = attnkit::train::make_optimizer(*model, options);
  auto ids = torch::randint(vocab, {batch, n}, torch::kLong);
  at::Tensor targets;
  if (classifier) {
    targets = torch::randint(2, {batch}, torch::kLong);
  } else if (mlm) {
    const at::Tensor selected = torch::arange(batch * n, torch::kLong).remainder(20).lt(3).view({batch, n});
    targets = torch::where(selected, ids, torch::full_like(ids, attnkit::models::kIgnoreLabel));
  } else {
    targets = attnkit::models::next_token_targets(ids);
  }
  const at::Tensor selected = mlm ? targets.ne(attnkit::models::kIgnoreLabel) : at::Tensor();
  const at::Tensor selected_labels = mlm ? targets.index({selected}) : at::Tensor();
  attnkit::models::TaskInputs in;
  in.input_ids = ids;

  int64_t parameters = 0;  // distinct tensors (a tied head counts once)
  for (const auto& p : model->parameters()) parameters += p.numel();
  const double baseline = current_rss_mib();
  auto step = [&] {
    optimizer->zero_grad();
    if (mlm && mlm_head == "selected") {  // the mlm task's step (src/train/tasks/mlm.cpp)
      auto& transformer = model->transformer;
      const at::Tensor hidden_states = transformer->forward(in).last_hidden_state;
      const at::Tensor logits =
          model->masked_lm->forward(hidden_states.index({selected}), transformer->word_embeddings());
      auto loss = attnkit::models::cross_entropy(logits, selected_labels);
      loss.backward();
      optimizer->step();
      return loss.item<double>();
    }
    auto out = model->forward(in);
    auto logits = classifier ? out.sequence_logits : mlm ? out.masked_lm_logits : out.causal_lm_logits;
    auto loss = attnkit::models::cross_entropy(logits, targets);
    loss.backward();
    optimizer->step();
    return loss.item<double>();
  };
  for (int i = 0; i < warmup; ++i) step();
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  double loss = 0;
  for (int i = 0; i < steps; ++i) loss = step();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  nlohmann::json out{{"impl", "attnkit"},
                     {"kind", kind},
                     {"model", model_kind},
                     {"mlm_head", mlm ? mlm_head : ""},
                     {"n", n},
                     {"batch", batch},
                     {"steps", steps},
                     {"step_ms", 1000.0 * seconds / steps},
                     {"step_cpu_ms", 1000.0 * cpu / steps},
                     {"tokens_per_s", static_cast<double>(batch * n * steps) / seconds},
                     {"extra_peak_mib", peak_rss_mib() - baseline},
                     {"loss", loss},
                     {"parameters", parameters},
                     {"threads", threads},
                     {"malloc", default_malloc ? "default" : "reuse_freed_memory"}};
  std::cout << out.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  return attnkit::cli::report_failure("attnkit_bench_train", e);
}
