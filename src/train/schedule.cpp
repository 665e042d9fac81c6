#include "attnkit/train/schedule.h"

#include "attnkit/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace attnkit::train {

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kConstant: return "constant";
    case ScheduleKind::kLinear: return "linear";
    case ScheduleKind::kCosine: return "cosine";
  }
  return "?";
}

ScheduleKind schedule_kind_from_string(const std::string& name) {
  for (ScheduleKind kind : {ScheduleKind::kConstant, ScheduleKind::kLinear, ScheduleKind::kCosine}) {
    if (to_string(kind) == name) return kind;
  }
  throw Error(fmt::format("unknown schedule '{}' (expected constant, linear or cosine)", name));
}

LearningRateSchedule::LearningRateSchedule(const ScheduleOptions& options, double peak_rate,
                                           int64_t total_steps)
    : options_(options), peak_(peak_rate), total_(total_steps) {
  if (options.warmup_steps < 0) {
    throw Error(fmt::format("schedule: warmup_steps must be >= 0, got {}", options.warmup_steps));
  }
  if (!(options.min_ratio >= 0 && options.min_ratio <= 1)) {
    throw Error(fmt::format("schedule: min_ratio must be in [0, 1], got {}", options.min_ratio));
  }
  if (!(peak_rate >= 0)) throw Error(fmt::format("schedule: peak rate must be >= 0, got {}", peak_rate));
  if (total_steps < 0) throw Error(fmt::format("schedule: total steps must be >= 0, got {}", total_steps));
}

double LearningRateSchedule::rate(int64_t step) const {
  const int64_t warmup = options_.warmup_steps;
  if (step < warmup) return rate(step, 0.0);
  return rate(step, static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total_ - warmup)));
}

double LearningRateSchedule::rate(int64_t step, double decay_progress) const {
  const int64_t warmup = options_.warmup_steps;
  if (step < warmup) return peak_ * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (options_.kind == ScheduleKind::kConstant) return peak_;
  const double progress = std::clamp(decay_progress, 0.0, 1.0);
  const double floor = options_.min_ratio * peak_;
  const double shape = options_.kind == ScheduleKind::kLinear
                           ? 1.0 - progress
                           : 0.5 * (1.0 + std::cos(M_PI * progress));
  return floor + (peak_ - floor) * shape;
}

}  // namespace attnkit::train
