#pragma once
// attnkit::Error: the one exception type for bad input. Its message is one line that names the
// argument, what was expected and what was given, so the CLI can print it as it is.
#include <stdexcept>
#include <string>

namespace attnkit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace attnkit
