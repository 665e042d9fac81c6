#include "attnkit/text/token_windows.h"

#include "attnkit/error.h"
#include "attnkit/file.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace attnkit::text {

TokenWindows token_windows(std::istream& in, const Tokenizer& tokenizer, int64_t length,
                           int64_t max_windows, const std::string& name) {
  if (length < 1 || max_windows < 1)
    throw Error(fmt::format("{}: windows need length >= 1 and count >= 1 (got {} and {})", name,
                            length, max_windows));
  TokenWindows windows;
  windows.length = length;
  const size_t needed = static_cast<size_t>(length * max_windows);
  std::string line;
  while (windows.ids.size() < needed && std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    for (uint32_t id : tokenizer.encode(line).ids) windows.ids.push_back(int64_t(id));
  }
  const int64_t available = static_cast<int64_t>(windows.ids.size()) / length;
  if (available < 1)
    throw Error(fmt::format("{}: {} tokens, fewer than one window of {} tokens", name,
                            windows.ids.size(), length));
  windows.count = std::min(available, max_windows);
  windows.ids.resize(static_cast<size_t>(windows.count * length));
  return windows;
}

TokenWindows read_token_windows(const std::string& path, const Tokenizer& tokenizer, int64_t length,
                                int64_t max_windows) {
  std::istringstream in(read_file(path));
  return token_windows(in, tokenizer, length, max_windows, path);
}

}  // namespace attnkit::text
