// Dense layers of a decoding step with M rows: attnkit's few-row kernel (src/ops/cpu/gemv_kernel.h,
// gemm_few_rows; gemv_rows for M = 1) against at::linear (OpenBLAS sgemm), one thread, on the
// weight shapes of a Marian / Opus-MT decoder (512 × 512 attention, 2048 × 512 and 512 × 2048 FFN,
// 58101 × 512 LM head). Prints one line per shape and M: milliseconds per call, from the thread's
// CPU time (CLOCK_THREAD_CPUTIME_ID, so a loaded machine does not inflate it) and wall time, best
// of `--repeats` rounds. It picks kFewRowsMax in include/attnkit/layers/row_linear.h (docs/decoding.md).
//   build/bench/attnkit_bench_few_rows [--repeats 5]
#include "../src/ops/cpu/gemv_kernel.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Best CPU and wall milliseconds per call over `repeats` rounds of `calls` calls.
std::pair<double, double> time_ms(const std::function<void()>& f, int repeats, int calls) {
  f();  // warm-up
  double best_cpu = 1e30, best_wall = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double c0 = thread_cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    const double cpu = (thread_cpu_seconds() - c0) * 1e3 / calls;
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count() / calls;
    best_cpu = std::min(best_cpu, cpu);
    best_wall = std::min(best_wall, wall);
  }
  return {best_cpu, best_wall};
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::stoi(argv[i + 1]);
  at::set_num_threads(1);
  at::manual_seed(0);
  std::printf("%-12s %4s %12s %12s %8s %12s %12s\n", "out x in", "M", "kernel cpu", "sgemm cpu",
              "ratio", "kernel wall", "sgemm wall");
  for (auto [out, in] : {std::pair<int64_t, int64_t>{512, 512}, {2048, 512}, {512, 2048}, {58101, 512}}) {
    at::Tensor W = at::randn({out, in}), b = at::randn({out});
    for (int64_t M : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
      at::Tensor X = at::randn({M, in}), Y = at::empty({M, out});
      // About 2e8 multiply-adds per round whatever the shape.
      const int calls = int(std::max<int64_t>(1, 200000000 / (out * in * M)));
      const auto kernel = time_ms(
          [&] {
            if (M == 1)
              attnkit::ops::cpu::gemv_rows(W.data_ptr<float>(), in, X.data_ptr<float>(), in,
                                           b.data_ptr<float>(), Y.data_ptr<float>(), 0, out);
            else
              attnkit::ops::cpu::gemm_few_rows(W.data_ptr<float>(), in, X.data_ptr<float>(), in, M,
                                               in, b.data_ptr<float>(), Y.data_ptr<float>(), out, 0,
                                               out);
          },
          repeats, calls);
      const auto sgemm = time_ms([&] { at::linear(X, W, b); }, repeats, calls);
      std::printf("%5lld x %-4lld %4lld %12.3f %12.3f %8.2f %12.3f %12.3f\n", (long long)out,
                  (long long)in, (long long)M, kernel.first, sgemm.first, sgemm.first / kernel.first,
                  kernel.second, sgemm.second);
      std::fflush(stdout);
    }
  }
  return 0;
}
