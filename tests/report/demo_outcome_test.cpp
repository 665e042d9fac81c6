// `attnkit demo`'s exit status and summary line (demo::DemoOutcome, what run_demo returns): a
// missed target is a result, shown in the summary line, and the run still exits 0; only a stage
// that failed (threw) makes it exit 1.
#include "attnkit/demo/demo.h"

#include <gtest/gtest.h>

namespace attnkit::demo {
namespace {

report::Section with_headlines(std::vector<report::Headline> headlines) {
  report::Section section;
  section.headlines = std::move(headlines);
  return section;
}

TEST(DemoOutcome, EveryTargetMetExitsZero) {
  DemoOutcome outcome;
  outcome.add("oracles", with_headlines({{"largest error", "3e-7", true}, {"a number", "12", std::nullopt}}), false);
  outcome.add("speed", with_headlines({{"softmax vs eager", "2.1x", true}}), false);
  EXPECT_EQ(outcome.exit_status(), 0);
  EXPECT_TRUE(outcome.missed.empty());
  EXPECT_TRUE(outcome.failed.empty());
  EXPECT_EQ(outcome.summary(), "demo: 2 stages ran; none missed a target; none failed");
}

// The run that ended in `make: *** Error 1`: every stage ran, one timing missed its target.
TEST(DemoOutcome, AMissedTargetIsShownButExitsZero) {
  DemoOutcome outcome;
  outcome.add("oracles", with_headlines({{"largest error", "3e-7", true}}), false);
  outcome.add("heads", with_headlines({{"accuracy", "0.61", true}, {"speed-up of the pruned model (target +25%)", "1.22x", false}}),
              false);
  outcome.add("decoding", with_headlines({}), false);
  EXPECT_EQ(outcome.exit_status(), 0);
  EXPECT_EQ(outcome.missed, std::vector<std::string>{"heads"});
  EXPECT_TRUE(outcome.failed.empty());
  EXPECT_EQ(outcome.summary(), "demo: 3 stages ran; 1 missed a target (heads); none failed");
}

TEST(DemoOutcome, AFailedStageExitsOne) {
  DemoOutcome outcome;
  outcome.add("speed", with_headlines({{"stage completed", "failed", false}}), true);
  outcome.add("heads", with_headlines({{"speed-up (target +25%)", "1.10x", false}}), false);
  outcome.add("training", with_headlines({{"accuracy", "0.7", true}}), false);
  EXPECT_EQ(outcome.exit_status(), 1);
  EXPECT_EQ(outcome.failed, std::vector<std::string>{"speed"});
  EXPECT_EQ(outcome.missed, std::vector<std::string>{"heads"});  // the failed stage is not also "missed"
  EXPECT_EQ(outcome.ran, (std::vector<std::string>{"speed", "heads", "training"}));
  EXPECT_EQ(outcome.summary(),
            "demo: 3 stages ran; 1 missed a target (heads); 1 failed (speed) (exit status 1)");
}

TEST(DemoOutcome, OneStage) {
  DemoOutcome outcome;
  outcome.add("oracles", with_headlines({{"largest error", "0.5", false}}), false);
  EXPECT_EQ(outcome.exit_status(), 0);
  EXPECT_EQ(outcome.summary(), "demo: 1 stage ran; 1 missed a target (oracles); none failed");
}

}  // namespace
}  // namespace attnkit::demo
