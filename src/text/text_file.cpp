#include "text_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "attnkit/error.h"
#include "attnkit/text/unicode.h"

namespace attnkit::text::detail {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) throw Error(fmt::format("{}: read failed", path));
  return content.str();
}

void for_each_line(const std::string& path, const std::function<void(std::string_view, size_t)>& visit) {
  const std::string content = read_file(path);
  std::string_view rest = content;
  size_t number = 0;
  while (!rest.empty()) {
    size_t newline = rest.find('\n');
    std::string_view line = rest.substr(0, newline);
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++number;
    if (size_t bad = unicode::find_invalid_utf8(line); bad != std::string_view::npos) {
      throw Error(fmt::format("{}:{}: invalid UTF-8 at byte {} of the line", path, number, bad + 1));
    }
    visit(line, number);
  }
}

void write_file(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("{}: cannot write ({})", path, std::strerror(errno)));
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!out) throw Error(fmt::format("{}: write failed", path));
}

}  // namespace attnkit::text::detail
