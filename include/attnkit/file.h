#pragma once
// Reading whole files, with one attnkit::Error that names the file and the system's reason
// instead of an empty string or a stream in a failed state. No LibTorch.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace attnkit {

// The whole file, byte for byte. Throws attnkit::Error
//   "[WHAT ]PATH: cannot open (REASON)" or "[WHAT ]PATH: cannot read (REASON)"
// (REASON is strerror, e.g. "No such file or directory", "Is a directory").
std::string read_file(const std::filesystem::path& path, std::string_view what = "");

// Calls visit(line, number) for each line of `content`: without its "\n" or "\r\n", numbered from
// 1. A last line without "\n" counts; the text after a final "\n" is no line.
// A private directory (mode 0700) under $TMPDIR or /tmp, named PREFIX-XXXXXX, removed with
// everything in it when the object is destroyed. Throws attnkit::Error when it cannot be made.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(std::string_view prefix = "attnkit");
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

void for_each_line(std::string_view content, const std::function<void(std::string_view line, size_t number)>& visit);

}  // namespace attnkit
