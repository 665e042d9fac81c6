#pragma once
// Crash-safe file replacement: readers (and a machine that loses power) see either the old file or
// the complete new one, never a partial write. Used for safetensors files and training checkpoints.
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace attnkit::io {

// Writes `path` atomically:
//   1. creates a new temporary file "<path>.tmp.<pid>.<counter>" in the same directory (so the
//      rename below stays within one file system), with the permission bits of the existing
//      target if there is one;
//   2. calls `write` with it: the callback fwrite()s (or fprintf()s...) and must not close it;
//      write errors need no checking there, they are detected afterwards;
//   3. flushes, fsyncs and closes it, renames it over `path`, and fsyncs the directory.
// On any failure before the rename the temporary file is removed and an existing target is left
// untouched. Failures of the steps above throw attnkit::Error "<path>: <what failed>: <strerror>"
// (a failed directory fsync names the directory; the new file is then in place but may not survive
// a crash); an exception thrown by `write` itself is rethrown unchanged. If `path` is a symlink,
// the link itself is replaced, not the file it points to.
void write_file_atomically(const std::string& path,
                           const std::function<void(std::FILE* file)>& write);

// The same with the whole content in memory.
void write_file_atomically(const std::string& path, std::string_view content);

// fsync()s a directory so that a rename or file creation inside it survives a crash. Throws
// attnkit::Error naming the directory, except when the file system does not support syncing
// directories (EINVAL), which is not an error.
void fsync_directory(const std::string& directory);

}  // namespace attnkit::io
