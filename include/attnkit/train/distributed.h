#pragma once
// Data parallelism over torch's c10d engine (ProcessGroupGloo, rendezvous through a TCPStore),
// configured like torchrun: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (LOCAL_RANK optional), so
// the same binary runs on one machine (launch_local_workers) or several.
//   - parameters and buffers are broadcast from rank 0 when training starts;
//   - gradients are averaged with all-reduce over flattened buckets of ~25 MB;
//   - every collective has a timeout, and a dead peer (its connections close) makes the others
//     throw attnkit::Error naming the operation and this rank within a bounded time, never hang.
// The c10d headers stay in distributed.cpp (pimpl).
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnkit::train {

struct DistributedEnvironment {
  std::string master_address = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
};

// Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK (default: RANK). Returns nullopt
// when WORLD_SIZE is unset. Throws attnkit::Error naming the variable for a missing or malformed
// one (e.g. RANK >= WORLD_SIZE, a port outside 1..65535).
std::optional<DistributedEnvironment> distributed_environment_from_env();

// Whether this build has c10d's Gloo backend, which DataParallel needs: true against Debian's
// LibTorch; false against a PyPI torch 2.x wheel, whose Gloo headers are not shipped (DataParallel's
// constructor then throws attnkit::Error saying so).
bool distributed_available();

struct DistributedOptions {
  std::chrono::milliseconds timeout{60000};  // rendezvous and every collective
  int64_t bucket_bytes = 25 * 1024 * 1024;   // gradient all-reduce buckets
};

class DataParallel {
 public:
  // Rendezvous: rank 0 hosts the TCPStore at MASTER_ADDR:MASTER_PORT, every rank connects and
  // joins a Gloo process group. Throws attnkit::Error when the peers do not all arrive in time.
  explicit DataParallel(const DistributedEnvironment& environment,
                        const DistributedOptions& options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const;
  int world_size() const;

  // Copies rank 0's parameters and buffers into every rank's module.
  void broadcast_parameters(torch::nn::Module& module);
  // Replaces each gradient with its mean over the ranks (an undefined gradient counts as zeros and
  // is defined afterwards). All ranks must pass the same parameters in the same order.
  void average_gradients(const std::vector<at::Tensor>& parameters);
  // Element-wise sums over the ranks.
  std::vector<double> sum(const std::vector<double>& values);
  // Every rank's `tensor` (same shape and dtype everywhere), by rank.
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor);
  void barrier();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Starts `nproc` local worker processes running `argv` (argv[0] a path, run with execv) with
// MASTER_ADDR=127.0.0.1, MASTER_PORT (options.master_port, or a free port when 0), RANK,
// LOCAL_RANK and WORLD_SIZE set (plus `extra_environment`), forwards SIGINT/SIGTERM to them and
// waits. When a worker exits with a non-zero status or is killed by a signal, the others are
// terminated (SIGTERM, then SIGKILL after a grace period) and attnkit::Error names the rank and the
// status, e.g. "worker rank 1 (pid 4242) was killed by signal 9 (Killed)". Returns when all
// workers exited with status 0.
struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> argv;
  int master_port = 0;
  std::map<std::string, std::string> extra_environment;
  std::chrono::milliseconds grace{5000};
};
void launch_local_workers(const LaunchOptions& options);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_tcp_port();

}  // namespace attnkit::train
