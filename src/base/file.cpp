#include "attnkit/file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>

#include <stdlib.h>  // mkdtemp

#include "attnkit/error.h"

namespace attnkit {

std::string read_file(const std::filesystem::path& path, std::string_view what) {
  const std::string name = what.empty() ? path.string() : fmt::format("{} {}", what, path.string());
  // C stdio rather than ifstream: errno is set where it fails (a directory opens, then fails to
  // read with EISDIR), so the error can say why.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw Error(fmt::format("{}: cannot open ({})", name, std::strerror(errno)));
  std::string content;
  std::error_code size_error;
  if (const auto size = std::filesystem::file_size(path, size_error); !size_error) content.reserve(size);
  char buffer[1 << 16];
  for (;;) {
    const size_t got = std::fread(buffer, 1, sizeof buffer, file.get());
    content.append(buffer, got);
    if (got < sizeof buffer) break;
  }
  if (std::ferror(file.get())) throw Error(fmt::format("{}: cannot read ({})", name, std::strerror(errno)));
  return content;
}

void for_each_line(std::string_view content, const std::function<void(std::string_view line, size_t number)>& visit) {
  size_t number = 0;
  while (!content.empty()) {
    const size_t newline = content.find('\n');
    std::string_view line = content.substr(0, newline);
    content = newline == std::string_view::npos ? std::string_view() : content.substr(newline + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    visit(line, ++number);
  }
}

TemporaryDirectory::TemporaryDirectory(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/" + std::string(prefix) + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    throw Error(fmt::format("cannot create a temporary directory like {}: {}", pattern, std::strerror(errno)));
  path_ = pattern;
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace attnkit
