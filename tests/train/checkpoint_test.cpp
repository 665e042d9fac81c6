// Checkpoint directories: atomic creation (a crash between files leaves only a ".tmp-" directory),
// replacement of an existing one, listing, cleaning and pruning, and the contents' round trip.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "attnkit/io/atomic_file.h"
#include "attnkit/train/checkpoint.h"
#include "support/test_files.h"
#include "train/toy_tasks.h"

namespace fs = std::filesystem;

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::read_bytes;
using attnkit::testing::scratch_directory;

FileWriter text(const std::string& content) {
  return [content](const std::string& path) { io::write_file_atomically(path, content); };
}

std::vector<std::string> names_in(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Checkpoint, DirectoryNames) {
  EXPECT_EQ(checkpoint_directory_name(100), "step-00000100");
  EXPECT_EQ(checkpoint_directory_name(123456789), "step-123456789");
}

TEST(Checkpoint, WritesAndReplacesDirectoriesAtomically) {
  const fs::path dir = scratch_directory("train");
  const fs::path target = dir / "checkpoints" / "best";
  write_directory_atomically(target.string(), {{"a.txt", text("one")}, {"b.txt", text("two")}});
  EXPECT_EQ(names_in(target), (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(read_bytes(target / "a.txt"), "one");
  // Replacing: the new content only, nothing left over.
  write_directory_atomically(target.string(), {{"a.txt", text("three")}});
  EXPECT_EQ(names_in(target), (std::vector<std::string>{"a.txt"}));
  EXPECT_EQ(read_bytes(target / "a.txt"), "three");
  EXPECT_EQ(names_in(dir / "checkpoints"), (std::vector<std::string>{"best"}));
  // A writer that throws: the old directory stays, the temporary one is gone.
  EXPECT_EQ(error_of([&] {
              write_directory_atomically(target.string(), {{"a.txt", text("four")}, {"b.txt", [](const std::string&) {
                                                              throw Error("disk full");
                                                            }}});
            }),
            "disk full");
  EXPECT_EQ(read_bytes(target / "a.txt"), "three");
  EXPECT_EQ(names_in(dir / "checkpoints"), (std::vector<std::string>{"best"}));
}

// Child role: dies (no cleanup, like a power cut) after writing the first of two files.
TEST(CheckpointChild, CrashBetweenFiles) {
  const char* directory = std::getenv("ATTNKIT_CHECKPOINT_CRASH_DIR");
  if (directory == nullptr) GTEST_SKIP() << "run by Checkpoint.CrashBetweenFilesLeavesOnlyATemporaryDirectory";
  write_directory_atomically(directory, {{"model.safetensors", text("model")},
                                         {"trainer.safetensors", [](const std::string&) { ::_exit(3); }}});
}

TEST(Checkpoint, CrashBetweenFilesLeavesOnlyATemporaryDirectory) {
  const fs::path dir = scratch_directory("train") / "checkpoints";
  fs::create_directories(dir);
  write_directory_atomically((dir / "step-00000002").string(), {{"x", text("x")}});
  const int status = attnkit::testing::run_test_child(
      "CheckpointChild.CrashBetweenFiles", {{"ATTNKIT_CHECKPOINT_CRASH_DIR", (dir / "step-00000004").string()}});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
  auto names = names_in(dir);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].rfind(".tmp-step-00000004.", 0), 0u) << names[0];
  EXPECT_EQ(names[1], "step-00000002");
  auto listed = list_checkpoints(dir.string());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].step, 2);
  remove_incomplete_checkpoints(dir.string());
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"step-00000002"}));
}

TEST(Checkpoint, ListsAndPrunes) {
  const fs::path dir = scratch_directory("train");
  EXPECT_TRUE(list_checkpoints((dir / "missing").string()).empty());
  for (int64_t step : {10, 2, 30, 4}) {
    write_directory_atomically((dir / checkpoint_directory_name(step)).string(), {{"x", text("x")}});
  }
  write_directory_atomically((dir / "best").string(), {{"x", text("x")}});
  fs::create_directories(dir / "step-12x");  // not a checkpoint name: ignored
  auto listed = list_checkpoints(dir.string());
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(listed[0].step, 2);
  EXPECT_EQ(listed[3].step, 30);
  EXPECT_EQ(listed[3].path, (dir / "step-00000030").string());
  prune_checkpoints(dir.string(), 2);
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"best", "step-00000010", "step-00000030", "step-12x"}));
  prune_checkpoints(dir.string(), 0);  // keeps all
  EXPECT_EQ(list_checkpoints(dir.string()).size(), 2u);
}

TEST(Checkpoint, ContentsRoundTrip) {
  const fs::path dir = scratch_directory("train") / "step-00000007";
  TrainingCheckpoint c;
  c.step = 7;
  c.accumulation = 2;
  c.world_size = 1;
  c.best_metric = 0.1 + 0.2;  // not representable in few digits
  c.best_step = 5;
  c.cpu_rng_state = at::detail::getDefaultCPUGenerator().get_state();
  c.model = {{"w", torch::randn({3, 2}, torch::kDouble)}, {"b", torch::randn({2})}};
  c.ema = io::NamedTensors{{"w", torch::randn({3, 2}, torch::kDouble)}, {"b", torch::randn({2})}};
  c.model_metadata = {{"config", "{\"hidden\": 2}"}};
  c.optimizer_state = std::string("\0\1binary\xff", 9);
  c.extra_tensors = {{"rng.cpu.1", torch::arange(5).to(torch::kUInt8)}};
  save_checkpoint(dir.string(), c);
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"ema.safetensors", "model.safetensors", "optimizer.pt",
                                                     "trainer.safetensors"}));
  TrainingCheckpoint back = load_checkpoint(dir.string());
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.accumulation, 2);
  EXPECT_EQ(back.best_metric, 0.1 + 0.2);
  EXPECT_EQ(back.best_step, 5);
  EXPECT_TRUE(torch::equal(back.cpu_rng_state, c.cpu_rng_state));
  std::map<std::string, at::Tensor> model(back.model.begin(), back.model.end());
  EXPECT_TRUE(torch::equal(model.at("w"), c.model[0].second));
  ASSERT_TRUE(back.ema.has_value());
  EXPECT_EQ(back.model_metadata, c.model_metadata);
  EXPECT_EQ(back.optimizer_state, c.optimizer_state);
  ASSERT_EQ(back.extra_tensors.size(), 1u);
  EXPECT_EQ(back.extra_tensors[0].first, "rng.cpu.1");

  c.best_metric.reset();
  c.ema.reset();
  save_checkpoint(dir.string(), c);
  back = load_checkpoint(dir.string());
  EXPECT_FALSE(back.best_metric.has_value());
  EXPECT_FALSE(back.ema.has_value());
  fs::remove(dir / "optimizer.pt");
  EXPECT_NE(error_of([&] { load_checkpoint(dir.string()); }).find("optimizer.pt: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::train
