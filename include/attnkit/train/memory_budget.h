#pragma once
// Refusing a training run that cannot fit in memory before anything is allocated. Training a
// model holds its weights, their gradients, the optimiser's state (AdamW and Adam: two moments;
// SGD with momentum: one buffer) and, with run.ema, an averaged copy: that many float32 values per
// parameter. The parameters are counted from the TransformerConfig and HeadsConfig arithmetic
// alone (in double, so sizes such as hidden = 10^9 cannot overflow), and the sum is compared with
// the memory the process may still use: MemAvailable of /proc/meminfo and, when the process's
// cgroup (v2 memory.max, v1 memory.limit_in_bytes, or an ancestor's) has a limit, that limit less
// the cgroup's usage -- the smaller. Activations are not counted: a run refused here cannot even
// hold its weights and optimiser state.
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_config.h"
#include "attnkit/train/trainer.h"

#include <cstdint>
#include <optional>
#include <string>

namespace attnkit::train {

// The parameters (elements) a TaskModel of `config` and `heads` holds: embeddings (factorised,
// learned positions, token types), each distinct block's projections, feed-forward, norms and
// synthesizer tables, the pooler and the heads. Within a few percent of models::parameter_count of
// the built model for the presets (tests/train/memory_budget_test.cpp).
double parameters_estimate(const models::TransformerConfig& config, const models::HeadsConfig& heads);

// float32 values kept per parameter while training with `options`: weights + gradients + the
// optimiser's state + the EMA copy.
int64_t training_copies(const TrainerOptions& options);

struct MemoryBudget {
  double bytes = 0;
  std::string source;  // e.g. "MemAvailable", "the cgroup limit of 8.00 GB less 2.10 GB in use"
};

// The memory this process may still allocate, read under `root` (tests pass a folder holding
// proc/meminfo, proc/self/cgroup and sys/fs/cgroup/...): the smaller of MemAvailable and the
// process cgroup's free limit. nullopt when neither can be read.
std::optional<MemoryBudget> memory_budget(const std::string& root = "/");

// "1.23 GB", "456 MB", "12.0 TB" (decimal units).
std::string format_bytes(double bytes);

// Throws attnkit::Error with one line when a model of `config` + `heads`, trained with `options`,
// needs more than `budget` (no budget: nothing is checked): "`what`: training needs about X
// (N parameters x K copies: ...), more than the Y this process may use (SOURCE)". `what` names the
// settings or the file the model comes from, e.g. "model.layers = 100000 (model.hidden = 128)".
void check_training_memory(const models::TransformerConfig& config, const models::HeadsConfig& heads,
                           const TrainerOptions& options, const std::string& what,
                           const std::optional<MemoryBudget>& budget);

// The same for an encoder-decoder (the translation task): both stacks (the decoder's cross
// attention included), a shared source/target embedding counted once, the output projection
// only when it is not tied.
double parameters_estimate(const models::EncoderDecoderConfig& config);
void check_training_memory(const models::EncoderDecoderConfig& config, const TrainerOptions& options,
                           const std::string& what, const std::optional<MemoryBudget>& budget);

}  // namespace attnkit::train
