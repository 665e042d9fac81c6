// attnkit_bench_attention: times ONE attention case and prints one JSON line.
//
//   attnkit_bench_attention --kind softmax|linear|cosformer --n N --mode fwd|fwdbwd [--causal]
//                           [--repeat R] [--min-time S] [--max-time S] [--threads T]
//                           [--batch B] [--heads H] [--dim D]
//                           [--kv-heads K] [--window W] [--softcap C] [--repeat-kv]
//
// softmax only: --kv-heads K gives k and v K heads (grouped-query attention, K dividing H; the
// fused kernel reads them in place), --window W a causal sliding window (the kernel skips the keys
// outside the band), --softcap C Gemma 2's logit soft-cap (in the kernel). --repeat-kv times the path before the kernel knew either, inside the timed
// call: k and v repeated to H heads (repeat_interleave) and the window written out as an [L, S]
// bool mask passed to the kernel.
//
// Run one case per process (bench/compare.py does): peak RSS from getrusage is then the peak of
// this case. bench/peers/attention_peer.py is the PyTorch-eager peer with the same CLI, the same
// sampling rule and the same JSON fields, so the driver can treat both alike.
//
// Measurement:
//   baseline_rss  resident set after the inputs (and, for fwdbwd, the output gradient) exist,
//                 before the first call of the op;
//   peak_rss      ru_maxrss at the end (high-water mark of the whole process);
//   extra_peak    peak_rss - baseline_rss: the memory the op itself needed at its worst.
//   Sampling: one first call (timed, reported as first_call_ms); it counts as a sample only when
//   it alone took >= max_time / 2 (a slow case, where first-call effects are negligible). Then
//   samples are taken until at least `repeat` samples AND min_time seconds in total, but no new
//   sample starts once the total would pass max_time (so slow cases get 1..few samples).
//   fwd: inputs do not require grad (no autograd graph, as in inference);
//   fwdbwd: inputs require grad; out = op(q, k, v); out.backward(grad_out); grads are dropped
//   after each sample so nothing accumulates.
#include <torch/torch.h>

#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/softmax_attention.h"

#include "flags.h"  // tools/flags.h
#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string kind = "softmax";
  int64_t n = 1024;
  std::string mode = "fwd";
  bool causal = false;
  int repeat = 5;
  double min_time = 1.0;
  double max_time = 10.0;
  int threads = 2;
  int64_t batch = 1;
  int64_t heads = 8;
  int64_t dim = 64;
  int64_t kv_heads = 0;  // 0 = heads
  int64_t window = 0;
  double softcap = 0.0;
  bool repeat_kv = false;
};

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// Current resident set in bytes (second field of /proc/self/statm, in pages).
double current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long long size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return static_cast<double>(resident_pages) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

// High-water resident set in bytes (Linux reports ru_maxrss in KiB).
double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)> make_op(
    const Options& o) {
  const bool causal = o.causal;
  const int64_t window = o.window;
  const double softcap = o.softcap;
  if (o.kind == "softmax" && o.repeat_kv)
    return [causal, window](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      const int64_t group = q.size(1) / k.size(1), L = q.size(2), S = k.size(2);
      c10::optional<at::Tensor> band;
      if (window > 0)
        band = (at::arange(L, at::kLong).unsqueeze(1) + (S - L) - at::arange(S, at::kLong))
                   .lt(window);
      return attnkit::ops::softmax_attention(q, k.repeat_interleave(group, 1),
                                             v.repeat_interleave(group, 1), band, causal);
    };
  if (o.kind == "softmax")
    return [causal, window, softcap](const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v) {
      return attnkit::ops::softmax_attention(q, k, v, c10::nullopt, causal, c10::nullopt, {},
                                             attnkit::ops::SoftmaxExtras{window, softcap});
    };
  if (o.kind == "linear")
    return [causal](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return attnkit::ops::linear_attention(q, k, v, "elu", causal);
    };
  return [causal](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return attnkit::ops::cosformer_attention(q, k, v, causal);
  };
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t m = xs.size() / 2;
  return xs.size() % 2 ? xs[m] : 0.5 * (xs[m - 1] + xs[m]);
}

int run(const Options& o) {
  at::set_num_threads(o.threads);
  torch::manual_seed(0);
  const bool backward = o.mode == "fwdbwd";
  auto shape = std::vector<int64_t>{o.batch, o.heads, o.n, o.dim};
  auto options = torch::TensorOptions().dtype(torch::kFloat32).requires_grad(backward);
  auto kv_shape = std::vector<int64_t>{o.batch, o.kv_heads > 0 ? o.kv_heads : o.heads, o.n, o.dim};
  auto q = torch::randn(shape, options);
  auto k = torch::randn(kv_shape, options);
  auto v = torch::randn(kv_shape, options);
  at::Tensor grad_out = backward ? torch::randn(shape) : at::Tensor();
  const auto op = make_op(o);

  auto one_call = [&]() -> double {
    const auto start = std::chrono::steady_clock::now();
    {
      auto out = op(q, k, v);
      if (backward) {
        out.backward(grad_out);
        for (auto* t : {&q, &k, &v}) t->mutable_grad() = at::Tensor();
      }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  const double baseline = current_rss_bytes();
  std::vector<double> samples;
  const double first = one_call();
  double total = 0.0;
  if (first >= o.max_time / 2) {
    samples.push_back(first);
    total = first;
  }
  while (samples.empty() ||
         ((static_cast<int>(samples.size()) < o.repeat || total < o.min_time) &&
          total + samples.back() <= o.max_time)) {
    samples.push_back(one_call());
    total += samples.back();
  }
  const double peak = peak_rss_bytes();

  nlohmann::json result = {
      {"impl", "attnkit"},
      {"kind", o.kind},
      {"n", o.n},
      {"mode", o.mode},
      {"causal", o.causal},
      {"batch", o.batch},
      {"heads", o.heads},
      {"dim", o.dim},
      {"kv_heads", o.kv_heads > 0 ? o.kv_heads : o.heads},
      {"window", o.window},
      {"softcap", o.softcap},
      {"repeat_kv", o.repeat_kv},
      {"threads", at::get_num_threads()},
      {"runs", samples.size()},
      {"first_call_ms", first * 1e3},
      {"median_ms", median(samples) * 1e3},
      {"best_ms", *std::min_element(samples.begin(), samples.end()) * 1e3},
      {"baseline_rss_mib", mib(baseline)},
      {"peak_rss_mib", mib(peak)},
      {"extra_peak_mib", mib(std::max(0.0, peak - baseline))},
  };
  std::cout << result.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Time one attnkit attention case; prints one JSON line."};
  app.add_option("--kind", o.kind, "softmax, linear (elu features) or cosformer")
      ->check(CLI::IsMember({"softmax", "linear", "cosformer"}));
  app.add_option("--n", o.n, "sequence length")->check(attnkit::cli::at_least(1));
  app.add_option("--mode", o.mode, "fwd or fwdbwd (forward + backward)")
      ->check(CLI::IsMember({"fwd", "fwdbwd"}));
  app.add_flag("--causal", o.causal, "causal attention");
  app.add_option("--repeat", o.repeat, "samples to take at least (time limits permitting)")
      ->check(attnkit::cli::at_least(1));
  app.add_option("--min-time", o.min_time, "seconds of samples to take at least");
  app.add_option("--max-time", o.max_time, "start no sample that would pass this many seconds");
  app.add_option("--threads", o.threads, "intra-op threads")->check(attnkit::cli::at_least(1));
  app.add_option("--batch", o.batch, "batch size")->check(attnkit::cli::at_least(1));
  app.add_option("--heads", o.heads, "heads")->check(attnkit::cli::at_least(1));
  app.add_option("--dim", o.dim, "head dimension")->check(attnkit::cli::at_least(1));
  app.add_option("--kv-heads", o.kv_heads, "softmax: key/value heads dividing --heads (0 = heads)")
      ->check(attnkit::cli::at_least(0));
  app.add_option("--window", o.window, "softmax: causal sliding window (0 = none)")
      ->check(attnkit::cli::at_least(0));
  app.add_option("--softcap", o.softcap, "softmax: logit soft-cap (0 = none)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--repeat-kv", o.repeat_kv,
               "softmax: the old path, k/v repeated to the query heads and the window as a mask");
  if (const auto status = attnkit::cli::parse_flags(app, argc, argv, "attnkit_bench_attention")) return *status;
  if (o.repeat_kv && o.softcap > 0) {
    std::cerr << "attnkit_bench_attention: --softcap times the kernel's soft-cap; it does not go "
                 "with --repeat-kv\n";
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    return attnkit::cli::report_failure("attnkit_bench_attention", e);
  }
}
