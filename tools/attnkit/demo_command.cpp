// `attnkit demo`: the tour of attnkit in stages (include/attnkit/demo/demo.h), ending in one
// self-contained HTML report.
#include "attnkit/demo/demo.h"
#include "command.h"

#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>

#ifndef ATTNKIT_SOURCE_DIR
#define ATTNKIT_SOURCE_DIR "."
#endif

namespace attnkit::cli {

void register_demo_command(CLI::App& app, GlobalOptions& global) {
  auto options = std::make_shared<demo::DemoOptions>();
  auto* cmd = app.add_subcommand(
      "demo", "the tour of attnkit: runs the stages (" + demo::stage_ids() +
                  ") and writes one self-contained HTML report, DIR/report.html");
  cmd->add_option("--out", options->out, "run directory: one folder per stage, facts.json, report.html")
      ->required();
  cmd->add_flag("--quick", options->quick, "the 2-minute version (smaller models, fewer steps and lengths)");
  std::string stage_help = "run only these stages (comma-separated):";
  for (const auto& s : demo::stages()) stage_help += fmt::format(" {} = {};", s.id, s.help);
  cmd->add_option("--only", options->only, stage_help)->delimiter(',');
  cmd->add_option("--source-dir", options->source_dir,
                  "the attnkit source tree (for the Python peers under bench/peers/); default: the one "
                  "this binary was built from")
      ->capture_default_str();
  options->source_dir = ATTNKIT_SOURCE_DIR;
  cmd->callback([options, &global] {
    global.action = [options, &global] {
      options->seed = global.seed;
      options->quiet = global.quiet;
      options->command = "attnkit";
      for (size_t i = 1; i < global.argv.size(); ++i) options->command += " " + global.argv[i];
      char self[4096];
      const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
      options->executable_dir =
          len > 0 ? std::filesystem::path(std::string(self, len)).parent_path() : std::filesystem::current_path();
      // Missed targets are results (in the report and this line); only a failed stage fails the run.
      const demo::DemoOutcome outcome = demo::run_demo(*options);
      fmt::print("{}\n", outcome.summary());
      return outcome.exit_status();
    };
  });
}

}  // namespace attnkit::cli
