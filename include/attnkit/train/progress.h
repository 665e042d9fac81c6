#pragma once
// Progress output of a training run and its metrics log.
//   - On a terminal (stderr is a TTY): one status line redrawn with '\r' (at most ~10 times a
//     second and at every log_every-th step):
//       [=========>          ]  450/1000  45%  ETA 1m12s  loss 2.3416  lr 8.00e-04  12.3k tok/s
//   - Otherwise: a plain line every log_every steps (and at the last step):
//       step 450/1000 loss 2.3416 lr 8.00e-04 grad_norm 0.8123 tok/s 12301 eta 1m12s
//   - quiet: nothing (errors are the caller's to print).
// Notes (evaluation results, "resumed from ...") are printed as their own lines in both modes.
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

namespace attnkit::train {

struct ProgressOptions {
  int64_t total_steps = 0;
  int64_t log_every = 10;             // plain lines; <= 0 means only the last step
  bool quiet = false;
  std::optional<bool> terminal;       // default: isatty(stderr)
};

struct StepProgress {
  int64_t step = 0;  // updates done (1-based)
  double loss = 0;
  double learning_rate = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // input tokens of this step (all ranks)
};

class ProgressReporter {
 public:
  explicit ProgressReporter(const ProgressOptions& options, std::FILE* out = stderr);
  ~ProgressReporter();  // finishes the status line
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  void step(const StepProgress& progress);
  void note(const std::string& line);
  void finish();

  // Tokens per second and seconds to the end, measured since the first step() call.
  double tokens_per_second() const;
  double eta_seconds(int64_t step) const;

 private:
  void write_bar(const StepProgress& progress);

  ProgressOptions options_;
  std::FILE* out_;
  bool terminal_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t first_step_ = -1;  // step before the first step() call
  int64_t tokens_ = 0;
  double elapsed_ = 0;
};

// "45s", "12m05s", "3h02m".
std::string format_duration(double seconds);

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
