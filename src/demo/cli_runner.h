#pragma once
// The demo stages that run the attnkit command line as a user would (translation, pretrained):
// run_attnkit(options, args) runs DIR/attnkit ARGS... and returns its result, or throws
// attnkit::Error "attnkit COMMAND failed: FIRST LINE OF ITS ERROR".
#include "attnkit/demo/demo.h"
#include "attnkit/error.h"
#include "attnkit/process.h"

#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

namespace attnkit::demo {

inline ProcessResult run_attnkit(const DemoOptions& options, std::vector<std::string> args) {
  const std::filesystem::path attnkit = options.executable_dir / "attnkit";
  if (!std::filesystem::exists(attnkit)) throw Error(fmt::format("{} is missing", attnkit.string()));
  args.insert(args.begin(), attnkit.string());
  const ProcessResult r = run_process(args);
  if (!r.ok()) {
    // The command's name: its words up to the first option after the global ones.
    std::string command;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i].rfind("--", 0) == 0) {
        if (!command.empty()) break;
        if (args[i] != "--quiet") ++i;  // a global option's value
        continue;
      }
      command += " " + args[i];
    }
    throw Error(fmt::format("attnkit{} failed: {}", command, first_line(r.err.empty() ? r.out : r.err)));
  }
  return r;
}

}  // namespace attnkit::demo
