// attnkit bleu: sacreBLEU's corpus BLEU and chrF (include/attnkit/metrics/metrics.h) of a file of
// hypotheses against one or more reference files, one detokenised segment per line.
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/text/unicode.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/metrics/metrics.h"
#include "attnkit/metrics/stats.h"
#include "command.h"

#include <fmt/format.h>

#include <memory>

namespace attnkit::cli {
namespace {

struct BleuArguments {
  std::string hypotheses;
  std::vector<std::string> references;
  std::string baseline;  // --paired-bs: the baseline's hypotheses
  metrics::PairedBootstrapOptions bootstrap;
  std::string json;
};

// The lines of a UTF-8 file ("\n" or "\r\n"; a last line without "\n" counts, the empty string
// after a final "\n" does not). Error "FILE:LINE: invalid UTF-8" otherwise.
std::vector<std::string> read_lines(const std::string& path) {
  const std::string content = read_file(path);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < content.size()) {
    size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    std::string line = content.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (text::unicode::find_invalid_utf8(line) != std::string::npos)
      throw Error(fmt::format("{}:{}: invalid UTF-8", path, lines.size() + 1));
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

int run_bleu(const BleuArguments& args) {
  const auto hypotheses = read_lines(args.hypotheses);
  std::vector<std::vector<std::string>> references(hypotheses.size());
  for (const auto& path : args.references) {
    const auto lines = read_lines(path);
    if (lines.size() != hypotheses.size())
      throw Error(fmt::format("{} has {} lines but {} has {}", path, lines.size(), args.hypotheses,
                              hypotheses.size()));
    for (size_t i = 0; i < lines.size(); ++i) references[i].push_back(lines[i]);
  }
  fmt::print("{}\n{}\n", metrics::format_sacrebleu(metrics::sacrebleu_corpus_bleu(hypotheses, references)),
             metrics::format_chrf(metrics::sacrebleu_corpus_chrf(hypotheses, references)));
  if (args.baseline.empty()) return 0;
  const auto baseline = read_lines(args.baseline);
  if (baseline.size() != hypotheses.size())
    throw Error(fmt::format("{} has {} lines but {} has {}", args.baseline, baseline.size(), args.hypotheses,
                            hypotheses.size()));
  const auto r = metrics::paired_bootstrap(metrics::sacrebleu_item_statistics(hypotheses, references),
                                           metrics::sacrebleu_item_statistics(baseline, references), args.bootstrap);
  auto line = [](const char* name, const metrics::BootstrapEstimate& e) {
    fmt::print("  {:<18} {:6.2f} (mean {:.2f} ± {:.2f}, 95% [{:.2f}, {:.2f}])\n", name, 100 * e.score, 100 * e.mean,
               100 * e.half_width, 100 * e.interval.low, 100 * e.interval.high);
  };
  fmt::print("paired bootstrap, BLEU ({} resamples, seed {}):\n", r.samples, r.seed);
  line("system", r.a);
  line("baseline", r.b);
  line("system - baseline", r.difference);
  fmt::print("  p = {:.4f}: {}\n", r.p_value, metrics::verdict(r, "system", "baseline").text);
  if (!args.json.empty()) io::write_file_atomically(args.json, metrics::result_json(r, "system", "baseline").dump(2) + "\n");
  return 0;
}

}  // namespace

void register_bleu_command(CLI::App& app, GlobalOptions& global) {
  auto args = std::make_shared<BleuArguments>();
  auto* cmd = app.add_subcommand(
      "bleu", "sacreBLEU's corpus BLEU (13a, exp smoothing) and chrF2 of hypotheses against references");
  cmd->footer(
      "One detokenised segment per line; line i of every --ref file is a reference of line i of\n"
      "--hyp. Prints sacreBLEU's score strings, e.g.\n"
      "  BLEU = 34.12 67.1/41.0/27.3/18.2 (BP = 0.987 ratio = 0.987 hyp_len = 1234 ref_len = 1250)\n"
      "  chrF2 = 56.78\n"
      "With --paired-bs BASELINE: sacreBLEU's paired bootstrap (same resamples, order statistics\n"
      "n/40 and n-1-n/40, its p-value) for BLEU; 'level' unless the difference's interval excludes 0.");
  cmd->add_option("--hyp", args->hypotheses, "hypotheses, one per line")->required();
  cmd->add_option("--ref", args->references, "references, one per line (repeat for several)")->required();
  auto* paired = cmd->add_option("--paired-bs", args->baseline,
                                 "a baseline's hypotheses: sacreBLEU's paired bootstrap of --hyp against it");
  cmd->add_option("--bs-samples", args->bootstrap.samples, "bootstrap resamples")->capture_default_str()->needs(paired);
  cmd->add_option("--bs-seed", args->bootstrap.seed, "bootstrap seed (sacreBLEU's default)")->capture_default_str()->needs(paired);
  cmd->add_option("--json", args->json, "write the paired bootstrap's result here (metrics/stats.h)")->needs(paired);
  cmd->callback([args, &global] { global.action = [args] { return run_bleu(*args); }; });
}

}  // namespace attnkit::cli
