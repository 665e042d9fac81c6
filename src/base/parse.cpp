#include "attnkit/parse.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <system_error>

#include "attnkit/error.h"

namespace attnkit {
namespace {

enum class Status { kOk, kInvalid, kOutOfRange };

// from_chars over the whole text: it already rejects leading spaces and '+', overflow gives
// result_out_of_range, and junk after the number leaves ptr short of the end.
template <typename T, typename... Format>
Status whole(std::string_view text, T& value, Format... format) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, format...);
  if (text.empty() || ptr != end) return Status::kInvalid;
  if (ec == std::errc::result_out_of_range) return Status::kOutOfRange;
  return ec == std::errc() ? Status::kOk : Status::kInvalid;
}

// The text as the error quotes it: on one line and short, whatever was given.
std::string shown(std::string_view text) {
  constexpr size_t kMost = 60;
  std::string out;
  for (char c : text.substr(0, kMost)) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  if (text.size() > kMost) out += "...";
  return out;
}

}  // namespace

std::optional<int64_t> try_parse_int(std::string_view text) {
  int64_t value = 0;
  if (whole(text, value) == Status::kOk) return value;
  return std::nullopt;
}

std::optional<uint64_t> try_parse_unsigned(std::string_view text) {
  uint64_t value = 0;
  if (whole(text, value) == Status::kOk) return value;
  return std::nullopt;
}

std::optional<double> try_parse_double(std::string_view text) {
  double value = 0;
  if (whole(text, value, std::chars_format::general) == Status::kOk && std::isfinite(value)) return value;
  return std::nullopt;
}

int64_t parse_int(std::string_view text, std::string_view what) {
  int64_t value = 0;
  switch (whole(text, value)) {
    case Status::kOk:
      return value;
    case Status::kOutOfRange:
      throw Error(fmt::format("{}: '{}' is out of range (a 64-bit integer: {}..{})", what, shown(text),
                              std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    default:
      throw Error(fmt::format("{}: '{}' is not an integer", what, shown(text)));
  }
}

double parse_double(std::string_view text, std::string_view what) {
  double value = 0;
  switch (whole(text, value, std::chars_format::general)) {
    case Status::kOk:
      if (std::isfinite(value)) return value;
      // "nan", "inf": numbers to from_chars, but no setting can use them.
      throw Error(fmt::format("{}: '{}' is not a finite number", what, shown(text)));
    case Status::kOutOfRange:
      throw Error(fmt::format("{}: '{}' is out of range for a double", what, shown(text)));
    default:
      throw Error(fmt::format("{}: '{}' is not a number", what, shown(text)));
  }
}

}  // namespace attnkit
