#pragma once
// Learning-rate schedules: linear warm-up, then constant, linear decay or cosine decay to a floor.
// The schedule is a pure function of the step, so resuming needs only the step counter.
//
// For update number `step` (0 = the first update) with peak rate P, warm-up W, total T, floor f·P:
//   step < W:            P · (step + 1) / W
//   constant:            P
//   linear / cosine:     progress p = min(1, (step - W) / max(1, T - W)),
//                        linear: f·P + (1 - f)·P·(1 - p),  cosine: f·P + (1 - f)·P·(1 + cos πp) / 2
#include <cstdint>
#include <string>

namespace attnkit::train {

enum class ScheduleKind { kConstant, kLinear, kCosine };

std::string to_string(ScheduleKind kind);  // "constant", "linear", "cosine"
// Throws attnkit::Error listing the names for an unknown one.
ScheduleKind schedule_kind_from_string(const std::string& name);

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::kCosine;
  int64_t warmup_steps = 0;
  double min_ratio = 0.0;  // floor as a fraction of the peak rate (linear, cosine)
};

class LearningRateSchedule {
 public:
  // Throws attnkit::Error for a negative warm-up, peak rate or total, or min_ratio outside [0, 1].
  LearningRateSchedule(const ScheduleOptions& options, double peak_rate, int64_t total_steps);
  double rate(int64_t step) const;  // step >= 0
  // The same warm-up by steps, then the decay at `decay_progress` in [0, 1] (clamped) instead of
  // the step's place in total_steps: a training run with a CPU budget decays over the budget.
  double rate(int64_t step, double decay_progress) const;

 private:
  ScheduleOptions options_;
  double peak_;
  int64_t total_;
};

}  // namespace attnkit::train
