#pragma once
// Text files for the tokenizers: one attnkit::Error naming the file (and line) for a missing file
// or invalid UTF-8 (whole files: attnkit/file.h). Internal to src/text.
#include <functional>
#include <string>
#include <string_view>

namespace attnkit::text::detail {

// Calls visit(line, line_number) for each line (without "\n" or "\r\n"; numbers start at 1).
// Throws attnkit::Error "PATH:LINE: invalid UTF-8 ..." when a line is not valid UTF-8.
void for_each_line(const std::string& path, const std::function<void(std::string_view, size_t)>& visit);
// Writes `content` to `path`; throws attnkit::Error when it cannot.
void write_file(const std::string& path, std::string_view content);

}  // namespace attnkit::text::detail
