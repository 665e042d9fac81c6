// Data parallelism over c10d/Gloo with real processes on loopback: 2 ranks reach the parameters of
// 1 process with the combined batch; a killed worker is reported by the launcher and by the
// surviving rank within a bounded time, and leaves no half-written checkpoint.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <unistd.h>

#include "attnkit/io/safetensors.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/train/distributed.h"
#include "attnkit/train/trainer.h"
#include "support/test_files.h"
#include "train/toy_tasks.h"

// The tests that run a Gloo process group skip against a LibTorch without c10d's Gloo backend
// (a PyPI torch 2.x wheel: docs/architecture.md, "Building against LibTorch 2.x").
#define SKIP_WITHOUT_GLOO()                                                                      \
  if (!::attnkit::train::distributed_available())                                                \
  GTEST_SKIP() << "this LibTorch has no c10d Gloo backend (docs/architecture.md)"

namespace fs = std::filesystem;

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::LinearRegressionTask;
using attnkit::testing::read_bytes;
using attnkit::testing::scratch_directory;
using attnkit::testing::TinyLmTask;

TrainerOptions regression_options() {
  TrainerOptions o;
  o.steps = 5;
  o.accumulation = 2;
  o.clip_norm = 0.3;
  o.optimizer.learning_rate = 0.05;
  o.schedule.warmup_steps = 2;
  o.quiet = true;
  return o;
}

// Trains `task` on this rank into OUT/run (resuming when ATTNKIT_DDP_RESUME is set; exiting at
// once after step ATTNKIT_DDP_EXIT_AFTER, like a kill); rank 0 then saves the parameters to
// OUT/params.safetensors.
void train_and_save(TrainingTask& task, TrainerOptions o, DataParallel& data_parallel, const fs::path& out) {
  o.run_directory = (out / "run").string();
  Trainer trainer(task, o, &data_parallel);
  if (const char* exit_after = std::getenv("ATTNKIT_DDP_EXIT_AFTER")) {
    trainer.set_step_callback([step = std::atoll(exit_after)](const StepRecord& record) {
      if (record.step == step) ::_exit(0);
    });
  }
  if (std::getenv("ATTNKIT_DDP_RESUME") != nullptr) trainer.resume(o.run_directory);
  trainer.train();
  if (data_parallel.rank() == 0) {
    io::NamedTensors params;
    for (const auto& item : task.module().named_parameters()) params.emplace_back(item.key(), item.value().detach());
    io::save_safetensors((out / "params.safetensors").string(), params);
  }
}

// Worker role, run by the tests below through launch_local_workers or directly (torchrun's
// variables come from the environment). ATTNKIT_DDP_ROLE:
//   "regression"  the regression task with a per-rank batch of 3 (train_and_save);
//   "lm"          the tiny LM (dropout, EMA), 6 steps, a checkpoint every 3 (train_and_save);
//   "die"         the tiny LM with a checkpoint every step; rank 1 kills itself at step 3;
//   "stop"        the same, but rank 1 stops (SIGSTOP) instead, like a hung peer.
TEST(DistributedWorker, Run) {
  const char* role = std::getenv("ATTNKIT_DDP_ROLE");
  if (role == nullptr) GTEST_SKIP() << "a worker role of the Distributed tests";
  const fs::path out = std::getenv("ATTNKIT_DDP_OUT");
  try {
    auto environment = distributed_environment_from_env();
    ASSERT_TRUE(environment.has_value());
    DistributedOptions options;
    const char* timeout = std::getenv("ATTNKIT_DDP_TIMEOUT_MS");
    options.timeout = std::chrono::milliseconds(timeout ? std::atoll(timeout) : 15000);
    options.bucket_bytes = 24;  // several buckets even for this model
    DataParallel data_parallel(*environment, options);
    const std::string kind = role;
    if (kind == "regression") {
      LinearRegressionTask task(3);
      if (data_parallel.rank() != 0) {  // the broadcast must undo this
        torch::NoGradGuard no_grad;
        for (auto& p : task.module().parameters()) p.add_(1.0);
      }
      train_and_save(task, regression_options(), data_parallel, out);
    } else {
      TinyLmTask task;
      TrainerOptions o;
      o.quiet = true;
      o.steps = kind == "lm" ? 6 : 1000;
      o.checkpoint_every = kind == "lm" ? 3 : 1;
      o.ema_decay = kind == "lm" ? 0.9 : 0.0;
      if (kind == "lm") {
        train_and_save(task, o, data_parallel, out);
        return;
      }
      o.keep_last = 2;
      o.run_directory = (out / "run").string();
      Trainer trainer(task, o, &data_parallel);
      trainer.set_step_callback([&](const StepRecord& record) {
        if (data_parallel.rank() == 1 && record.step == 3) std::raise(kind == "stop" ? SIGSTOP : SIGKILL);
      });
      trainer.train();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    ::_exit(1);
  }
}

LaunchOptions worker_launch(const std::string& role, const fs::path& out) {
  LaunchOptions launch;
  launch.nproc = 2;
  launch.argv = {"/proc/self/exe", "--gtest_filter=DistributedWorker.Run"};
  launch.extra_environment = {{"ATTNKIT_DDP_ROLE", role}, {"ATTNKIT_DDP_OUT", out.string()}};
  launch.grace = std::chrono::milliseconds(2000);
  return launch;
}

TEST(Distributed, TwoProcessesMatchOneWithTheCombinedBatch) {
  SKIP_WITHOUT_GLOO();
  const fs::path out = scratch_directory("train");
  launch_local_workers(worker_launch("regression", out));
  auto two = io::load_safetensors((out / "params.safetensors").string());

  LinearRegressionTask task(6);  // micro-batch i = examples 6i .. 6i+5 = ranks 0 and 1 together
  Trainer trainer(task, regression_options());
  trainer.train();
  ASSERT_EQ(two.size(), 2u);
  for (const auto& item : task.module().named_parameters()) {
    EXPECT_TRUE(torch::allclose(two.at(item.key()), item.value(), 0, 1e-5)) << item.key();
    EXPECT_FALSE(torch::equal(two.at(item.key()), LinearRegressionTask(6).module().named_parameters()[item.key()]));
  }
  // Only rank 0 wrote: one metrics file and one final checkpoint with both ranks' RNG states.
  auto checkpoint = load_checkpoint((out / "run" / "checkpoints" / "step-00000005").string());
  EXPECT_EQ(checkpoint.world_size, 2);
  ASSERT_EQ(checkpoint.extra_tensors.size(), 1u);
  EXPECT_EQ(checkpoint.extra_tensors[0].first, "rng.cpu.1");
}

// With dropout, so each rank's generator state must come back from the checkpoint.
TEST(Distributed, ResumedRunMatchesTheUninterruptedOne) {
  SKIP_WITHOUT_GLOO();
  const fs::path out = scratch_directory("train");
  launch_local_workers(worker_launch("lm", out / "full"));
  LaunchOptions first = worker_launch("lm", out / "resumed");
  first.extra_environment["ATTNKIT_DDP_EXIT_AFTER"] = "4";  // the last checkpoint is step 3
  launch_local_workers(first);
  LaunchOptions second = worker_launch("lm", out / "resumed");
  second.extra_environment["ATTNKIT_DDP_RESUME"] = "1";
  launch_local_workers(second);
  auto full = io::load_safetensors((out / "full" / "params.safetensors").string());
  auto resumed = io::load_safetensors((out / "resumed" / "params.safetensors").string());
  for (const auto& [name, tensor] : full) EXPECT_TRUE(torch::equal(resumed.at(name), tensor)) << name;
  EXPECT_EQ(read_bytes(out / "full" / "run" / "checkpoints" / "step-00000006" / "ema.safetensors"),
            read_bytes(out / "resumed" / "run" / "checkpoints" / "step-00000006" / "ema.safetensors"));
}

// Every step directory is complete (loads), whatever the moment of the crash.
void expect_complete_checkpoints(const fs::path& run) {
  for (const auto& checkpoint : list_checkpoints((run / "checkpoints").string())) {
    EXPECT_EQ(error_of([&] { load_checkpoint(checkpoint.path); }), "") << checkpoint.path;
  }
}

TEST(Distributed, LauncherReportsAKilledWorker) {
  SKIP_WITHOUT_GLOO();
  const fs::path out = scratch_directory("train");
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { launch_local_workers(worker_launch("die", out)); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(message.find("worker rank 1 (pid "), std::string::npos) << message;
  EXPECT_NE(message.find(") was killed by signal 9 ("), std::string::npos) << message;
  EXPECT_NE(message.find("; the other workers were stopped"), std::string::npos) << message;
  EXPECT_LT(seconds, 60.0);  // bounded, generously
  expect_complete_checkpoints(out / "run");
}

// Starts ranks 0 and 1 of `role` directly (no launcher); returns their pids.
std::vector<pid_t> start_ranks(const std::string& role, const fs::path& out, const std::string& timeout_ms) {
  const int port = free_tcp_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pids.push_back(attnkit::testing::spawn_test_child(
        "DistributedWorker.Run",
        {{"ATTNKIT_DDP_ROLE", role}, {"ATTNKIT_DDP_OUT", out.string()}, {"ATTNKIT_DDP_TIMEOUT_MS", timeout_ms},
         {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}, {"RANK", std::to_string(rank)},
         {"WORLD_SIZE", "2"}},
        (out / fmt::format("rank{}.err", rank)).string()));
  }
  return pids;
}

// Rank 0 must end on its own, with status 1 and a one-line error naming the failed collective.
void expect_rank0_fails_on_its_own(pid_t pid, const fs::path& out) {
  int status0 = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (waitpid(pid, &status0, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status0, 0);
      FAIL() << "rank 0 hung after its peer died";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(WIFEXITED(status0) && WEXITSTATUS(status0) == 1) << status0;
  const std::string error = read_bytes(out / "rank0.err");
  EXPECT_NE(error.find("error: distributed "), std::string::npos) << error;
  EXPECT_NE(error.find(" failed on rank 0 of 2: "), std::string::npos) << error;
  expect_complete_checkpoints(out / "run");
}

TEST(Distributed, SurvivorStopsWithAClearErrorWhenAPeerDies) {
  SKIP_WITHOUT_GLOO();
  const fs::path out = scratch_directory("train");
  std::vector<pid_t> pids = start_ranks("die", out, "15000");
  ASSERT_TRUE(pids[0] > 0 && pids[1] > 0);
  int status1 = 0;
  waitpid(pids[1], &status1, 0);
  EXPECT_TRUE(WIFSIGNALED(status1) && WTERMSIG(status1) == SIGKILL) << status1;
  expect_rank0_fails_on_its_own(pids[0], out);
}

TEST(Distributed, SurvivorTimesOutOnAHungPeer) {
  SKIP_WITHOUT_GLOO();
  const fs::path out = scratch_directory("train");
  std::vector<pid_t> pids = start_ranks("stop", out, "3000");
  ASSERT_TRUE(pids[0] > 0 && pids[1] > 0);
  expect_rank0_fails_on_its_own(pids[0], out);
  EXPECT_NE(read_bytes(out / "rank0.err").find("within the 3000 ms timeout"), std::string::npos);
  kill(pids[1], SIGKILL);
  int status1 = 0;
  waitpid(pids[1], &status1, 0);
}

TEST(Distributed, EnvironmentErrors) {
  ::unsetenv("WORLD_SIZE");
  EXPECT_FALSE(distributed_environment_from_env().has_value());
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "2", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  EXPECT_EQ(error_of([] { distributed_environment_from_env(); }), "distributed: RANK='2' is not an integer in 0..1");
  ::setenv("RANK", "1", 1);
  ::setenv("MASTER_PORT", "http", 1);
  EXPECT_EQ(error_of([] { distributed_environment_from_env(); }),
            "distributed: MASTER_PORT='http' is not an integer in 1..65535");
  ::unsetenv("MASTER_ADDR");
  EXPECT_EQ(error_of([] { distributed_environment_from_env(); }), "distributed: environment variable MASTER_ADDR is not set");
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  auto environment = distributed_environment_from_env();
  ASSERT_TRUE(environment.has_value());
  EXPECT_EQ(environment->rank, 1);
  EXPECT_EQ(environment->local_rank, 1);
  for (const char* name : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(name);
}

TEST(Distributed, LauncherErrors) {
  LaunchOptions launch;
  launch.nproc = 0;
  EXPECT_EQ(error_of([&] { launch_local_workers(launch); }), "launcher: nproc must be >= 1, got 0");
  launch.nproc = 2;
  launch.argv = {"/bin/sh", "-c", "exit $RANK"};
  const std::string message = error_of([&] { launch_local_workers(launch); });
  EXPECT_EQ(message.rfind("worker rank 1 (pid ", 0), 0u) << message;
  EXPECT_NE(message.find(") exited with status 1; the other workers were stopped"), std::string::npos) << message;
  launch.argv = {"/bin/sh", "-c", "test \"$WORLD_SIZE$MASTER_ADDR\" = 2127.0.0.1"};
  launch_local_workers(launch);  // both succeed
}

TEST(Distributed, LauncherPassesSignalsOn) {
  LaunchOptions launch;
  launch.nproc = 2;
  // Rank 0 sends SIGTERM to the launcher (this process), which must pass it to both workers.
  launch.argv = {"/bin/sh", "-c", "if [ $RANK = 0 ]; then kill -TERM $PPID; fi; exec sleep 30"};
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { launch_local_workers(launch); });
  EXPECT_EQ(message.rfind("launcher: received signal 15 (Terminated) and passed it to the workers; worker rank ", 0), 0u)
      << message;
  EXPECT_NE(message.find(" was killed by signal 15 (Terminated)"), std::string::npos) << message;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
}

TEST(Distributed, SingleProcessGroupKeepsValues) {
  SKIP_WITHOUT_GLOO();
  DistributedEnvironment environment;
  environment.master_port = free_tcp_port();
  DistributedOptions options;
  options.bucket_bytes = 8;
  DataParallel group(environment, options);
  EXPECT_EQ(group.rank(), 0);
  EXPECT_EQ(group.world_size(), 1);
  torch::nn::Module module;
  at::Tensor w = module.register_parameter("w", torch::tensor({1.5f, -2.0f}));
  at::Tensor count = module.register_buffer("count", torch::tensor({7}, torch::kLong));
  group.broadcast_parameters(module);
  EXPECT_TRUE(torch::equal(w, torch::tensor({1.5f, -2.0f})));
  EXPECT_TRUE(torch::equal(count, torch::tensor({7}, torch::kLong)));
  w.mutable_grad() = torch::tensor({0.25f, 4.0f});
  at::Tensor unused = torch::zeros({3}, torch::requires_grad());
  group.average_gradients({w, unused});
  EXPECT_TRUE(torch::equal(w.grad(), torch::tensor({0.25f, 4.0f})));
  EXPECT_TRUE(torch::equal(unused.grad(), torch::zeros({3})));
  EXPECT_EQ(group.sum({1.0, 2.5}), (std::vector<double>{1.0, 2.5}));
  auto gathered = group.all_gather(torch::arange(3));
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(torch::equal(gathered[0], torch::arange(3)));
  group.barrier();
}

// Without Gloo (a PyPI torch 2.x build), asking for a process group is one clear line, and the
// launcher (no Gloo in it) still works.
TEST(Distributed, WithoutGlooDataParallelRefusesInOneLine) {
  if (distributed_available()) GTEST_SKIP() << "this LibTorch has c10d's Gloo backend";
  DistributedEnvironment environment;
  const std::string message = error_of([&] { DataParallel group(environment); });
  EXPECT_EQ(message.rfind("distributed: this attnkit was built against LibTorch ", 0), 0u) << message;
  EXPECT_NE(message.find("without c10d's Gloo backend"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace
}  // namespace attnkit::train
