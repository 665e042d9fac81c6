// Regression tests for inputs found by fuzzing the training inputs (fuzz/, docs/robustness.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "attnkit/train/run_config.h"
#include "support/test_files.h"

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;

// toml++ 3.3 reached __builtin_unreachable (undefined behaviour; UBSan: "execution reached an
// unreachable program point") testing U+FCFF or U+00E9 for whitespace: fuzz/run_config_fuzz's
// first finding (fuzz/regressions/run_config/).
TEST(Hardening, RunConfigNonAsciiOutsideStrings) {
  const auto dir = scratch_directory("train");
  for (const std::string& text : {std::string("\xef\xb3\xbf"), std::string("[run]\n\xc3\xa9 = 1\n"),
                                  std::string("[run]\ndir = \"\"\"a\\\n  \xc3\xa9\"\"\"\n")}) {
    const std::string path = write_bytes(dir / "run.toml", text);
    RunConfig config;
    const std::string message = error_of([&] { apply_toml_file(config, path); });
    EXPECT_EQ(message.rfind(path + ":", 0), 0u) << message;
    EXPECT_NE(message.find("non-ASCII character"), std::string::npos) << message;
  }
  // Non-ASCII inside strings and comments is fine.
  const std::string path = write_bytes(dir / "ok.toml", "# caf\xc3\xa9 \xef\xb3\xbf\n[run]\ndir = \"runs/caf\xc3\xa9 \xef\xb3\xbf\"\n");
  RunConfig config;
  EXPECT_EQ(error_of([&] { apply_toml_file(config, path); }), "");
  EXPECT_EQ(config.directory, "runs/caf\xc3\xa9 \xef\xb3\xbf");
}

// A quote inside a malformed bare value does not open a string for toml++, which then tests the
// characters after it, non-ASCII ones included, as value terminators (undefined behaviour again):
// fuzz/regressions/run_config/crash-65b2....
TEST(Hardening, RunConfigQuoteInsideABareValueOpensNoString) {
  const auto dir = scratch_directory("train");
  const std::string path =
      write_bytes(dir / "run.toml", "[run]\nsteps = 3odrop''''xx\xef\xb9\xbf\n");
  RunConfig config;
  const std::string message = error_of([&] { apply_toml_file(config, path); });
  EXPECT_EQ(message.rfind(path + ":2: a non-ASCII character outside a string", 0), 0u) << message;
  // The same with NULs before the quote, as in the fuzzer's input: a NUL is no line start.
  const std::string with_nul("[run]\nsteps = 3od\0\0'''x\xef\xb9\xbf\n", 27);
  const std::string nul = write_bytes(dir / "nul.toml", with_nul);
  const std::string nul_message = error_of([&] { apply_toml_file(config, nul); });
  EXPECT_EQ(nul_message.rfind(nul + ":2: a non-ASCII character outside a string", 0), 0u)
      << nul_message;
  // A quote after '{' inside a malformed bare value (the fuzzer's third input of this kind).
  const std::string brace = write_bytes(dir / "brace.toml", "[run]\nlr = 5e<<z{'''d{\xef\xbb\xbb\x10:\"\\ 1\n");
  const std::string brace_message = error_of([&] { apply_toml_file(config, brace); });
  EXPECT_EQ(brace_message.rfind(brace + ":2: ", 0), 0u) << brace_message;
  EXPECT_EQ(brace_message.find('\n'), std::string::npos) << brace_message;
  // A string that starts where TOML starts one keeps its non-ASCII characters.
  const std::string ok = write_bytes(dir / "ok.toml", "[run]\ndir = 'caf\xc3\xa9'\n");
  RunConfig good;
  EXPECT_EQ(error_of([&] { apply_toml_file(good, ok); }), "");
  EXPECT_EQ(good.directory, "caf\xc3\xa9");
}

// toml++'s parse error quotes the input: "expected 'true', saw 'tr<newline>'" made a message of two
// lines (fuzz/run_config_fuzz, fuzz/regressions/run_config/crash-3c14...).
TEST(Hardening, RunConfigParseErrorQuotingALineBreakIsOneLine) {
  const auto dir = scratch_directory("train");
  const std::string path = write_bytes(dir / "run.toml", "[model]\nhidden =tr\n\n\n");
  RunConfig config;
  const std::string message = error_of([&] { apply_toml_file(config, path); });
  EXPECT_EQ(message.rfind(path + ":2: ", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("\\n"), std::string::npos) << message;  // the line break, escaped
}

}  // namespace
}  // namespace attnkit::train
