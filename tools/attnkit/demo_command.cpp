// `attnkit demo`: every attention variant on one random input, checked against its float64 oracle.
#include "attnkit/ops/variants.h"
#include "command.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>

namespace attnkit::cli {

void register_demo_command(CLI::App& app, GlobalOptions& global) {
  auto shape = std::make_shared<ops::VariantShape>();
  shape->batch = 2;
  shape->heads = 4;
  shape->queries = 256;
  shape->key_dim = 64;
  auto* cmd = app.add_subcommand(
      "demo", "run every attention variant on one random input and compare with float64 oracles");
  cmd->add_option("--n", shape->queries, "sequence length")->capture_default_str()
      ->check(at_least(1));
  cmd->callback([shape, &global] {
    global.action = [shape, &global] {
      at::NoGradGuard no_grad;
      shape->keys = shape->queries;
      shape->value_dim = shape->key_dim;
      fmt::print("attnkit demo: q, k, v [{}, {}, {}, {}] float32, {} threads\n\n", shape->batch,
                 shape->heads, shape->queries, shape->key_dim, at::get_num_threads());
      fmt::print("{:<36} {:<7} {:>14} {:>12}\n", "variant", "causal", "max |err|", "time (ms)");
      fmt::print("{}\n", std::string(72, '-'));
      int failures = 0;
      for (const auto& info : ops::attention_variants()) {
        for (bool causal : {false, true}) {
          auto c = ops::make_variant_case(info.kind, *shape, causal, global.seed, at::kFloat);
          (void)c.run();  // warm-up
          const auto t0 = std::chrono::steady_clock::now();
          auto out = c.run();
          const double ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          const double err = (out.to(at::kDouble) - c.run_reference()).abs().max().item<double>();
          const bool ok = std::isfinite(err) && err < 1e-3;
          failures += ok ? 0 : 1;
          fmt::print("{:<36} {:<7} {:>14.3e} {:>12.3f}{}\n", info.kind, causal ? "yes" : "no", err,
                     ms, ok ? "" : "   <-- exceeds 1e-3");
        }
      }
      fmt::print("\nmax |err| is against the naive float64 formula (explicit {}x{} weights).\n",
                 shape->queries, shape->queries);
      return failures == 0 ? 0 : 1;
    };
  });
}

}  // namespace attnkit::cli
