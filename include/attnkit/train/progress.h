#pragma once
// Progress of a training run (on the shared attnkit::ProgressReporter) and its metrics log.
//   - On a terminal: the reporter's status line with the step's loss, learning rate and tokens/s:
//       [=========>          ]  450/1000  45%  ETA 1m12s  loss 2.3416  lr 8.00e-04  12.3k tok/s
//   - Otherwise: a plain line every log_every steps (and at the last step):
//       step 450/1000 loss 2.3416 lr 8.00e-04 grad_norm 0.8123 tok/s 12301 eta 1m12s
//     and, in a run with a CPU budget:
//       step 450 loss 2.3416 lr 8.00e-04 grad_norm 0.8123 tok/s 12301 cpu 2m00s of 5m00s
//   - quiet: nothing (errors are the caller's to print).
// Notes (evaluation results, "resumed from ...") go through ProgressReporter::note.
#include "attnkit/progress.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace attnkit::train {

struct StepProgress {
  int64_t step = 0;  // updates done (1-based)
  double loss = 0;
  double learning_rate = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // input tokens of this step (all ranks)
  // A run with a CPU budget (run.cpu_budget > 0) ends at a CPU time, not at the step total: its
  // line shows the CPU time spent of the budget instead of "step/total" and a step-based ETA.
  double cpu_seconds = 0;
  double cpu_budget = 0;
};

// Reports one step to `progress` (total = the run's steps); its rate() is then tokens per second.
void report_step(ProgressReporter& progress, const StepProgress& step);

// The run's metrics.jsonl: one JSON object per line, each with a "step". Every append is flushed.
class MetricsLog {
 public:
  // Opens (creates) `path`. With `keep_through_step`, lines whose step is greater are dropped
  // first (the file is rewritten atomically), so a resumed run continues a consistent log; lines
  // that are not JSON objects with an integer "step" are dropped too. Without it the file is
  // emptied. Throws attnkit::Error naming the path.
  MetricsLog(const std::string& path, std::optional<int64_t> keep_through_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void append(const std::string& json_object);  // one line, no newline inside
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace attnkit::train
