#pragma once
// Helpers shared by the libFuzzer targets (fuzz/<name>_fuzz.cpp, docs/robustness.md).
//
// The contract every target checks: a loader given any bytes either returns or throws
// attnkit::Error whose message is one line. Any other exception, a crash, a sanitizer report, a
// hang (-timeout) or an allocation beyond -rss_limit_mb / -malloc_limit_mb is a finding.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace attnkit::fuzz {

// A per-process scratch folder (under $TMPDIR or /tmp), created on first use.
const std::string& scratch_directory();

// Writes `bytes` to scratch_directory()/name (replacing it) and returns the path.
std::string write_scratch_file(const std::string& name, std::string_view bytes);

// Runs f(); returns normally if it returns or throws attnkit::Error with a one-line message that
// names `must_mention` (the file, when not empty). Anything else aborts with a description, which
// libFuzzer records as a crash.
void expect_clean(const std::function<void()>& f, std::string_view must_mention = {});

// Splits the input at the first occurrence of `separator` (e.g. two files in one input):
// returns {before, after}; without a separator, {data, ""}.
std::pair<std::string_view, std::string_view> split_input(std::string_view data,
                                                          std::string_view separator);

}  // namespace attnkit::fuzz
