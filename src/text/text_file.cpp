#include "text_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/text/unicode.h"

namespace attnkit::text::detail {

void for_each_line(const std::string& path, const std::function<void(std::string_view, size_t)>& visit) {
  const std::string content = attnkit::read_file(path);
  attnkit::for_each_line(content, [&](std::string_view line, size_t number) {
    if (size_t bad = unicode::find_invalid_utf8(line); bad != std::string_view::npos) {
      throw Error(fmt::format("{}:{}: invalid UTF-8 at byte {} of the line", path, number, bad + 1));
    }
    visit(line, number);
  });
}

void write_file(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("{}: cannot write ({})", path, std::strerror(errno)));
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!out) throw Error(fmt::format("{}: write failed", path));
}

}  // namespace attnkit::text::detail
