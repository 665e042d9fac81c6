// write_file_atomically: the new content replaces the old in one step, and every failure (a
// throwing callback, a write error, a bad target) leaves the old file as it was and no temporary
// file behind.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"

namespace attnkit::io {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Each test gets a fresh directory, removed afterwards.
class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "attnkit_atomic_file_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  // Names of the files in the directory, sorted: shows leftover temporary files.
  std::vector<std::string> directory_listing() const {
    std::vector<std::string> names;
    for (const auto& item : fs::directory_iterator(directory_))
      names.push_back(item.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  // Expects attnkit::Error whose message contains every fragment.
  template <typename F>
  void expect_error(F&& f, std::initializer_list<std::string> fragments) {
    try {
      f();
      ADD_FAILURE() << "no attnkit::Error";
    } catch (const Error& e) {
      const std::string message = e.what();
      for (const std::string& fragment : fragments)
        EXPECT_NE(message.find(fragment), std::string::npos)
            << "'" << fragment << "' not in: " << message;
    }
  }

  fs::path directory_;
};

TEST_F(AtomicFileTest, WritesANewFile) {
  write_file_atomically(path("out.bin"), std::string_view("hello\0world", 11));
  EXPECT_EQ(read_file(path("out.bin")), std::string("hello\0world", 11));
  EXPECT_EQ(directory_listing(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, WritesAnEmptyFile) {
  write_file_atomically(path("empty"), "");
  EXPECT_TRUE(fs::exists(path("empty")));
  EXPECT_EQ(fs::file_size(path("empty")), 0u);
}

TEST_F(AtomicFileTest, ReplacesAnExistingFile) {
  write_file_atomically(path("out.txt"), "old content, longer than the new one");
  write_file_atomically(path("out.txt"), [](std::FILE* file) { std::fprintf(file, "new %d", 42); });
  EXPECT_EQ(read_file(path("out.txt")), "new 42");
  EXPECT_EQ(directory_listing(), std::vector<std::string>{"out.txt"});
}

TEST_F(AtomicFileTest, ThrowingCallbackKeepsTheOldFileAndRemovesTheTemporaryFile) {
  write_file_atomically(path("checkpoint"), "old");
  try {
    write_file_atomically(path("checkpoint"), [](std::FILE* file) {
      std::fputs("partial new content", file);
      std::fflush(file);  // the temporary file really has bytes on disk
      throw std::runtime_error("interrupted");
    });
    ADD_FAILURE() << "the callback's exception was swallowed";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "interrupted");  // rethrown unchanged
  }
  EXPECT_EQ(read_file(path("checkpoint")), "old");
  EXPECT_EQ(directory_listing(), std::vector<std::string>{"checkpoint"});
}

TEST_F(AtomicFileTest, ThrowingCallbackCreatesNoFile) {
  EXPECT_THROW(write_file_atomically(path("never"), [](std::FILE*) { throw Error("bad input"); }),
               Error);
  EXPECT_TRUE(directory_listing().empty());
}

TEST_F(AtomicFileTest, WriteErrorIsReportedAndKeepsTheOldFile) {
  // Provoke a real write error: a file size limit makes write() fail with EFBIG.
  write_file_atomically(path("big"), "old");
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &original), 0);
  rlimit limited = original;
  limited.rlim_cur = 4096;
  auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);  // else the process is killed
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  const std::string content(1 << 20, 'x');
  expect_error([&] { write_file_atomically(path("big"), content); },
               {path("big") + ": cannot write temporary file", std::strerror(EFBIG)});
  ::setrlimit(RLIMIT_FSIZE, &original);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_EQ(read_file(path("big")), "old");
  EXPECT_EQ(directory_listing(), std::vector<std::string>{"big"});
}

TEST_F(AtomicFileTest, MissingDirectoryIsAnError) {
  const std::string target = path("missing/out.bin");
  expect_error([&] { write_file_atomically(target, "x"); },
               {target + ": cannot create temporary file", std::strerror(ENOENT)});
}

TEST_F(AtomicFileTest, DirectoryAsTargetIsAnErrorAndLeavesNoTemporaryFile) {
  fs::create_directory(path("target"));
  expect_error([&] { write_file_atomically(path("target"), "x"); },
               {path("target") + ": cannot rename temporary file", std::strerror(EISDIR)});
  EXPECT_EQ(directory_listing(), std::vector<std::string>{"target"});
  EXPECT_TRUE(fs::is_directory(path("target")));
}

TEST_F(AtomicFileTest, EmptyPathIsAnError) {
  expect_error([] { write_file_atomically("", "x"); }, {"path is empty"});
}

TEST_F(AtomicFileTest, KeepsThePermissionsOfTheReplacedFile) {
  write_file_atomically(path("private"), "old");
  fs::permissions(path("private"), fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomically(path("private"), "new");
  EXPECT_EQ(fs::status(path("private")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(read_file(path("private")), "new");
}

TEST_F(AtomicFileTest, NewFileGetsTheUsualPermissions) {
  const mode_t mask = ::umask(0022);
  write_file_atomically(path("public"), "x");
  ::umask(mask);
  EXPECT_EQ(fs::status(path("public")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
}

TEST_F(AtomicFileTest, RelativePathInTheCurrentDirectory) {
  // The parent directory of "relative.bin" is "", which must mean ".".
  const fs::path cwd = fs::current_path();
  fs::current_path(directory_);
  write_file_atomically("relative.bin", "relative");
  fs::current_path(cwd);
  EXPECT_EQ(read_file(path("relative.bin")), "relative");
}

TEST_F(AtomicFileTest, ConcurrentWritersLeaveOneCompleteVersion) {
  // Threads of one process need distinct temporary names; the reader sees one whole version.
  constexpr int kThreads = 8;
  constexpr size_t kSize = 64 * 1024;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string content(kSize, static_cast<char>('a' + t));
      for (int round = 0; round < 5; ++round) write_file_atomically(path("shared"), content);
    });
  }
  for (auto& thread : threads) thread.join();
  const std::string result = read_file(path("shared"));
  ASSERT_EQ(result.size(), kSize);
  EXPECT_EQ(result, std::string(kSize, result[0]));
  EXPECT_EQ(directory_listing(), std::vector<std::string>{"shared"});
}

TEST_F(AtomicFileTest, FsyncDirectory) {
  EXPECT_NO_THROW(fsync_directory(directory_.string()));
  expect_error([&] { fsync_directory(path("missing")); },
               {path("missing") + ": cannot open directory", std::strerror(ENOENT)});
  write_file_atomically(path("file"), "x");
  expect_error([&] { fsync_directory(path("file")); }, {path("file"), std::strerror(ENOTDIR)});
}

}  // namespace
}  // namespace attnkit::io
