#include "attnkit/io/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "attnkit/error.h"

namespace attnkit::io {
namespace {

// Throws "<formatted message>: <strerror(error)>". Callers pass errno as the first argument, so it
// is read before anything (formatting, allocation) could change it.
template <typename... Args>
[[noreturn]] void fail(int error, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("{}: {}", fmt::format(format, std::forward<Args>(args)...),
                          std::strerror(error)));
}

std::string parent_directory(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// A uniquely named file next to `target`. The destructor closes it and, unless commit() renamed it
// over the target, removes it, whatever step failed.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string target) : target_(std::move(target)) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  ~TemporaryFile() {
    if (file_ != nullptr)
      std::fclose(file_);
    else if (fd_ >= 0)
      ::close(fd_);
    if (created_ && !committed_) ::unlink(name_.c_str());
  }

  // Creates the file and opens it for writing.
  void create() {
    // Unique within the process (counter) and across processes (pid). A name left behind by a
    // crashed process that had the same pid is skipped thanks to O_EXCL.
    static std::atomic<unsigned long long> counter{0};
    for (int attempt = 0; fd_ < 0; ++attempt) {
      name_ = fmt::format("{}.tmp.{}.{}", target_, ::getpid(), counter++);
      fd_ = ::open(name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && (errno != EEXIST || attempt == 100))
        fail(errno, "{}: cannot create temporary file {}", target_, name_);
    }
    created_ = true;
    // Replacing a file keeps its permission bits (a private checkpoint stays private).
    struct stat existing {};
    if (::stat(target_.c_str(), &existing) == 0 && S_ISREG(existing.st_mode) &&
        ::fchmod(fd_, existing.st_mode & 07777) != 0)
      fail(errno, "{}: cannot set the permissions of temporary file {}", target_, name_);
    file_ = ::fdopen(fd_, "wb");
    if (file_ == nullptr) fail(errno, "{}: cannot open temporary file {}", target_, name_);
  }

  std::FILE* file() const { return file_; }

  // Makes the content durable, then atomically replaces the target with it.
  void commit() {
    // errno still holds the cause of a failed fwrite() in the callback (EIO if it was lost).
    if (std::ferror(file_))
      fail(errno != 0 ? errno : EIO, "{}: cannot write temporary file {}", target_, name_);
    if (std::fflush(file_) != 0) fail(errno, "{}: cannot write temporary file {}", target_, name_);
    if (::fsync(fd_) != 0) fail(errno, "{}: cannot fsync temporary file {}", target_, name_);
    // fclose() releases the stream (and fd_) even when it fails: never close them again.
    fd_ = -1;
    if (std::fclose(std::exchange(file_, nullptr)) != 0)
      fail(errno, "{}: cannot close temporary file {}", target_, name_);
    if (std::rename(name_.c_str(), target_.c_str()) != 0)
      fail(errno, "{}: cannot rename temporary file {} over it", target_, name_);
    committed_ = true;
  }

 private:
  std::string target_;
  std::string name_;
  int fd_ = -1;                // owned by file_ once that is open
  std::FILE* file_ = nullptr;  // the stream over fd_
  bool created_ = false;       // name_ exists on disk
  bool committed_ = false;     // name_ became target_
};

}  // namespace

void write_file_atomically(const std::string& path,
                           const std::function<void(std::FILE* file)>& write) {
  if (path.empty()) throw Error("write_file_atomically: the path is empty");
  TemporaryFile temporary(path);
  temporary.create();
  errno = 0;  // so that commit() can tell a write error's cause from an older errno
  write(temporary.file());
  // Fault injection for the tests of docs/robustness.md (no root needed for a "full disk"): with
  // ATTNKIT_FAULT_ENOSPC=TEXT set, writing any path containing TEXT fails as on a full disk.
  if (const char* fault = std::getenv("ATTNKIT_FAULT_ENOSPC");
      fault != nullptr && *fault != '\0' && path.find(fault) != std::string::npos)
    fail(ENOSPC, "{}: cannot write temporary file (injected by ATTNKIT_FAULT_ENOSPC)", path);
  temporary.commit();
  fsync_directory(parent_directory(path));
}

void write_file_atomically(const std::string& path, std::string_view content) {
  write_file_atomically(
      path, [content](std::FILE* file) { std::fwrite(content.data(), 1, content.size(), file); });
}

void fsync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(errno, "{}: cannot open directory to fsync it", directory);
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0 && error != EINVAL) fail(error, "{}: cannot fsync directory", directory);
}

}  // namespace attnkit::io
