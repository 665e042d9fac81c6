#pragma once
// Concrete training tasks for the Trainer (trainer.h), built from a RunConfig. The task registry
// (task_registry(), src/train/tasks/registry.cpp) is the one list of them: make_task dispatches
// on it, and the errors, run_settings()' help and `attnkit train --help` list its names. The tasks
// are whole-sequence classification (ListOps, text), synthetic sequence tasks and text LM as a
// causal LM, token tagging, span extraction and UniLM seq2seq; one file of src/train/tasks/ each.
// Data order is a pure function of the micro-batch index: example positions g·B .. g·B+B-1 of the
// concatenation of per-epoch permutations (seeded by run seed and epoch), with g = index·world +
// rank, so ranks read disjoint batches and a resumed run reads what the uninterrupted one did.
#include "attnkit/train/run_config.h"
#include "attnkit/train/trainer.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attnkit::train {

// What a task reads through task.data.
enum class TaskData {
  kNone,      // nothing: its examples are generated from the [task] settings
  kOptional,  // files when task.data is set, else generated examples
  kRequired,  // files; without task.data the task refuses to build
};

// One row of the task registry.
struct TaskInfo {
  std::string name;        // task.name
  TaskData data = TaskData::kNone;
  std::string files;       // what task.data names ("" for kNone)
  bool test_split = false; // its files have a test split (task.eval_split = test, `eval --split test`)
  bool tokenizer = false;  // needs task.tokenizer
  std::string help;        // one line
  std::unique_ptr<TrainingTask> (*make)(const RunConfig&) = nullptr;  // after make_task's checks
};

// Every task make_task builds, in the order help and errors list them.
const std::vector<TaskInfo>& task_registry();

// The registry's row named `name`, or nullptr.
const TaskInfo* find_task(const std::string& name);

// The registered names joined by `separator`; with `keep`, only the rows it accepts.
std::string task_names(const std::string& separator = ", ",
                       const std::function<bool(const TaskInfo&)>& keep = {});

// The TransformerConfig + heads the run's model gets (family presets, sizes, attention kind).
models::TransformerConfig model_config(const RunConfig& config, int64_t vocab_size,
                                       int64_t longest_input, bool causal);

// Builds the task (reads or generates its data, builds the model). Throws attnkit::Error for
// an unknown task (listing the registry's names), missing data or a tokenizer the task needs.
std::unique_ptr<TrainingTask> make_task(const RunConfig& config);

// The model of a task made by make_task (for eval and export).
models::TaskModel task_model(TrainingTask& task);

// conditional-lm: the file of each checkpoint that names the condition classes, one label per
// line in class-id order (`attnkit generate --condition NAME` reads it).
inline constexpr char kConditionLabelsFile[] = "condition_labels.txt";

}  // namespace attnkit::train
