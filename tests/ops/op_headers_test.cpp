// Every op header in include/attnkit/ops/ ends with one line naming its kernel source and its
// tests, `// Kernel: FILE .... Tests: FILE (Suite.*), ...`; this keeps those lines true: every
// file named exists and every suite is defined in the test file named before it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const auto start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

TEST(OpHeaders, LastLineNamesExistingKernelAndTests) {
  const fs::path root = ATTNKIT_SOURCE_DIR;
  const std::regex file(R"((src|tests)/[A-Za-z0-9_/]+\.(cpp|h))");
  int headers = 0;
  for (const auto& entry : fs::directory_iterator(root / "include/attnkit/ops")) {
    if (entry.path().extension() != ".h") continue;
    ++headers;
    const std::string header = entry.path().filename().string();
    const std::string line = last_line(read(entry.path()));
    SCOPED_TRACE(header + ": " + line);
    ASSERT_EQ(line.rfind("// Kernel: ", 0), 0u);
    const auto tests_at = line.find(" Tests: ");
    ASSERT_NE(tests_at, std::string::npos);
    const std::string kernel_part = line.substr(0, tests_at), tests_part = line.substr(tests_at);
    int kernels = 0;
    for (std::sregex_iterator it(kernel_part.begin(), kernel_part.end(), file), end; it != end; ++it) {
      EXPECT_TRUE(fs::exists(root / it->str())) << it->str();
      EXPECT_EQ(it->str().rfind("src/", 0), 0u) << it->str();
      ++kernels;
    }
    EXPECT_GE(kernels, 1);
    // Each suite belongs to the nearest test file named before it.
    std::string test_file;
    int suites = 0;
    const std::regex token(R"((tests/[A-Za-z0-9_/]+\.cpp)|([A-Za-z][A-Za-z0-9]*)\.\*)");
    for (std::sregex_iterator it(tests_part.begin(), tests_part.end(), token), end; it != end; ++it) {
      if ((*it)[1].matched) {
        test_file = (*it)[1].str();
        ASSERT_TRUE(fs::exists(root / test_file)) << test_file;
        continue;
      }
      ASSERT_FALSE(test_file.empty()) << "a suite before any test file";
      const std::string name = (*it)[2].str(), text = read(root / test_file);
      const bool defined = text.find("TEST(" + name + ",") != std::string::npos ||
                           text.find("TEST_P(" + name + ",") != std::string::npos ||
                           text.find("TEST_F(" + name + ",") != std::string::npos;
      EXPECT_TRUE(defined) << name << " is not a test suite of " << test_file;
      ++suites;
    }
    EXPECT_GE(suites, 1);
  }
  EXPECT_GE(headers, 10);
}

}  // namespace
