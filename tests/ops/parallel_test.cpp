// The kernels' parallel loop (src/ops/cpu/parallel.h, private to the library, exported by
// libattnkit): with two threads set it really runs on two threads (ATen's header-only
// at::parallel_for ran attnkit's loops on one thread, since attnkit is not built with -fopenmp),
// covers the range once, stays serial when nested or below the grain, and rethrows.
#include "../../src/ops/cpu/parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using attnkit::ops::cpu::parallel_for;
using attnkit::ops::cpu::parallel_threads;

// Sets LibTorch's thread count for one test.
struct Threads {
  explicit Threads(int n) : previous(at::get_num_threads()) { at::set_num_threads(n); }
  ~Threads() { at::set_num_threads(previous); }
  int previous;
};

TEST(ParallelFor, RunsOnLibTorchsThreadsAndCoversTheRangeOnce) {
#if defined(__clang__)
  GTEST_SKIP() << "clang build: the loop is serial by design (parallel.h)";
#endif
  Threads two(2);
  EXPECT_EQ(parallel_threads(), 2);
  std::mutex m;
  std::set<std::thread::id> ids;
  std::vector<int> hits(1000, 0);
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
    // Long enough that a second thread cannot find the range already done.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
    for (int64_t i = b; i < e; ++i) ++hits[i];
  });
  EXPECT_EQ(ids.size(), 2u);
  for (int h : hits) ASSERT_EQ(h, 1);
}

TEST(ParallelFor, SerialBelowTheGrainWithOneThreadAndWhenNested) {
  Threads two(2);
  int calls = 0;
  parallel_for(0, 10, 10, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
  });
  EXPECT_EQ(calls, 1);
  {
    Threads one(1);
    calls = 0;
    parallel_for(5, 105, 1, [&](int64_t b, int64_t e) {
      ++calls;
      EXPECT_EQ(b, 5);
      EXPECT_EQ(e, 105);
    });
    EXPECT_EQ(calls, 1);
  }
  std::mutex m;
  std::vector<int64_t> inner_calls;
  parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    int64_t n = 0;
    parallel_for(0, 100, 1, [&](int64_t, int64_t) { ++n; });
    std::lock_guard<std::mutex> lock(m);
    inner_calls.push_back(n);
  });
  for (int64_t n : inner_calls) EXPECT_EQ(n, 1);
  parallel_for(3, 3, 1, [&](int64_t, int64_t) { FAIL() << "empty range"; });
}

TEST(ParallelFor, RethrowsTheBodysException) {
  Threads two(2);
  EXPECT_THROW(parallel_for(0, 100, 1,
                            [](int64_t b, int64_t) {
                              if (b == 0) throw std::runtime_error("first chunk");
                            }),
               std::runtime_error);
}

}  // namespace
