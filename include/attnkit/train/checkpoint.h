#pragma once
// Training checkpoints: one directory per checkpoint, written so that a crash at any moment leaves
// either the complete directory or none (only a ".tmp-" directory, which resume removes).
//
// Layout of a run directory:
//   RUN/metrics.jsonl
//   RUN/checkpoints/step-00000100/   a checkpoint after 100 optimiser updates:
//       model.safetensors     the module's named parameters and buffers (+ the task's metadata)
//       ema.safetensors       the averaged weights, same names and metadata (only with EMA); a
//                             model file of its own
//       optimizer.pt          torch::optim state (a torch archive: moments, step counts, ...)
//       trainer.safetensors   "rng.cpu" (the default CPU generator's state, U8) and "best_metric"
//                             (F64); metadata: format, step, accumulation, world_size, best_step,
//                             next_micro_batch (the data position, = step · accumulation)
//                             (with data parallelism also "rng.cpu.<rank>" for ranks > 0)
//       tokenizer.json        the run's tokenizer, when the task has one (so the checkpoint is a
//                             model directory that generate and analyze read with its tokenizer)
//   RUN/checkpoints/best/            the same files for the best evaluation so far
//   RUN/checkpoints/.tmp-*           a checkpoint being written (or left by a crash)
// Writing: the files go into a fresh ".tmp-" directory (each written atomically and fsynced), the
// directory is renamed to its final name (atomically exchanged with an existing one, which is
// then removed), and the parent directory is fsynced.
#include "attnkit/io/safetensors.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::train {

// "step-00000100".
std::string checkpoint_directory_name(int64_t step);

// Creates `directory` with the given files atomically as described above. Each writer writes the
// file at the path it is given (e.g. with io::save_safetensors or io::write_file_atomically). On
// an exception the temporary directory is removed and the exception rethrown; an existing
// `directory` is then left as it was. Throws attnkit::Error naming the path for file-system errors.
using FileWriter = std::function<void(const std::string& path)>;
void write_directory_atomically(const std::string& directory,
                                const std::vector<std::pair<std::string, FileWriter>>& files);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};
// The complete "step-N" checkpoints in `checkpoints_directory`, by ascending step ({} when the
// directory does not exist). Temporary directories are ignored.
std::vector<CheckpointEntry> list_checkpoints(const std::string& checkpoints_directory);
// Removes the ".tmp-" directories a crash left behind.
void remove_incomplete_checkpoints(const std::string& checkpoints_directory);
// Removes all but the `keep_last` newest step checkpoints ("best" is kept). keep_last <= 0 keeps all.
void prune_checkpoints(const std::string& checkpoints_directory, int64_t keep_last);

// What a checkpoint holds, in memory.
struct TrainingCheckpoint {
  int64_t step = 0;
  int64_t accumulation = 1;
  int64_t world_size = 1;
  std::optional<double> best_metric;  // none before the first evaluation
  int64_t best_step = -1;
  // CPU time of the training steps so far: metadata of a run with a CPU budget only, so that the
  // checkpoints of other runs stay byte-identical on exact resume.
  std::optional<double> cpu_seconds;
  at::Tensor cpu_rng_state;  // uint8, at::Generator::get_state()
  io::NamedTensors model;    // parameters and buffers by name
  std::optional<io::NamedTensors> ema;
  std::map<std::string, std::string> model_metadata;
  std::string optimizer_state;  // save_optimizer_state()
  io::NamedTensors extra_tensors;  // more tensors of trainer.safetensors (other ranks' RNG states)
  // More files of the directory, name -> content (the run's tokenizer.json); written, not read
  // back by load_checkpoint.
  std::map<std::string, std::string> files;
};

// Writes `checkpoint` to `directory` (atomically, see above).
void save_checkpoint(const std::string& directory, const TrainingCheckpoint& checkpoint);
// Reads one back. Throws attnkit::Error naming the file for a missing or malformed part.
TrainingCheckpoint load_checkpoint(const std::string& directory);

}  // namespace attnkit::train
