// src/process_start.cpp: the thread-wait defaults are in this executable's environment before
// main(), and a value set by the user is kept. (tests/python/test_thread_wait_defaults.py checks
// that libgomp reads them, i.e. that they are set before its constructor runs.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>

namespace {

// The environment this process image was started with (the kernel's copy, which setenv does not
// change; after src/process_start.cpp's second start it holds the defaults that start added, so
// a user's value is checked for real in tests/python/test_thread_wait_defaults.py).
std::map<std::string, std::string> start_environment() {
  std::ifstream in("/proc/self/environ", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, std::string> env;
  size_t begin = 0;
  while (begin < all.size()) {
    size_t end = all.find('\0', begin);
    if (end == std::string::npos) end = all.size();
    const std::string entry = all.substr(begin, end - begin);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
    begin = end + 1;
  }
  return env;
}

std::optional<std::string> now(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

bool sanitized() {
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
  return true;
#endif
  return false;
}

TEST(ProcessStart, ThreadWaitDefaultsAreSetAndUserValuesKept) {
  if (sanitized()) GTEST_SKIP() << "sanitizer builds leave the environment alone";
  const auto start = start_environment();
  ASSERT_FALSE(start.empty());
  auto started = [&](const char* name) -> std::optional<std::string> {
    const auto it = start.find(name);
    return it == start.end() ? std::nullopt : std::optional<std::string>(it->second);
  };

  EXPECT_EQ(now("OPENBLAS_THREAD_TIMEOUT"), started("OPENBLAS_THREAD_TIMEOUT").value_or("16"));
  if (started("GOMP_SPINCOUNT"))
    EXPECT_EQ(now("GOMP_SPINCOUNT"), started("GOMP_SPINCOUNT"));
  else if (started("OMP_WAIT_POLICY"))
    EXPECT_EQ(now("GOMP_SPINCOUNT"), std::nullopt);  // the user's wait policy decides
  else
    EXPECT_EQ(now("GOMP_SPINCOUNT"), "10000");
}

}  // namespace
