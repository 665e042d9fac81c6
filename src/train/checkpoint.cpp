#include "attnkit/train/checkpoint.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/parse.h"
#include "attnkit/io/atomic_file.h"

#include <torch/torch.h>

#include <fmt/format.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace fs = std::filesystem;

namespace attnkit::train {
namespace {

constexpr const char* kStepPrefix = "step-";
constexpr const char* kTemporaryPrefix = ".tmp-";
constexpr const char* kFormat = "attnkit-trainer-1";

[[noreturn]] void fail_errno(int error, const std::string& what) {
  throw Error(fmt::format("{}: {}", what, std::strerror(error)));
}

void remove_tree(const fs::path& path) {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

// Moves `from` to `to`; an existing `to` is exchanged atomically and then removed.
void install_directory(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return;
  if (errno != ENOTEMPTY && errno != EEXIST) fail_errno(errno, fmt::format("{}: cannot rename to {}", from.string(), to.string()));
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(from);  // now holds the old content
    return;
  }
  if (errno != EINVAL && errno != ENOSYS) {
    fail_errno(errno, fmt::format("{}: cannot exchange with {}", from.string(), to.string()));
  }
  // A file system without atomic exchange: move the old one aside first (a crash in between
  // leaves the new one complete under its temporary name, and the old one under another).
  const fs::path aside = to.parent_path() / fmt::format("{}replaced-{}.{}", kTemporaryPrefix,
                                                        to.filename().string(), ::getpid());
  remove_tree(aside);
  if (::rename(to.c_str(), aside.c_str()) != 0) fail_errno(errno, fmt::format("{}: cannot move aside", to.string()));
  if (::rename(from.c_str(), to.c_str()) != 0) fail_errno(errno, fmt::format("{}: cannot rename to {}", from.string(), to.string()));
  remove_tree(aside);
}

std::optional<int64_t> step_of(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0) return std::nullopt;
  const auto step = try_parse_unsigned(std::string_view(name).substr(std::strlen(kStepPrefix)));
  if (!step || *step > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(*step);
}

std::string metadata_value(const io::SafetensorsFile& file, const std::string& key) {
  auto found = file.metadata().find(key);
  if (found == file.metadata().end()) {
    throw Error(fmt::format("{}: metadata has no '{}'", file.path(), key));
  }
  return found->second;
}

int64_t metadata_integer(const io::SafetensorsFile& file, const std::string& key) {
  return parse_int(metadata_value(file, key), fmt::format("{}: metadata '{}'", file.path(), key));
}

io::NamedTensors all_tensors(const io::SafetensorsFile& file) {
  io::NamedTensors tensors;
  for (const std::string& name : file.names()) tensors.emplace_back(name, file.tensor(name));
  return tensors;
}

}  // namespace

std::string checkpoint_directory_name(int64_t step) { return fmt::format("{}{:08d}", kStepPrefix, step); }

void write_directory_atomically(const std::string& directory,
                                const std::vector<std::pair<std::string, FileWriter>>& files) {
  static std::atomic<unsigned> counter{0};
  const fs::path target(directory);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code error;
  fs::create_directories(parent, error);
  if (error) throw Error(fmt::format("{}: cannot create directory: {}", parent.string(), error.message()));
  const fs::path temporary =
      parent / fmt::format("{}{}.{}.{}", kTemporaryPrefix, target.filename().string(), ::getpid(), counter++);
  remove_tree(temporary);
  if (!fs::create_directory(temporary, error) || error) {
    throw Error(fmt::format("{}: cannot create directory: {}", temporary.string(), error.message()));
  }
  try {
    for (const auto& [name, write] : files) write((temporary / name).string());
    io::fsync_directory(temporary.string());
    install_directory(temporary, target);
    io::fsync_directory(parent.string());
  } catch (...) {
    remove_tree(temporary);
    throw;
  }
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& checkpoints_directory) {
  std::vector<CheckpointEntry> result;
  std::error_code error;
  if (!fs::is_directory(checkpoints_directory, error)) return result;
  for (const auto& entry : fs::directory_iterator(checkpoints_directory, error)) {
    std::error_code ignored;  // an entry removed meanwhile (another rank cleaning up) is skipped
    if (!entry.is_directory(ignored)) continue;
    if (auto step = step_of(entry.path().filename().string())) {
      result.push_back({*step, entry.path().string()});
    }
  }
  std::sort(result.begin(), result.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return result;
}

void remove_incomplete_checkpoints(const std::string& checkpoints_directory) {
  std::error_code error;
  if (!fs::is_directory(checkpoints_directory, error)) return;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(checkpoints_directory, error)) {
    if (entry.path().filename().string().rfind(kTemporaryPrefix, 0) == 0) stale.push_back(entry.path());
  }
  for (const auto& path : stale) remove_tree(path);
}

void prune_checkpoints(const std::string& checkpoints_directory, int64_t keep_last) {
  if (keep_last <= 0) return;
  auto checkpoints = list_checkpoints(checkpoints_directory);
  if (static_cast<int64_t>(checkpoints.size()) <= keep_last) return;
  checkpoints.resize(checkpoints.size() - static_cast<size_t>(keep_last));
  for (const auto& checkpoint : checkpoints) {
    // Renamed first so that a crash in the middle of removing never leaves a partial "step-" one.
    const fs::path doomed = fs::path(checkpoints_directory) /
                            fmt::format("{}removed-{}", kTemporaryPrefix, fs::path(checkpoint.path).filename().string());
    if (::rename(checkpoint.path.c_str(), doomed.c_str()) != 0) {
      fail_errno(errno, fmt::format("{}: cannot remove", checkpoint.path));
    }
    remove_tree(doomed);
  }
  io::fsync_directory(checkpoints_directory);
}

void save_checkpoint(const std::string& directory, const TrainingCheckpoint& checkpoint) {
  std::vector<std::pair<std::string, FileWriter>> files;
  files.emplace_back("model.safetensors", [&](const std::string& path) {
    io::save_safetensors(path, checkpoint.model, checkpoint.model_metadata,
                         io::SafetensorsLayout::kMappable);
  });
  if (checkpoint.ema) {
    files.emplace_back("ema.safetensors", [&](const std::string& path) {
      io::save_safetensors(path, *checkpoint.ema, checkpoint.model_metadata,
                           io::SafetensorsLayout::kMappable);
    });
  }
  files.emplace_back("optimizer.pt", [&](const std::string& path) {
    io::write_file_atomically(path, checkpoint.optimizer_state);
  });
  files.emplace_back("trainer.safetensors", [&](const std::string& path) {
    std::map<std::string, std::string> metadata = {
        {"format", kFormat},
        {"step", std::to_string(checkpoint.step)},
        {"accumulation", std::to_string(checkpoint.accumulation)},
        {"world_size", std::to_string(checkpoint.world_size)},
        {"best_step", std::to_string(checkpoint.best_metric ? checkpoint.best_step : -1)},
        {"next_micro_batch", std::to_string(checkpoint.step * checkpoint.accumulation)},
    };
    if (checkpoint.cpu_seconds) metadata["cpu_seconds"] = fmt::format("{}", *checkpoint.cpu_seconds);
    io::NamedTensors tensors = {
        {"rng.cpu", checkpoint.cpu_rng_state.contiguous()},
        {"best_metric", at::scalar_tensor(checkpoint.best_metric.value_or(0.0), at::kDouble)},
    };
    for (const auto& extra : checkpoint.extra_tensors) tensors.push_back(extra);
    io::save_safetensors(path, tensors, metadata);
  });
  for (const auto& file : checkpoint.files)
    files.emplace_back(file.first, [&file](const std::string& path) {
      io::write_file_atomically(path, file.second);
    });
  write_directory_atomically(directory, files);
}

TrainingCheckpoint load_checkpoint(const std::string& directory) {
  const fs::path dir(directory);
  TrainingCheckpoint checkpoint;
  {
    auto file = io::SafetensorsFile::open((dir / "trainer.safetensors").string());
    if (metadata_value(file, "format") != kFormat) {
      throw Error(fmt::format("{}: unknown format '{}' (expected {})", file.path(),
                              metadata_value(file, "format"), kFormat));
    }
    checkpoint.step = metadata_integer(file, "step");
    checkpoint.accumulation = metadata_integer(file, "accumulation");
    checkpoint.world_size = metadata_integer(file, "world_size");
    checkpoint.best_step = metadata_integer(file, "best_step");
    if (checkpoint.best_step >= 0) checkpoint.best_metric = file.tensor("best_metric").item<double>();
    if (file.metadata().count("cpu_seconds")) {  // runs with a CPU budget only
      checkpoint.cpu_seconds = parse_double(metadata_value(file, "cpu_seconds"),
                                            fmt::format("{}: metadata 'cpu_seconds'", file.path()));
      if (!(*checkpoint.cpu_seconds >= 0)) {
        throw Error(fmt::format("{}: metadata 'cpu_seconds' must be >= 0", file.path()));
      }
    }
    checkpoint.cpu_rng_state = file.tensor("rng.cpu");
    for (const std::string& name : file.names()) {
      if (name != "rng.cpu" && name != "best_metric") checkpoint.extra_tensors.emplace_back(name, file.tensor(name));
    }
  }
  {
    auto file = io::SafetensorsFile::open((dir / "model.safetensors").string());
    checkpoint.model = all_tensors(file);
    checkpoint.model_metadata = file.metadata();
  }
  if (fs::exists(dir / "ema.safetensors")) {
    checkpoint.ema = all_tensors(io::SafetensorsFile::open((dir / "ema.safetensors").string()));
  }
  checkpoint.optimizer_state = read_file(dir / "optimizer.pt");
  return checkpoint;
}

}  // namespace attnkit::train
