// `attnkit report RUN_DIR`: the demo's HTML page rebuilt from the stages' section.json files.
#include "attnkit/report/html.h"
#include "command.h"

#include <fmt/format.h>

#include <filesystem>

namespace attnkit::cli {

void register_report_command(CLI::App& app, GlobalOptions& global) {
  struct Options {
    std::string run_dir, out;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("report", "build the self-contained HTML report of a demo run directory");
  cmd->add_option("run_dir", o->run_dir, "directory written by `attnkit demo --out DIR`")->required();
  cmd->add_option("--out", o->out, "HTML file to write (default: RUN_DIR/report.html)");
  cmd->callback([o, &global] {
    global.action = [o] {
      const auto page = report::read_page(o->run_dir);
      const std::filesystem::path out = o->out.empty() ? std::filesystem::path(o->run_dir) / "report.html" : std::filesystem::path(o->out);
      report::write_html(page, out);
      fmt::print("report: {} ({} sections)\n", out.string(), page.sections.size());
      return 0;
    };
  });
}

}  // namespace attnkit::cli
