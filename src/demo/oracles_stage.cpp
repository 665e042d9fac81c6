// Stage "oracles": every attention variant on one random input against its float64 formula.
#include "attnkit/demo/demo.h"
#include "attnkit/ops/variants.h"
#include "attnkit/runtime.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace attnkit::demo {

report::Section oracles_stage(const StageContext& context) {
  at::NoGradGuard no_grad;
  ops::VariantShape shape;
  shape.batch = 2;
  shape.heads = 4;
  shape.queries = shape.keys = context.options.quick ? 128 : 256;
  shape.key_dim = shape.value_dim = 64;
  const bool print = !context.options.quiet;
  if (print) {
    fmt::print("q, k, v [{}, {}, {}, {}] float32, {} threads\n\n", shape.batch, shape.heads, shape.queries,
               shape.key_dim, at::get_num_threads());
    fmt::print("{:<36} {:<7} {:>14} {:>12}\n", "variant", "causal", "max |err|", "time (ms)");
    fmt::print("{}\n", std::string(72, '-'));
  }
  int failures = 0;
  double worst = 0;
  report::Table table{"max |error| against the float64 formula, float32 inputs",
                      {"variant", "causal", "max |err|", "time (ms)"}, {}};
  for (const auto& info : ops::attention_variants()) {
    for (bool causal : {false, true}) {
      auto c = ops::make_variant_case(info.kind, shape, causal, context.options.seed, at::kFloat);
      (void)c.run();  // warm-up
      const auto t0 = std::chrono::steady_clock::now();
      auto out = c.run();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const double err = (out.to(at::kDouble) - c.run_reference()).abs().max().item<double>();
      const bool ok = std::isfinite(err) && err < 1e-3;
      failures += ok ? 0 : 1;
      worst = std::max(worst, std::isfinite(err) ? err : INFINITY);
      table.rows.push_back({info.kind, causal ? "yes" : "no", fmt::format("{:.3e}", err), fmt::format("{:.3f}", ms)});
      if (print)
        fmt::print("{:<36} {:<7} {:>14.3e} {:>12.3f}{}\n", info.kind, causal ? "yes" : "no", err, ms,
                   ok ? "" : "   <-- exceeds 1e-3");
    }
  }
  report::Section section;
  section.headlines.push_back({"largest error of any variant against its float64 oracle (target < 1e-3)",
                               fmt::format("{:.2e}", worst), failures == 0});
  section.blocks.push_back({fmt::format(
      "q, k, v of shape [{}, {}, {}, {}] in float32; threads: {}; fused kernels: {}. Each variant runs "
      "once on random input; its output is compared with the naive formula in float64 (explicit {}x{} "
      "attention weights). The unit tests check the same against the oracle with gradients, for many "
      "shapes; this is the one-glance version.",
      shape.batch, shape.heads, shape.queries, shape.key_dim, at::get_num_threads(), kernel_instruction_set(),
      shape.queries, shape.queries), {}, {}});
  section.blocks.push_back({{}, table, {}});
  return section;
}

}  // namespace attnkit::demo
