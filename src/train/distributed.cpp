// Data parallelism over c10d's ProcessGroupGloo. This file alone includes the c10d headers. A
// LibTorch without c10d's Gloo backend (ATTNKIT_HAVE_C10D_GLOO 0, src/torch_compat.h)
// compiles the launcher only; DataParallel then refuses with one line.
#include "attnkit/train/distributed.h"

#include "attnkit/error.h"
#include "attnkit/parse.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include "../torch_compat.h"
#if ATTNKIT_HAVE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <thread>

extern char** environ;

namespace attnkit::train {
namespace {

std::string one_line(std::string text) {
  auto newline = text.find('\n');
  if (newline != std::string::npos) text.resize(newline);
  return text;
}

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int environment_integer(const char* name, int low, int high) {
  auto value = env_value(name);
  if (!value) throw Error(fmt::format("distributed: environment variable {} is not set", name));
  const auto number = try_parse_int(*value);
  if (number && *number >= low && *number <= high) return static_cast<int>(*number);
  throw Error(fmt::format("distributed: {}='{}' is not an integer in {}..{}", name, *value, low, high));
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

}  // namespace

std::optional<DistributedEnvironment> distributed_environment_from_env() {
  if (!env_value("WORLD_SIZE")) return std::nullopt;
  DistributedEnvironment env;
  env.world_size = environment_integer("WORLD_SIZE", 1, 1 << 20);
  env.rank = environment_integer("RANK", 0, env.world_size - 1);
  env.local_rank = env_value("LOCAL_RANK") ? environment_integer("LOCAL_RANK", 0, 1 << 20) : env.rank;
  auto address = env_value("MASTER_ADDR");
  if (!address) throw Error("distributed: environment variable MASTER_ADDR is not set");
  env.master_address = *address;
  env.master_port = environment_integer("MASTER_PORT", 1, 65535);
  return env;
}

#if ATTNKIT_HAVE_C10D_GLOO
bool distributed_available() { return true; }

struct DataParallel::Impl {
  DistributedEnvironment environment;
  DistributedOptions options;
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;

  // Runs a collective; any failure becomes one attnkit::Error naming it and this rank.
  void run(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
    try {
      start()->wait();
    } catch (const std::exception& e) {
      throw Error(fmt::format("distributed {} failed on rank {} of {}: {} (a peer process died, or did "
                              "not answer within the {} ms timeout)", what, environment.rank,
                              environment.world_size, one_line(e.what()), options.timeout.count()));
    }
  }

  // Applies `collective` to `tensors` flattened into buckets of at most bucket_bytes (a larger
  // tensor gets a bucket of its own) of one dtype each, then copies the results back.
  void bucketed(const std::vector<at::Tensor>& tensors, const std::function<void(at::Tensor&)>& collective) {
    size_t begin = 0;
    while (begin < tensors.size()) {
      size_t end = begin;
      int64_t bytes = 0;
      while (end < tensors.size() && tensors[end].scalar_type() == tensors[begin].scalar_type() &&
             (end == begin || bytes + tensors[end].nbytes() <= static_cast<size_t>(options.bucket_bytes))) {
        bytes += static_cast<int64_t>(tensors[end].nbytes());
        ++end;
      }
      std::vector<at::Tensor> flat;
      for (size_t i = begin; i < end; ++i) flat.push_back(tensors[i].reshape({-1}));
      at::Tensor bucket = at::cat(flat);
      collective(bucket);
      int64_t offset = 0;
      for (size_t i = begin; i < end; ++i) {
        const int64_t n = tensors[i].numel();
        tensors[i].copy_(bucket.narrow(0, offset, n).view(tensors[i].sizes()));
        offset += n;
      }
      begin = end;
    }
  }
};

DataParallel::DataParallel(const DistributedEnvironment& environment, const DistributedOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->environment = environment;
  impl_->options = options;
  if (environment.world_size < 1 || environment.rank < 0 || environment.rank >= environment.world_size) {
    throw Error(fmt::format("distributed: rank {} is outside 0..{}", environment.rank, environment.world_size - 1));
  }
  if (options.bucket_bytes <= 0) throw Error("distributed: bucket_bytes must be > 0");
  const std::string where = fmt::format("{}:{}", environment.master_address, environment.master_port);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(environment.master_port);
    store_options.isServer = environment.rank == 0;
    store_options.numWorkers = static_cast<size_t>(environment.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(environment.master_address, store_options);
  } catch (const std::exception& e) {
    throw Error(fmt::format("distributed: rank {} cannot rendezvous at {}: {}", environment.rank, where,
                            one_line(e.what())));
  }
  try {
    auto group_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    if (auto interface = env_value("GLOO_SOCKET_IFNAME")) {
      group_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*interface));
    } else if (is_loopback(environment.master_address)) {
      group_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      group_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, environment.rank,
                                                               environment.world_size, group_options);
  } catch (const std::exception& e) {
    throw Error(fmt::format("distributed: rank {} cannot join the Gloo group at {}: {}", environment.rank,
                            where, one_line(e.what())));
  }
}

DataParallel::~DataParallel() = default;

int DataParallel::rank() const { return impl_->environment.rank; }
int DataParallel::world_size() const { return impl_->environment.world_size; }

void DataParallel::broadcast_parameters(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (const auto& parameter : module.parameters()) tensors.push_back(parameter.detach());
  for (const auto& buffer : module.buffers()) tensors.push_back(buffer);
  impl_->bucketed(tensors, [&](at::Tensor& bucket) {
    std::vector<at::Tensor> list{bucket};
    impl_->run("broadcast", [&] { return impl_->group->broadcast(list); });
  });
}

void DataParallel::average_gradients(const std::vector<at::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> gradients;
  for (const at::Tensor& parameter : parameters) {
    at::Tensor p = parameter;
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    gradients.push_back(p.grad());
  }
  const double world = static_cast<double>(world_size());
  impl_->bucketed(gradients, [&](at::Tensor& bucket) {
    std::vector<at::Tensor> list{bucket};
    impl_->run("gradient all-reduce", [&] { return impl_->group->allreduce(list); });
    bucket.div_(world);
  });
}

std::vector<double> DataParallel::sum(const std::vector<double>& values) {
  at::Tensor tensor = at::tensor(values, at::kDouble);
  std::vector<at::Tensor> list{tensor};
  impl_->run("all-reduce", [&] { return impl_->group->allreduce(list); });
  return std::vector<double>(tensor.data_ptr<double>(), tensor.data_ptr<double>() + tensor.numel());
}

std::vector<at::Tensor> DataParallel::all_gather(const at::Tensor& tensor) {
  std::vector<at::Tensor> input{tensor.contiguous()};
  std::vector<std::vector<at::Tensor>> output(1);
  for (int r = 0; r < world_size(); ++r) output[0].push_back(at::empty_like(input[0]));
  impl_->run("all-gather", [&] { return impl_->group->allgather(output, input); });
  return output[0];
}

void DataParallel::barrier() {
  impl_->run("barrier", [&] { return impl_->group->barrier(); });
}
#else
bool distributed_available() { return false; }

struct DataParallel::Impl {};

DataParallel::DataParallel(const DistributedEnvironment& environment, const DistributedOptions& options) {
  throw Error(fmt::format("distributed: this attnkit was built against LibTorch {} without c10d's Gloo "
                          "backend, so data-parallel training is unavailable (build against Debian's "
                          "LibTorch for it; docs/architecture.md)", TORCH_VERSION));
}
DataParallel::~DataParallel() = default;
int DataParallel::rank() const { return 0; }
int DataParallel::world_size() const { return 1; }
void DataParallel::broadcast_parameters(torch::nn::Module&) {}
void DataParallel::average_gradients(const std::vector<at::Tensor>&) {}
std::vector<double> DataParallel::sum(const std::vector<double>& values) { return values; }
std::vector<at::Tensor> DataParallel::all_gather(const at::Tensor& tensor) { return {tensor}; }
void DataParallel::barrier() {}
#endif

// ---------------------------------------------------------------------------------------------
// Local launcher.

int free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(fmt::format("free_tcp_port: socket: {}", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    int error = errno;
    ::close(fd);
    throw Error(fmt::format("free_tcp_port: {}", std::strerror(error)));
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

namespace {

volatile sig_atomic_t forwarded_signal = 0;
extern "C" void remember_signal(int signal) { forwarded_signal = signal; }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return fmt::format("stopped with wait status {}", status);
}

}  // namespace

void launch_local_workers(const LaunchOptions& options) {
  if (options.nproc < 1) throw Error(fmt::format("launcher: nproc must be >= 1, got {}", options.nproc));
  if (options.argv.empty()) throw Error("launcher: no command to run");
  const int port = options.master_port > 0 ? options.master_port : free_tcp_port();

  // Everything the children need is built before fork (no allocation between fork and exec).
  std::vector<std::vector<std::string>> environments(static_cast<size_t>(options.nproc));
  for (int rank = 0; rank < options.nproc; ++rank) {
    std::map<std::string, std::string> variables;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string text(*entry);
      auto equals = text.find('=');
      if (equals != std::string::npos) variables[text.substr(0, equals)] = text.substr(equals + 1);
    }
    for (const auto& [key, value] : options.extra_environment) variables[key] = value;
    variables["MASTER_ADDR"] = "127.0.0.1";
    variables["MASTER_PORT"] = std::to_string(port);
    variables["RANK"] = std::to_string(rank);
    variables["LOCAL_RANK"] = std::to_string(rank);
    variables["WORLD_SIZE"] = std::to_string(options.nproc);
    variables["LOCAL_WORLD_SIZE"] = std::to_string(options.nproc);
    for (const auto& [key, value] : variables) environments[static_cast<size_t>(rank)].push_back(key + "=" + value);
  }
  std::vector<char*> argv;
  for (const std::string& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<std::vector<char*>> envp(environments.size());
  for (size_t r = 0; r < environments.size(); ++r) {
    for (const std::string& entry : environments[r]) envp[r].push_back(const_cast<char*>(entry.c_str()));
    envp[r].push_back(nullptr);
  }

  struct sigaction action {}, old_int {}, old_term {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  forwarded_signal = 0;
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  auto restore_handlers = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  };

  std::map<pid_t, int> running;  // pid -> rank
  auto kill_all = [&](int signal) {
    for (const auto& [pid, rank] : running) ::kill(pid, signal);
  };
  auto stop_all = [&] {
    kill_all(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + options.grace;
    while (!running.empty()) {
      int status = 0;
      for (auto it = running.begin(); it != running.end();) {
        const pid_t pid = ::waitpid(it->first, &status, WNOHANG);
        it = (pid == it->first || (pid < 0 && errno == ECHILD)) ? running.erase(it) : std::next(it);
      }
      if (running.empty()) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        kill_all(SIGKILL);
        for (const auto& [p, rank] : running) ::waitpid(p, &status, 0);
        running.clear();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };

  for (int rank = 0; rank < options.nproc; ++rank) {
    pid_t pid = ::fork();
    if (pid < 0) {
      int error = errno;
      stop_all();
      restore_handlers();
      throw Error(fmt::format("launcher: cannot start worker rank {}: fork: {}", rank, std::strerror(error)));
    }
    if (pid == 0) {
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::execve(argv[0], argv.data(), envp[static_cast<size_t>(rank)].data());
      ::_exit(127);
    }
    running[pid] = rank;
  }

  // Polls (rather than blocking in waitpid) so that a signal is passed on at once; only our own
  // children are waited for.
  std::string failure;
  int received = 0;
  while (!running.empty() && failure.empty()) {
    if (forwarded_signal != 0) {
      received = forwarded_signal;
      forwarded_signal = 0;
      kill_all(received);
    }
    // Every worker that has ended is reaped in one pass. A worker killed by a signal is the cause
    // and the others' error exits ("peer closed the connection") its effect, so it is named
    // first, whatever the order the pids come in.
    std::vector<std::pair<bool, std::string>> ended;  // (killed by a signal, description)
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      const pid_t pid = ::waitpid(it->first, &status, WNOHANG);
      if (pid != it->first) {
        ++it;
        continue;
      }
      const int rank = it->second;
      it = running.erase(it);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      std::string text = fmt::format("worker rank {} (pid {}) {}", rank, pid, describe_status(status));
      if (WIFEXITED(status) && WEXITSTATUS(status) == 127) text += fmt::format(" (could not run {}?)", options.argv[0]);
      ended.emplace_back(WIFSIGNALED(status), std::move(text));
    }
    std::stable_sort(ended.begin(), ended.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [signalled, text] : ended) failure += (failure.empty() ? "" : "; then ") + text;
    if (ended.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!failure.empty()) stop_all();
  restore_handlers();
  if (failure.empty()) return;
  if (received != 0) {
    throw Error(fmt::format("launcher: received signal {} ({}) and passed it to the workers; {}", received,
                            strsignal(received), failure));
  }
  throw Error(failure + "; the other workers were stopped");
}

}  // namespace attnkit::train
