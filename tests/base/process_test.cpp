#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/process.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

namespace attnkit {
namespace {

TEST(RunProcess, CollectsOutputErrorAndExitCode) {
  const auto r = run_process({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(run_process({"true"}).ok());
}

TEST(RunProcess, ReportsTheSignalThatEndedIt) {
  const auto r = run_process({"sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_EQ(r.signal, SIGTERM);
}

TEST(RunProcess, LargeOutputDoesNotBlock) {
  const auto r = run_process({"sh", "-c", "head -c 3000000 /dev/zero; head -c 200000 /dev/zero >&2"});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.out.size(), 3000000u);
  EXPECT_EQ(r.err.size(), 200000u);
}

TEST(RunProcess, AMissingProgramIsAOneLineError) {
  try {
    run_process({"attnkit-no-such-program"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot run attnkit-no-such-program: No such file or directory");
  }
  EXPECT_THROW(run_process({}), Error);
}

TEST(FirstLine, SkipsBlankLinesAndShortensLongOnes) {
  EXPECT_EQ(first_line("\n  \nsecond\nthird"), "second");
  EXPECT_EQ(first_line(""), "");
  EXPECT_EQ(first_line(std::string(300, 'x')).size(), 203u);
}

TEST(TemporaryDirectory, IsPrivateAndRemovedWithItsContents) {
  std::filesystem::path kept;
  {
    TemporaryDirectory tmp("attnkit-test");
    kept = tmp.path();
    EXPECT_TRUE(std::filesystem::is_directory(kept));
    EXPECT_EQ(kept.filename().string().rfind("attnkit-test-", 0), 0u);
    const auto perms = std::filesystem::status(kept).permissions();
    EXPECT_EQ(perms & std::filesystem::perms::others_all, std::filesystem::perms::none);
    std::filesystem::create_directories(kept / "a" / "b");
    { std::FILE* f = std::fopen((kept / "a" / "b" / "c").c_str(), "w"); std::fclose(f); }
  }
  EXPECT_FALSE(std::filesystem::exists(kept));
}

}  // namespace
}  // namespace attnkit
