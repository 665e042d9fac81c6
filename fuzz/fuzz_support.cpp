#include "fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>

#include <c10/util/Exception.h>

#include "attnkit/error.h"

namespace attnkit::fuzz {

const std::string& scratch_directory() {
  static const std::string directory = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    std::filesystem::path path = base / ("attnkit-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path.string();
  }();
  return directory;
}

std::string write_scratch_file(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_directory() + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

void expect_clean(const std::function<void()>& f, std::string_view must_mention) {
  try {
    f();
  } catch (const attnkit::Error& e) {
    const std::string_view message = e.what();
    if (message.find('\n') != std::string_view::npos) {
      std::fprintf(stderr, "FINDING: attnkit::Error message has several lines:\n%s\n", e.what());
      std::abort();
    }
    if (!must_mention.empty() && message.find(must_mention) == std::string_view::npos) {
      std::fprintf(stderr, "FINDING: attnkit::Error does not name %.*s: %s\n",
                   static_cast<int>(must_mention.size()), must_mention.data(), e.what());
      std::abort();
    }
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "FINDING: c10::Error escaped: %s\n", e.what_without_backtrace());
    std::abort();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: std::exception escaped: %s\n", e.what());
    std::abort();
  }
}

std::pair<std::string_view, std::string_view> split_input(std::string_view data,
                                                          std::string_view separator) {
  const size_t at = data.find(separator);
  if (at == std::string_view::npos) return {data, {}};
  return {data.substr(0, at), data.substr(at + separator.size())};
}

}  // namespace attnkit::fuzz
