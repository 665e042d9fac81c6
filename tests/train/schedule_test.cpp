// Learning-rate schedules: warm-up, constant, linear and cosine decay to a floor (the formulas of
// schedule.h evaluated by hand at chosen steps).
#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/train/schedule.h"
#include "support/test_files.h"

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;

LearningRateSchedule make(ScheduleKind kind, int64_t warmup, double floor = 0.0) {
  ScheduleOptions options;
  options.kind = kind;
  options.warmup_steps = warmup;
  options.min_ratio = floor;
  return LearningRateSchedule(options, 2.0, 104);
}

TEST(Schedule, WarmupIsLinearUpToThePeak) {
  for (ScheduleKind kind : {ScheduleKind::kConstant, ScheduleKind::kLinear, ScheduleKind::kCosine}) {
    auto schedule = make(kind, 4);
    EXPECT_DOUBLE_EQ(schedule.rate(0), 0.5);
    EXPECT_DOUBLE_EQ(schedule.rate(1), 1.0);
    EXPECT_DOUBLE_EQ(schedule.rate(3), 2.0);
    EXPECT_DOUBLE_EQ(schedule.rate(4), 2.0);  // first step after warm-up: progress 0
  }
}

TEST(Schedule, ConstantStaysAtThePeak) {
  auto schedule = make(ScheduleKind::kConstant, 0);
  EXPECT_DOUBLE_EQ(schedule.rate(0), 2.0);
  EXPECT_DOUBLE_EQ(schedule.rate(1000), 2.0);
}

TEST(Schedule, LinearDecaysToTheFloor) {
  auto schedule = make(ScheduleKind::kLinear, 4, 0.1);  // floor 0.2, 100 decay steps
  EXPECT_DOUBLE_EQ(schedule.rate(54), 0.2 + 1.8 * 0.5);
  EXPECT_DOUBLE_EQ(schedule.rate(104), 0.2);
  EXPECT_DOUBLE_EQ(schedule.rate(500), 0.2);
}

TEST(Schedule, CosineDecaysToTheFloor) {
  auto schedule = make(ScheduleKind::kCosine, 4);
  EXPECT_DOUBLE_EQ(schedule.rate(54), 1.0);
  EXPECT_NEAR(schedule.rate(29), 2.0 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_NEAR(schedule.rate(104), 0.0, 1e-15);
  EXPECT_NEAR(make(ScheduleKind::kCosine, 0, 0.5).rate(104), 1.0, 1e-15);
}

// The decay at a given progress (a CPU budget's spent fraction): warm-up still by steps.
TEST(Schedule, DecayAtAGivenProgress) {
  auto schedule = make(ScheduleKind::kCosine, 4);
  EXPECT_DOUBLE_EQ(schedule.rate(1, 0.9), schedule.rate(1));  // in warm-up the progress is ignored
  EXPECT_DOUBLE_EQ(schedule.rate(10, 0.25), schedule.rate(29));
  EXPECT_NEAR(schedule.rate(10, 1.0), 0.0, 1e-15);
  EXPECT_NEAR(schedule.rate(10, 7.0), 0.0, 1e-15);  // clamped
  EXPECT_DOUBLE_EQ(make(ScheduleKind::kLinear, 4, 0.1).rate(5, 0.5), 0.2 + 1.8 * 0.5);
}

TEST(Schedule, ClearErrors) {
  EXPECT_EQ(error_of([] { schedule_kind_from_string("step"); }),
            "unknown schedule 'step' (expected constant, linear or cosine)");
  EXPECT_EQ(error_of([] { make(ScheduleKind::kLinear, -1); }), "schedule: warmup_steps must be >= 0, got -1");
  EXPECT_EQ(error_of([] { make(ScheduleKind::kLinear, 0, 1.5); }), "schedule: min_ratio must be in [0, 1], got 1.5");
}

}  // namespace
}  // namespace attnkit::train
