// `attnkit demo`: every attention variant on one random input, checked against its float64 oracle.
// With --out DIR it also writes that as the report's first section (DIR/oracles/section.json),
// the run's facts (DIR/facts.json) and DIR/report.html (see include/attnkit/report/html.h).
#include "attnkit/ops/variants.h"
#include "attnkit/report/html.h"
#include "attnkit/runtime.h"
#include "attnkit/version.h"
#include "command.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

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
  auto out_dir = std::make_shared<std::string>();
  cmd->add_option("--out", *out_dir, "also write the report section, facts and DIR/report.html here");
  cmd->callback([shape, out_dir, &global] {
    global.action = [shape, out_dir, &global] {
      at::NoGradGuard no_grad;
      shape->keys = shape->queries;
      shape->value_dim = shape->key_dim;
      fmt::print("attnkit demo: q, k, v [{}, {}, {}, {}] float32, {} threads\n\n", shape->batch,
                 shape->heads, shape->queries, shape->key_dim, at::get_num_threads());
      fmt::print("{:<36} {:<7} {:>14} {:>12}\n", "variant", "causal", "max |err|", "time (ms)");
      fmt::print("{}\n", std::string(72, '-'));
      int failures = 0;
      double worst = 0;
      report::Table table{"max |error| against the float64 formula, float32 inputs",
                          {"variant", "causal", "max |err|", "time (ms)"}, {}};
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
          worst = std::max(worst, std::isfinite(err) ? err : INFINITY);
          table.rows.push_back({info.kind, causal ? "yes" : "no", fmt::format("{:.3e}", err), fmt::format("{:.3f}", ms)});
          fmt::print("{:<36} {:<7} {:>14.3e} {:>12.3f}{}\n", info.kind, causal ? "yes" : "no", err,
                     ms, ok ? "" : "   <-- exceeds 1e-3");
        }
      }
      fmt::print("\nmax |err| is against the naive float64 formula (explicit {}x{} weights).\n",
                 shape->queries, shape->queries);
      if (!out_dir->empty()) {
        report::Section section;
        section.order = 10;
        section.id = "oracles";
        section.title = "Every attention variant against its float64 oracle";
        section.headlines.push_back({"largest error of any variant against its float64 oracle (target < 1e-3)",
                                     fmt::format("{:.2e}", worst), failures == 0});
        section.blocks.push_back({fmt::format(
            "q, k, v of shape [{}, {}, {}, {}] in float32; threads: {}; fused kernels: {}. Each variant "
            "runs once on random input; its output is compared with the naive formula in float64 "
            "(explicit {}x{} attention weights).",
            shape->batch, shape->heads, shape->queries, shape->key_dim, at::get_num_threads(),
            kernel_instruction_set(), shape->queries, shape->queries), {}, {}});
        section.blocks.push_back({{}, table, {}});
        const std::filesystem::path dir(*out_dir);
        report::write_section(section, dir / "oracles");
        report::write_facts({{"attnkit", version()},
                             {"threads", std::to_string(at::get_num_threads())},
                             {"fused kernels", kernel_instruction_set()},
                             {"seed", std::to_string(global.seed)},
                             {"command", "attnkit demo --out " + *out_dir}},
                            dir);
        const auto page = report::read_page(dir);
        report::write_html(page, dir / "report.html");
        fmt::print("\nreport: {}\n", (dir / "report.html").string());
      }
      return failures == 0 ? 0 : 1;
    };
  });
}

}  // namespace attnkit::cli
