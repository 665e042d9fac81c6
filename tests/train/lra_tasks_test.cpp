// The LRA image tasks (lra-pathfinder, lra-image): pixel tokens from the split files or
// Fashion-MNIST IDX files, their errors, and a tiny model that learns an easy Pathfinder.
#include "attnkit/error.h"
#include "attnkit/data/pathfinder.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"
#include "support/idx_files.h"
#include "support/run_configs.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace attnkit::train {
namespace {

namespace fs = std::filesystem;
using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;

RunConfig tiny(const std::string& task) {
  RunConfig c = attnkit::testing::quiet_tiny_run(task, 8, 16, 1, 2);
  c.task.train_examples = 16;
  c.task.eval_examples = 8;
  return c;
}

using attnkit::testing::idx_bytes;

// A Fashion-MNIST-shaped directory (uncompressed files) of `train` and `test` 28×28 images.
void write_fashion_like(const fs::path& dir, uint32_t train, uint32_t test) {
  for (const auto& [prefix, count] : {std::pair<std::string, uint32_t>{"train", train}, {"t10k", test}}) {
    std::vector<uint8_t> pixels, labels;
    for (uint32_t i = 0; i < count; ++i) {
      labels.push_back(static_cast<uint8_t>(i % 10));
      for (int p = 0; p < 28 * 28; ++p) pixels.push_back(static_cast<uint8_t>(p % 7 == 0 ? 25 * (i % 10) : 0));
    }
    write_bytes(dir / (prefix + "-images-idx3-ubyte"), idx_bytes(0x803, {count, 28, 28}, pixels));
    write_bytes(dir / (prefix + "-labels-idx1-ubyte"), idx_bytes(0x801, {count}, labels));
  }
}

TEST(LraTasks, ImageReadsFashionMnistFilesAsPixelTokens) {
  const auto dir = scratch_directory("lra_tasks");
  write_fashion_like(dir, 48, 20);
  auto config = tiny("lra-image");
  config.task.data = dir.string();
  auto task = make_task(config);
  EXPECT_EQ(task_model(*task)->config().vocab_size, 256);
  EXPECT_EQ(task_model(*task)->config().max_positions, 784);
  EXPECT_TRUE(std::isfinite(task->train_loss(0, 0, 1).loss.item<double>()));
  EXPECT_EQ(task->train_loss(0, 0, 1).tokens, 8 * 784);
  const auto metrics = task->evaluate();
  // Validation = the last twelfth of 48 training images: 4, so accuracy is a multiple of 1/4.
  EXPECT_DOUBLE_EQ(metrics.at("accuracy") * 4, std::round(metrics.at("accuracy") * 4));

  config.task.image_size = 32;  // padded to LRA's 1024 tokens
  config.task.eval_split = "test";
  config.task.eval_examples = 0;
  task = make_task(config);
  EXPECT_EQ(task_model(*task)->config().max_positions, 1024);
  EXPECT_DOUBLE_EQ(task->evaluate().at("accuracy") * 20, std::round(task->evaluate().at("accuracy") * 20));

  config.task.image_size = 30;
  EXPECT_NE(error_of([&] { make_task(config); }).find("lra-image takes 28 (0) or 32 (padded), got 30"),
            std::string::npos);
  config.task.image_size = 0;
  config.task.data = (dir / "absent").string();
  const auto error = error_of([&] { make_task(config); });
  EXPECT_NE(error.find("train-images-idx3-ubyte.gz: no Fashion-MNIST file"), std::string::npos) << error;
}

TEST(LraTasks, PathfinderReadsSplitFiles) {
  const auto dir = scratch_directory("lra_tasks");
  data::PathfinderSplitOptions options;
  options.generator = data::pathfinder_options(32);
  options.train_count = 12;
  options.validation_count = 6;
  options.test_count = 4;
  const auto files = data::write_pathfinder_splits(options, (dir / "pf").string());
  auto config = tiny("lra-pathfinder");
  config.task.data = (dir / "pf").string();
  auto task = make_task(config);
  EXPECT_EQ(task_model(*task)->config().max_positions, 1024);
  EXPECT_EQ(task->train_loss(0, 0, 1).tokens, 8 * 1024);
  EXPECT_DOUBLE_EQ(task->evaluate().at("accuracy") * 6, std::round(task->evaluate().at("accuracy") * 6));
  config.task.data = files.train;  // the training file itself
  config.task.eval_split = "test";
  task = make_task(config);
  EXPECT_DOUBLE_EQ(task->evaluate().at("accuracy") * 4, std::round(task->evaluate().at("accuracy") * 4));

  config.task.data = dir.string();  // no Pathfinder files there
  auto error = error_of([&] { make_task(config); });
  EXPECT_NE(error.find("no pathfinder*_train.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("attnkit data lra-pathfinder"), std::string::npos) << error;
  config.task.data = "";
  config.task.eval_split = "val";
  config.task.image_size = 64;
  error = error_of([&] { make_task(config); });
  EXPECT_NE(error.find("lra-pathfinder generates 32 (0) or 128, got 64"), std::string::npos) << error;
}

TEST(LraTasks, TinyModelLearnsAnEasyPathfinder) {
  // 12×12 images (144 tokens), target contours of 2 paddles, markers of radius 2.5, no
  // distractors: one layer learns it in 150 steps (about 10 s). Validation accuracy after training
  // with run and data seeds 1, 2, 3, 4: 0.940, 0.932, 0.988, 0.945. At this size the classes also
  // differ in their number of lit pixels (both markers on one short contour overlap more): the
  // best threshold on that count reaches 0.81, so this test shows the task trains, not that a
  // model solves long-range connectivity.
  const auto dir = scratch_directory("lra_tasks");
  data::PathfinderSplitOptions options;
  options.generator.size = 12;
  options.generator.paddles = 2;
  options.generator.distractors = 0;
  options.generator.marker_radius = 2.5;
  options.train_count = 2000;
  options.validation_count = 400;
  options.test_count = 2;
  options.seed = 1;
  data::write_pathfinder_splits(options, dir.string());
  auto config = tiny("lra-pathfinder");
  config.task.data = dir.string();
  config.task.batch_size = 32;
  config.task.eval_examples = 0;
  config.model.hidden = 32;
  config.model.layers = 1;
  config.model.heads = 4;
  config.trainer.seed = 1;
  config.trainer.steps = 150;
  config.trainer.optimizer.learning_rate = 3e-3;
  config.trainer.schedule.warmup_steps = 10;
  auto task = make_task(config);
  Trainer trainer(*task, config.trainer);
  const auto before = trainer.evaluate();
  const auto result = trainer.train();
  const double after = result.last_metrics.at("accuracy");
  EXPECT_NEAR(before.at("accuracy"), 0.5, 0.1);
  EXPECT_GT(after, 0.75) << "accuracy " << before.at("accuracy") << " -> " << after;
  EXPECT_LT(result.last_metrics.at("loss"), before.at("loss") * 0.7);
}

}  // namespace
}  // namespace attnkit::train
