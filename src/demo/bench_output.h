#pragma once
// The demo stages run benchmark executables (bench/*.cpp) and Python peers that end their output
// with one flat JSON result line; this reads it back.
#include "attnkit/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string>

namespace attnkit::demo {

// The last JSON object of `out` (a flat one: from its last '{'), which must hold `field`; else
// attnkit::Error "PROGRAM: no JSON result line in its output".
inline nlohmann::json bench_result_line(const std::string& out, const std::string& program, const char* field) {
  const auto last = out.find_last_of('{');
  auto j = nlohmann::json::parse(last == std::string::npos ? out : out.substr(last), nullptr, false);
  if (!j.is_object() || !j.contains(field)) throw Error(fmt::format("{}: no JSON result line in its output", program));
  return j;
}

}  // namespace attnkit::demo
