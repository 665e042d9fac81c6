// `attnkit attention`: run one attention variant on random input; print output statistics and time.
#include "attnkit/ops/variants.h"
#include "attnkit/runtime.h"
#include "command.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>

namespace attnkit::cli {

void register_attention_command(CLI::App& app, GlobalOptions& global) {
  struct Options {
    std::string kind = "softmax";
    bool causal = false;
    ops::VariantShape shape;
    int repeat = 3;
    bool float64 = false;
  };
  auto opts = std::make_shared<Options>();
  std::string kinds;
  for (const auto& v : ops::attention_variants()) kinds += (kinds.empty() ? "" : ", ") + v.kind;
  auto* cmd = app.add_subcommand("attention", "run one attention variant on random input");
  cmd->add_option("--kind", opts->kind,
                  "variant: " + kinds +
                      " (linear:favor:M:SEED sets favor's features and seed; the old names linear, "
                      "linear-relu, favor and synthesizer-mixture are accepted as aliases)")
      ->capture_default_str();
  cmd->add_flag("--causal", opts->causal, "causal (autoregressive) attention");
  cmd->add_option("--n", opts->shape.queries, "sequence length")->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--heads", opts->shape.heads, "heads")->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--dim", opts->shape.key_dim, "per-head dimension")->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--batch", opts->shape.batch, "batch size")->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--repeat", opts->repeat, "timed repetitions (best is reported)")
      ->capture_default_str()->check(at_least(1));
  cmd->add_flag("--float64", opts->float64, "run in float64 instead of float32");
  cmd->callback([opts, &global] {
    global.action = [opts, &global] {
      at::NoGradGuard no_grad;
      ops::VariantShape shape = opts->shape;
      shape.keys = shape.queries;
      shape.value_dim = shape.key_dim;
      auto c = ops::make_variant_case(opts->kind, shape, opts->causal, global.seed,
                                      opts->float64 ? at::kDouble : at::kFloat);
      at::Tensor out = c.run();  // warm-up
      double best = 1e300;
      for (int r = 0; r < opts->repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        out = c.run();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      const auto& s = shape;
      fmt::print("kind       {}{}\n", c.kind, c.causal ? " (causal)" : "");
      fmt::print("input      q, k, v [{}, {}, {}, {}] {}\n", s.batch, s.heads, s.queries, s.key_dim,
                 opts->float64 ? "float64" : "float32");
      fmt::print("output     [{}, {}, {}, {}]\n", out.size(0), out.size(1), out.size(2), out.size(3));
      fmt::print("mean       {:.6g}\n", out.mean().item<double>());
      fmt::print("std        {:.6g}\n", out.std().item<double>());
      fmt::print("min / max  {:.6g} / {:.6g}\n", out.min().item<double>(), out.max().item<double>());
      fmt::print("finite     {}\n", out.isfinite().all().item<bool>() ? "yes" : "NO");
      fmt::print("time       {:.3f} ms (best of {}, {} threads, {} kernels)\n", best * 1e3,
                 opts->repeat, at::get_num_threads(), kernel_instruction_set());
      return 0;
    };
  });
}

}  // namespace attnkit::cli
