#pragma once
// Running another program and collecting what it printed (benchmark peers, gnuplot, browsers).
// No LibTorch.
#include <string>
#include <vector>

namespace attnkit {

struct ProcessResult {
  int exit_code = -1;  // -1 when it ended by a signal
  int signal = 0;      // the signal that ended it, else 0
  std::string out;     // everything it wrote to stdout
  std::string err;     // everything it wrote to stderr
  bool ok() const { return exit_code == 0; }
};

// Runs argv[0] (searched on PATH when it has no '/') with stdin from /dev/null and waits for it.
// Output goes through private temporary files (no pipe can fill up). Throws attnkit::Error
// "cannot run PROGRAM: REASON" when it cannot be started; a non-zero exit is not an error here.
ProcessResult run_process(const std::vector<std::string>& argv);

// The first non-empty line of `text` (at most 200 characters), for one-line error messages.
std::string first_line(const std::string& text);

}  // namespace attnkit
