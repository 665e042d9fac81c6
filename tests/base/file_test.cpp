// attnkit/file.h: whole files byte for byte, errors that name the file and the reason, lines.
#include "attnkit/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "support/test_files.h"

namespace attnkit {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

TEST(ReadFile, ReturnsEveryByte) {
  const fs::path dir = testing::scratch_directory("base_tests");
  std::string bytes = "line one\r\nline two\n";
  bytes += std::string("\0\xff\x01", 3);
  bytes += std::string(200000, 'z');  // more than one read
  testing::write_bytes(dir / "data.bin", bytes);
  EXPECT_EQ(read_file(dir / "data.bin"), bytes);
  testing::write_bytes(dir / "empty", "");
  EXPECT_EQ(read_file(dir / "empty"), "");
}

TEST(ReadFile, MissingFileNamesPathAndReason) {
  const fs::path dir = testing::scratch_directory("base_tests");
  const std::string path = (dir / "missing.txt").string();
  EXPECT_EQ(error_of([&] { read_file(path); }), path + ": cannot open (" + std::strerror(ENOENT) + ")");
  EXPECT_EQ(error_of([&] { read_file(path, "--data"); }), "--data " + path + ": cannot open (" + std::strerror(ENOENT) + ")");
}

TEST(ReadFile, DirectoryCannotBeRead) {
  const fs::path dir = testing::scratch_directory("base_tests");
  EXPECT_EQ(error_of([&] { read_file(dir); }), dir.string() + ": cannot read (" + std::strerror(EISDIR) + ")");
}

TEST(ReadFile, UnreadableFileSaysWhy) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file";
  const fs::path dir = testing::scratch_directory("base_tests");
  const std::string path = testing::write_bytes(dir / "secret", "x");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  EXPECT_EQ(error_of([&] { read_file(path); }), path + ": cannot open (" + std::strerror(EACCES) + ")");
}

std::vector<std::pair<std::string, size_t>> lines_of(std::string_view content) {
  std::vector<std::pair<std::string, size_t>> lines;
  for_each_line(content, [&](std::string_view line, size_t number) { lines.emplace_back(line, number); });
  return lines;
}

TEST(ForEachLine, SplitsOnNewlinesAndDropsCarriageReturns) {
  using Lines = std::vector<std::pair<std::string, size_t>>;
  EXPECT_EQ(lines_of(""), Lines{});
  EXPECT_EQ(lines_of("a"), (Lines{{"a", 1}}));
  EXPECT_EQ(lines_of("a\n"), (Lines{{"a", 1}}));
  EXPECT_EQ(lines_of("a\r\nb\n\nc"), (Lines{{"a", 1}, {"b", 2}, {"", 3}, {"c", 4}}));
  EXPECT_EQ(lines_of("\n"), (Lines{{"", 1}}));
  EXPECT_EQ(lines_of("x\ry\n"), (Lines{{"x\ry", 1}}));  // only a carriage return before the newline goes
}

}  // namespace
}  // namespace attnkit
