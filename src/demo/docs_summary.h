#pragma once
// The demo stages that show results which take CPU hours (lra, training, translation, pretrained):
// a bench driver wrote them to a JSON file under docs/, and the stage reads that file instead of
// repeating the experiment. read_docs_summary(section, file, made_by, driver, required):
//   - no file: adds the block "FILE is missing: MADE_BY" to `section` and returns nullopt;
//   - else the parsed JSON, if it is an object with every required key (of the kind named: any
//     value, an object or an array);
//   - else throws attnkit::Error "FILE: not a DRIVER summary".
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/report/html.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace attnkit::demo {

enum class SummaryField { kAny, kObject, kArray };

inline std::optional<nlohmann::json> read_docs_summary(
    report::Section& section, const std::filesystem::path& file, const std::string& made_by,
    const std::string& driver, std::initializer_list<std::pair<const char*, SummaryField>> required = {}) {
  if (!std::filesystem::exists(file)) {
    section.blocks.push_back({fmt::format("{} is missing: {}", file.string(), made_by), {}, {}});
    return std::nullopt;
  }
  auto j = nlohmann::json::parse(read_file(file.string()), nullptr, false);
  bool ok = j.is_object();
  for (const auto& [key, kind] : required) {
    if (!ok) break;
    ok = j.contains(key) && (kind == SummaryField::kAny || (kind == SummaryField::kObject && j[key].is_object()) ||
                             (kind == SummaryField::kArray && j[key].is_array()));
  }
  if (!ok) throw Error(fmt::format("{}: not a {} summary", file.string(), driver));
  return j;
}

// The number under `key` of a summary's object, NaN where it is missing. (j.value(key, NAN) returns
// a float, NAN being one: 0.3685 came back as 0.36849999 and showed as 36.8 where the docs, written
// from the same JSON, say 36.9.)
inline double number_or_nan(const nlohmann::json& j, const std::string& key) {
  return j.value(key, std::numeric_limits<double>::quiet_NaN());
}

}  // namespace attnkit::demo
