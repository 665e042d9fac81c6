// Fault injection (docs/robustness.md): training killed with SIGKILL at random moments always
// resumes from the last complete checkpoint; a full disk during a checkpoint keeps the previous
// one and says so; distributed set-ups that cannot work (a peer that never comes, mismatched
// WORLD_SIZE, a port in use) end with one clear line within a bounded time.
//
// The kill loop runs FaultKill.* with a few kills in `make test`; ATTNKIT_SOAK=1 (`make soak`) runs
// many more.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "attnkit/io/atomic_file.h"
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
using attnkit::testing::read_bytes;
using attnkit::testing::scratch_directory;
using attnkit::testing::TinyLmTask;

// Steps of the kill-loop run: 60, or 400 under ATTNKIT_SOAK (so that kills land mid-run).
int64_t kill_loop_steps() { return std::getenv("ATTNKIT_SOAK") != nullptr ? 400 : 60; }

TrainerOptions kill_loop_options(const fs::path& run) {
  TrainerOptions o;
  o.quiet = true;
  o.steps = kill_loop_steps();
  o.checkpoint_every = 1;  // a checkpoint write is in flight most of the time
  o.keep_last = 3;
  o.ema_decay = 0.9;
  o.run_directory = run.string();
  return o;
}

// The worker of the kill loop: trains the tiny LM into ATTNKIT_FAULT_OUT/run, resuming when it has
// checkpoints, and appends the step it resumed from to ATTNKIT_FAULT_OUT/resumed.txt.
TEST(FaultWorker, Train) {
  const char* out_text = std::getenv("ATTNKIT_FAULT_OUT");
  if (out_text == nullptr) GTEST_SKIP() << "the worker of FaultKill.*";
  const fs::path out = out_text;
  TinyLmTask task;
  const TrainerOptions o = kill_loop_options(out / "run");
  Trainer trainer(task, o);
  if (!list_checkpoints((out / "run" / "checkpoints").string()).empty()) {
    const int64_t step = trainer.resume(o.run_directory);
    std::ofstream(out / "resumed.txt", std::ios::app) << step << "\n" << std::flush;
  }
  trainer.train();
}

// The newest step checkpoint, checking that every listed one is complete (loads).
int64_t last_complete_step(const fs::path& run) {
  int64_t last = 0;
  for (const auto& checkpoint : list_checkpoints((run / "checkpoints").string())) {
    EXPECT_EQ(error_of([&] { load_checkpoint(checkpoint.path); }), "") << checkpoint.path;
    last = checkpoint.step;
  }
  return last;
}

std::vector<int64_t> resumed_steps(const fs::path& out) {
  std::vector<int64_t> steps;
  std::ifstream in(out / "resumed.txt");
  for (int64_t step; in >> step;) steps.push_back(step);
  return steps;
}

void kill_loop(int kills, uint32_t seed) {
  const fs::path out = scratch_directory("train");
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> delay_ms(300, 2500);
  int killed_running = 0;
  for (int round = 0; round < kills; ++round) {
    const int64_t before = last_complete_step(out / "run");
    const size_t resumes_before = resumed_steps(out).size();
    const pid_t pid = attnkit::testing::spawn_test_child("FaultWorker.Train", {{"ATTNKIT_FAULT_OUT", out.string()}},
                                                         (out / fmt::format("worker{}.err", round)).string());
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(random)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) ++killed_running;
    // What it resumed from, if it got that far, is what was complete before it started.
    const std::vector<int64_t> resumes = resumed_steps(out);
    if (resumes.size() > resumes_before) {
      EXPECT_EQ(resumes.back(), before) << "round " << round;
    }
    // Every step directory left behind loads; a kill never leaves a partial one under a step name.
    EXPECT_GE(last_complete_step(out / "run"), before) << "round " << round;
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), 0) << read_bytes(out / fmt::format("worker{}.err", round));
      break;  // finished before the kill
    }
  }
  EXPECT_GT(killed_running, 0);
  // A last run without a kill reaches the end from the last complete checkpoint.
  const int64_t before = last_complete_step(out / "run");
  const int status = attnkit::testing::run_test_child("FaultWorker.Train", {{"ATTNKIT_FAULT_OUT", out.string()}});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  if (before > 0 && before < kill_loop_steps()) {
    EXPECT_EQ(resumed_steps(out).back(), before);
  }
  EXPECT_EQ(last_complete_step(out / "run"), kill_loop_steps());
  for (const auto& entry : fs::directory_iterator(out / "run" / "checkpoints")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u) << "left behind: " << entry.path();
  }
  // What the loop did, for docs/robustness.md (ctest -V shows it).
  std::string resumed;
  for (const int64_t step : resumed_steps(out)) resumed += fmt::format(" {}", step);
  fmt::print("kill loop: {} runs killed mid-run over {} steps; runs resumed from steps:{}\n", killed_running,
             kill_loop_steps(), resumed);
}

TEST(FaultKill, TrainingKilledAtRandomResumesFromTheLastCompleteCheckpoint) {
  const bool soak = std::getenv("ATTNKIT_SOAK") != nullptr;
  kill_loop(soak ? 40 : 4, soak ? 2024u : 7u);
}

// ---- full disk during a checkpoint ---------------------------------------------------------------

struct ScopedEnvironment {
  ScopedEnvironment(const char* name, const std::string& value) : name(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnvironment() { ::unsetenv(name); }
  const char* name;
};

TEST(FaultDisk, FullDiskDuringACheckpointKeepsThePreviousOneAndSaysSo) {
  const fs::path dir = scratch_directory("train");
  TinyLmTask task;
  TrainerOptions o;
  o.quiet = true;
  o.steps = 6;
  o.checkpoint_every = 2;
  o.run_directory = dir.string();
  std::string message;
  {
    ScopedEnvironment fault("ATTNKIT_FAULT_ENOSPC", "step-00000004");
    Trainer trainer(task, o);
    message = error_of([&] { trainer.train(); });
  }
  const std::string kept = (dir / "checkpoints" / "step-00000002").string();
  EXPECT_EQ(message.rfind("checkpoint " + (dir / "checkpoints" / "step-00000004").string() + " not written (", 0), 0u)
      << message;
  EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
  EXPECT_NE(message.find("); the last complete checkpoint " + kept + " is kept"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  // Nothing half-written is left; the kept checkpoint loads and a resume continues from it.
  const auto checkpoints = list_checkpoints((dir / "checkpoints").string());
  ASSERT_EQ(checkpoints.size(), 1u);
  EXPECT_EQ(checkpoints[0].path, kept);
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints"))
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u) << entry.path();
  TinyLmTask again;
  Trainer resumed(again, o);
  EXPECT_EQ(resumed.resume(dir.string()), 2);
  EXPECT_EQ(resumed.train().steps, 6);
}

TEST(FaultDisk, FullDiskKeepsTheOldFileContent) {
  const fs::path dir = scratch_directory("train");
  const std::string path = (dir / "state.txt").string();
  io::write_file_atomically(path, "old");
  ScopedEnvironment fault("ATTNKIT_FAULT_ENOSPC", "state.txt");
  const std::string message = error_of([&] { io::write_file_atomically(path, "new content"); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
  EXPECT_EQ(read_bytes(path), "old");
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u);  // no temporary file left
}

// ---- distributed set-ups that cannot work --------------------------------------------------------

DistributedEnvironment loopback(int rank, int world_size, int port) {
  DistributedEnvironment environment;
  environment.rank = rank;
  environment.world_size = world_size;
  environment.master_address = "127.0.0.1";
  environment.master_port = port;
  return environment;
}

// Runs `f` and returns {its attnkit::Error message, seconds taken}.
template <typename F>
std::pair<std::string, double> timed_error(F f) {
  const auto start = std::chrono::steady_clock::now();
  std::string message = error_of(f);
  return {message, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

TEST(FaultDistributed, PeerThatNeverComesTimesOut) {
  SKIP_WITHOUT_GLOO();
  DistributedOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  const int port = free_tcp_port();
  const auto [message, seconds] = timed_error([&] { DataParallel(loopback(0, 2, port), options); });
  // "cannot rendezvous at ..." or "cannot join the Gloo group at ...: Socket Timeout".
  EXPECT_EQ(message.rfind("distributed: rank 0 cannot ", 0), 0u) << message;
  EXPECT_NE(message.find(fmt::format("127.0.0.1:{}", port)), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_LT(seconds, 60.0);  // bounded, generously (the timeout is 2 s)
}

TEST(FaultDistributed, MismatchedWorldSizesFailOnBothRanks) {
  SKIP_WITHOUT_GLOO();
  DistributedOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  const int port = free_tcp_port();
  std::string messages[2];
  const auto start = std::chrono::steady_clock::now();
  std::thread rank0([&] { messages[0] = error_of([&] { DataParallel(loopback(0, 2, port), options); }); });
  std::thread rank1([&] { messages[1] = error_of([&] { DataParallel(loopback(1, 3, port), options); }); });
  rank0.join();
  rank1.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 90.0);
  // Rank 0 waits for a second worker that announced another world size; neither may succeed or hang.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(messages[rank].rfind(fmt::format("distributed: rank {} cannot ", rank), 0), 0u) << messages[rank];
    EXPECT_EQ(messages[rank].find('\n'), std::string::npos) << messages[rank];
  }
}

TEST(FaultDistributed, PortInUse) {
  SKIP_WITHOUT_GLOO();
  // Hold a listening socket on a port, then start rank 0 there.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  DistributedOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  const auto [message, seconds] = timed_error([&] { DataParallel(loopback(0, 2, port), options); });
  ::close(fd);
  EXPECT_EQ(message.rfind(fmt::format("distributed: rank 0 cannot rendezvous at 127.0.0.1:{}: ", port), 0), 0u)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_LT(seconds, 60.0);
}

}  // namespace
}  // namespace attnkit::train
