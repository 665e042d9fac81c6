#pragma once
// Strict number parsing of a whole string, shared by every place that reads numbers from text
// (config values, command-line options, environment variables, file metadata). No LibTorch.
//
// Strict means the whole text is the number: no leading or trailing spaces, no '+', no junk
// after the digits, no overflow. Doubles must be finite (no nan or inf) and in decimal notation
// ("1e-3", "0.5", "3").
#include <cstdint>
#include <optional>
#include <string_view>

namespace attnkit {

// The number `text` spells, or nullopt for anything else.
std::optional<int64_t> try_parse_int(std::string_view text);
// Digits only (no sign).
std::optional<uint64_t> try_parse_unsigned(std::string_view text);
// A finite double.
std::optional<double> try_parse_double(std::string_view text);

// As above, but throw attnkit::Error naming `what` and quoting the text (its first 60 characters,
// control characters escaped, so the message stays one line):
//   "WHAT: 'TEXT' is not an integer" (or "is not a number", "is not a finite number",
//   "is out of range ...")
int64_t parse_int(std::string_view text, std::string_view what);
double parse_double(std::string_view text, std::string_view what);

}  // namespace attnkit
