#pragma once
// attnkit::Error: the one exception type for bad input. Its message is one line that names the
// argument, what was expected and what was given, so the CLI can print it as it is.
#include <stdexcept>
#include <string>
#include <string_view>

namespace attnkit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// `text` (e.g. a third-party parser's description, which may quote the input) with every control
// character written as an escape (\n, \r, \t, \xNN), so that it fits in an Error's one line.
std::string one_line(std::string_view text);

}  // namespace attnkit
