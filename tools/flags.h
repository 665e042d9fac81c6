#pragma once
// Flag parsing shared by attnkit's executables (the `attnkit` CLI and the benchmarks under bench/):
// --help prints the usage on stdout and exits 0 before anything runs or is written; a bad flag or
// value is ONE line on stderr, "PROGRAM: error: WHAT (see PROGRAM --help)", and a non-zero status
// (CLI11's code for the kind of mistake). Header-only; needs CLI11 and attnkit/parse.h (base).
#include <CLI/CLI.hpp>

#include "attnkit/parse.h"

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

namespace attnkit::cli {

// "--n: must be an integer >= 1 (got 0)" instead of CLI11's PositiveNumber text with a 300-digit bound.
inline CLI::Validator at_least(long long lower) {
  return CLI::Validator(
      [lower](std::string& value) -> std::string {
        if (const auto number = try_parse_int(value); number && *number >= lower) return {};
        return "must be an integer >= " + std::to_string(lower) + " (got " + value + ")";
      },
      ">=" + std::to_string(lower));
}

// `text` with each line break (and the spaces around it) turned into "; ", trailing ones dropped.
inline std::string on_one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      out += text[i];
      continue;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "; ";
    while (i + 1 < text.size() && (text[i + 1] == ' ' || text[i + 1] == '\n')) ++i;
  }
  return out;
}

// Makes `app` report parse errors on one line, naming the (sub)command whose --help explains it:
// "attnkit: error: The following argument was not expected: --x (see attnkit train --help)".
inline void one_line_parse_errors(CLI::App& app, const std::string& program) {
  app.failure_message([program](const CLI::App* failed, const CLI::Error& e) {
    std::string command = program;
    for (const CLI::App* sub = failed; sub != nullptr;) {
      const auto chosen = sub->get_subcommands();
      sub = chosen.empty() ? nullptr : chosen.back();
      if (sub != nullptr) command += " " + sub->get_name();
    }
    return program + ": error: " + on_one_line(e.what()) + " (see " + command + " --help)\n";
  });
}

// Parses the command line with one-line errors. Returns the status to exit with now (0 after
// --help or --version, non-zero after a bad flag or value), or nothing when the program should run.
inline std::optional<int> parse_flags(CLI::App& app, int argc, char** argv, const std::string& program) {
  one_line_parse_errors(app, program);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

// For a benchmark's catch block: "PROGRAM: error: WHAT" on stderr, the first line of `what` only
// (LibTorch appends its C++ backtrace on the following lines); returns the exit status, 1.
inline int report_failure(const std::string& program, const std::exception& e) {
  std::string what = e.what();
  what = what.substr(0, what.find('\n'));
  std::fprintf(stderr, "%s: error: %s\n", program.c_str(), what.c_str());
  return 1;
}

}  // namespace attnkit::cli
