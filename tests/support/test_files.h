#pragma once
// Small helpers shared by tests that write files: a per-test scratch directory, whole-file
// reads and writes, and the message of the attnkit::Error an action throws.
#include "attnkit/error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace attnkit::testing {

// The running test's own scratch directory under the build tree, emptied first (tests never
// share one, so ctest -j is safe).
inline std::filesystem::path scratch_directory(const std::string& area) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(ATTNKIT_BINARY_DIR) / area /
                              (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// Writes `content` to `path` and returns the path as a string.
inline std::string write_bytes(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  return path.string();
}

// The message of the attnkit::Error that `action` throws ("" when it throws none).
template <typename Action>
std::string error_of(Action action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace attnkit::testing
