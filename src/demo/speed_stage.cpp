// Stage "speed": time and peak memory of attnkit's fused softmax / linear / cosFormer attention
// against the same formulas in eager PyTorch (python3-torch), one fresh process per case, with
// bench/attention_bench.cpp and bench/peers/attention_peer.py (the `make bench` pair, same
// sampling rule and the same JSON fields; see their headers).
#include "attnkit/demo/demo.h"
#include "bench_output.h"
#include "attnkit/error.h"
#include "attnkit/process.h"
#include "attnkit/report/plot.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>

namespace attnkit::demo {
namespace {

namespace fs = std::filesystem;

struct Measured {
  double median_ms = 0, extra_peak_mib = 0;
};

Measured run_case(const std::vector<std::string>& argv) {
  const ProcessResult r = run_process(argv);
  if (!r.ok())
    throw Error(fmt::format("{} failed: {}", fs::path(argv[0] == "/usr/bin/python3" ? argv[1] : argv[0]).filename().string(),
                            first_line(r.err.empty() ? r.out : r.err)));
  const nlohmann::json j = bench_result_line(r.out, argv[0], "median_ms");
  if (!j.contains("extra_peak_mib")) throw Error(fmt::format("{}: no JSON result line in its output", argv[0]));
  return {j["median_ms"].get<double>(), j["extra_peak_mib"].get<double>()};
}

}  // namespace

report::Section speed_stage(const StageContext& context) {
  const auto& o = context.options;
  const fs::path bench = o.executable_dir / "attnkit_bench_attention";
  const fs::path peer = o.source_dir / "bench" / "peers" / "attention_peer.py";
  if (!fs::exists(bench))
    throw Error(fmt::format("{} is missing (it is built with attnkit: cmake --build BUILD)", bench.string()));
  if (!fs::exists(peer)) throw Error(fmt::format("{} is missing (run the demo from the source tree)", peer.string()));
  const std::vector<int64_t> lengths = o.quick ? std::vector<int64_t>{256, 1024}
                                               : std::vector<int64_t>{256, 512, 1024, 2048, 4096};
  const std::vector<std::string> kinds = {"softmax", "linear", "cosformer"};
  const std::string threads = "2", min_time = o.quick ? "0.1" : "0.5", max_time = o.quick ? "1" : "4";
  auto args = [&](const std::string& kind, int64_t n) {
    return std::vector<std::string>{"--kind", kind, "--n", std::to_string(n), "--mode", "fwd", "--repeat", "3",
                                    "--min-time", min_time, "--max-time", max_time, "--threads", threads,
                                    "--batch", "1", "--heads", "8", "--dim", "64"};
  };
  std::map<std::string, std::vector<Measured>> ours, eager;
  report::Table table{"median time of one forward call and extra peak memory (RSS above the inputs), one process per case",
                      {"kind", "n", "attnkit (ms)", "eager PyTorch (ms)", "speed-up", "attnkit extra MiB", "eager extra MiB"},
                      {}};
  const size_t total = kinds.size() * lengths.size();
  size_t done = 0;
  for (const auto& kind : kinds) {
    for (int64_t n : lengths) {
      auto a = args(kind, n);
      std::vector<std::string> mine = {bench.string()}, theirs = {"/usr/bin/python3", peer.string()};
      mine.insert(mine.end(), a.begin(), a.end());
      theirs.insert(theirs.end(), a.begin(), a.end());
      const Measured m = run_case(mine), e = run_case(theirs);
      ours[kind].push_back(m);
      eager[kind].push_back(e);
      table.rows.push_back({kind, std::to_string(n), fmt::format("{:.2f}", m.median_ms), fmt::format("{:.2f}", e.median_ms),
                            fmt::format("{:.2f}x", e.median_ms / m.median_ms), fmt::format("{:.1f}", m.extra_peak_mib),
                            fmt::format("{:.1f}", e.extra_peak_mib)});
      ++done;
      if (!o.quiet)
        fmt::print(stderr, "[{}/{}] {} n={}: attnkit {:.2f} ms, eager {:.2f} ms\n", done, total, kind, n,
                   m.median_ms, e.median_ms);
    }
  }
  report::Section section;
  std::vector<double> xs(lengths.begin(), lengths.end());
  report::LinePlot time_plot{"Forward time vs sequence length (batch 1, 8 heads, d = 64, 2 threads)",
                             "sequence length n", "median time (ms)", true};
  time_plot.log_x = true;
  report::LinePlot memory_plot{"Extra peak memory vs sequence length", "sequence length n",
                               "extra peak RSS (MiB)", true};
  memory_plot.log_x = true;
  for (const auto& kind : kinds) {
    std::vector<double> t_ours, t_eager, m_ours, m_eager;
    for (size_t i = 0; i < lengths.size(); ++i) {
      t_ours.push_back(ours[kind][i].median_ms);
      t_eager.push_back(eager[kind][i].median_ms);
      m_ours.push_back(ours[kind][i].extra_peak_mib);
      m_eager.push_back(eager[kind][i].extra_peak_mib);
    }
    time_plot.series.push_back({"attnkit " + kind, xs, t_ours});
    time_plot.series.push_back({"eager " + kind, xs, t_eager, "linespoints", true});
    memory_plot.series.push_back({"attnkit " + kind, xs, m_ours});
    memory_plot.series.push_back({"eager " + kind, xs, m_eager, "linespoints", true});
    const auto& m = ours[kind].back();
    const auto& e = eager[kind].back();
    section.headlines.push_back({fmt::format("{} at n = {}: attnkit vs eager PyTorch (target: faster)", kind, lengths.back()),
                                 fmt::format("{:.2f}x", e.median_ms / m.median_ms), e.median_ms > m.median_ms});
  }
  section.blocks.push_back({fmt::format(
      "attnkit's fused kernels against the same formulas written in eager PyTorch (python3-torch; "
      "bench/peers/attention_peer.py: softmax(q kT / sqrt(d)) v; elu+1 and cosFormer features with "
      "phi(q) (phi(k)T v) / (phi(q) sum phi(k))), forward only, non-causal, float32, {} threads, one "
      "fresh process per case so that the peak memory is that case's. A case takes samples for at least "
      "{} s (at most {} s) and reports the median. `make bench` runs the full comparison (backward, causal, "
      "more lengths).", threads, min_time, max_time), {}, {}});
  section.blocks.push_back({{}, {}, report::Figure{"time per forward call (log-log); dashed: eager PyTorch",
                                                   report::render_svg(time_plot)}});
  section.blocks.push_back({{}, {}, report::Figure{"extra peak memory (log-log); dashed: eager PyTorch",
                                                   report::render_svg(memory_plot)}});
  section.blocks.push_back({{}, table, {}});
  return section;
}

}  // namespace attnkit::demo
