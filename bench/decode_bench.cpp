// Decoding benchmark (bench/decode_compare.py runs it): a GPT-2-small-shaped model (random
// weights) decoded one token at a time with attnkit's incremental state.
//   --mode latency  per-token latency (median over --steps tokens) after a prefill of P tokens,
//                   for each P in --positions: softmax KV cache vs linear / cosFormer RNN state.
//   --mode greedy   greedy generation of --new-tokens tokens after a --prompt-tokens prompt
//                   (decode::generate, the model's causal-LM session), tokens per second, batch 1. --model DIR loads
//                   a Hugging Face GPT-2 directory instead of the random model (the weights the
//                   peers run), --prompt gives the prompt ids; the generated ids are printed.
//   --mode bandwidth  memory read bandwidth: the best of --repeats XOR-reductions over a buffer of
//                   --bytes bytes (a STREAM-like read, --threads threads), the floor of a
//                   decoding step that reads every weight once.
// Prints one JSON object per line.
#include "attnkit/decode/generation.h"
#include "attnkit/decode/language_models.h"
#include "attnkit/decode/latency.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/models/task_model.h"
#include "attnkit/runtime.h"

#include "../src/ops/cpu/parallel.h"
#include "flags.h"  // tools/flags.h
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <sstream>

using namespace attnkit;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}


}  // namespace

int main(int argc, char** argv) try {
  using attnkit::cli::at_least;
  CLI::App app{"attnkit decoding benchmark: per-token latency, greedy tokens/s or memory bandwidth; one JSON line per result"};
  std::string mode = "latency", kind = "softmax", positions_text = "256,1024,4096";
  int64_t layers = 12, hidden = 768, heads = 12, vocab = 50257, steps = 16, threads = 2;
  int64_t prompt_tokens = 16, new_tokens = 128, bytes = int64_t(512) << 20, repeats = 5;
  std::string model_dir, prompt_text;
  app.add_option("--mode", mode, "latency, greedy or bandwidth")->capture_default_str()->check(CLI::IsMember({"latency", "greedy", "bandwidth"}));
  app.add_option("--model", model_dir, "greedy: a Hugging Face GPT-2 directory (default: random)");
  app.add_option("--prompt", prompt_text, "greedy: prompt ids, comma-separated (default: random)");
  app.add_option("--bytes", bytes, "bandwidth: buffer size in bytes")->capture_default_str()->check(at_least(8));
  app.add_option("--repeats", repeats, "bandwidth: reads (the fastest is reported)")->capture_default_str()->check(at_least(1));
  app.add_option("--kind", kind, "attention kind (softmax, linear:elu, cosformer)")->capture_default_str();
  app.add_option("--positions", positions_text, "latency: prefill lengths, comma-separated")->capture_default_str();
  app.add_option("--steps", steps, "latency: tokens timed per position")->capture_default_str()->check(at_least(1));
  app.add_option("--layers", layers, "random model: layers")->capture_default_str()->check(at_least(1));
  app.add_option("--hidden", hidden, "random model: hidden size")->capture_default_str()->check(at_least(1));
  app.add_option("--heads", heads, "random model: heads")->capture_default_str()->check(at_least(1));
  app.add_option("--vocab", vocab, "random model: vocabulary size")->capture_default_str()->check(at_least(1));
  app.add_option("--threads", threads, "intra-op (and BLAS) threads")->capture_default_str()->check(at_least(1));
  app.add_option("--prompt-tokens", prompt_tokens, "greedy: random prompt length")->capture_default_str()->check(at_least(1));
  app.add_option("--new-tokens", new_tokens, "greedy: tokens to generate")->capture_default_str()->check(at_least(1));
  if (const auto status = attnkit::cli::parse_flags(app, argc, argv, "attnkit_bench_decode")) return *status;
  at::set_num_threads(static_cast<int>(threads));
  at::set_num_interop_threads(1);
  set_blas_threads(static_cast<int>(threads));
  torch::NoGradGuard no_grad;

  auto parse_ids = [](const std::string& text) {
    std::vector<int64_t> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
    return out;
  };
  if (mode == "bandwidth") {
    // XOR of 64-bit words: an integer reduction the compiler vectorises (a float sum does not
    // without -ffast-math; at::sum gave a "floor" that attnkit's one-thread decoding beat), so
    // the loop is limited by how fast memory (or cache) delivers the bytes.
    const int64_t words = bytes / 8;
    at::Tensor buffer = at::randint(1 << 30, {words}, at::kLong);
    const auto* data = reinterpret_cast<const uint64_t*>(buffer.data_ptr<int64_t>());
    std::vector<double> times;
    uint64_t sink = 0;
    for (int64_t r = 0; r < repeats; ++r) {
      std::atomic<uint64_t> acc{0};
      const double t = now();
      attnkit::ops::cpu::parallel_for(0, words, int64_t(1) << 16, [&](int64_t begin, int64_t end) {
        uint64_t x = 0;
        for (int64_t i = begin; i < end; ++i) x ^= data[i];
        acc.fetch_xor(x);
      });
      times.push_back(now() - t);
      sink ^= acc.load();
    }
    if (sink == 42) std::cerr << "";  // keeps the reads
    const double best = *std::min_element(times.begin(), times.end());
    std::sort(times.begin(), times.end());
    nlohmann::json row{{"mode", "bandwidth"},
                       {"bytes", bytes},
                       {"gb_per_s", double(bytes) / best / 1e9},
                       {"median_gb_per_s", double(bytes) / times[times.size() / 2] / 1e9},
                       {"threads", threads}};
    std::cout << row.dump() << std::endl;
    return 0;
  }
  std::vector<int64_t> positions = parse_ids(positions_text);
  const int64_t longest = *std::max_element(positions.begin(), positions.end());
  if (mode == "latency") {
    auto model = decode::random_causal_lm(kind, layers, hidden, heads, vocab, longest + steps + 1);
    for (int64_t p : positions) {
      const auto latency = decode::token_latency(model, p, steps);
      nlohmann::json row{{"mode", "latency"},
                         {"kind", kind},
                         {"position", p},
                         {"ms_per_token", latency.ms_per_token},
                         {"prefill_s", latency.prefill_s},
                         {"state_bytes", latency.state_bytes},
                         {"threads", threads}};
      std::cout << row.dump() << std::endl;
    }
    return 0;
  }
  models::TaskModel model{nullptr};
  if (!model_dir.empty()) {
    model = io::load_model(model_dir).task;
    vocab = model->config().vocab_size;
  } else {
    model = decode::random_causal_lm(kind, layers, hidden, heads, vocab, prompt_tokens + new_tokens + 1);
  }
  model->eval();
  // Bytes one step reads: every parameter but the position table (one row of it is read), the
  // LM head being the tied word embeddings.
  int64_t weight_bytes = 0;
  for (const auto& p : model->named_parameters())
    if (p.key().find("position") == std::string::npos)
      weight_bytes += p.value().numel() * static_cast<int64_t>(p.value().element_size());
  const auto session = decode::start_decoding(*model, {}).session;
  decode::LanguageModel& lm = *session;
  decode::GenerationConfig config;
  config.strategy = decode::Strategy::Greedy;
  config.max_new_tokens = new_tokens;
  std::vector<int64_t> prompt = parse_ids(prompt_text);
  if (prompt.empty()) {
    torch::manual_seed(1);
    at::Tensor prompt_t = torch::randint(vocab, {prompt_tokens}, at::kLong);
    prompt.assign(prompt_t.data_ptr<int64_t>(), prompt_t.data_ptr<int64_t>() + prompt_tokens);
  }
  decode::generate(lm, {prompt}, [&] {  // warm-up
    auto c = config;
    c.max_new_tokens = 4;
    return c;
  }());
  const double t0 = now();
  auto result = decode::generate(lm, {prompt}, config);
  const double elapsed = now() - t0;
  nlohmann::json row{{"mode", "greedy"},
                     {"kind", kind},
                     {"prompt_tokens", static_cast<int64_t>(prompt.size())},
                     {"new_tokens", static_cast<int64_t>(result[0][0].tokens.size())},
                     {"seconds", elapsed},
                     {"tokens_per_s", double(result[0][0].tokens.size()) / elapsed},
                     {"weight_bytes", weight_bytes},
                     {"ids", result[0][0].tokens},
                     {"score", result[0][0].score},
                     {"threads", threads}};
  std::cout << row.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  return attnkit::cli::report_failure("attnkit_bench_decode", e);
}
