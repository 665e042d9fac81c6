#pragma once
// The kernels' parallel loop, on LibTorch's OpenMP threads.
//
// ATen's at::parallel_for is a header template whose parallel branch exists only where the
// including file is compiled with -fopenmp (ATen/Parallel-inl.h: `#ifdef INTRA_OP_PARALLEL`);
// attnkit's sources are not, so there it silently ran every loop on the calling thread. This
// function is compiled in one file with -fopenmp against the OpenMP runtime LibTorch itself uses
// (GCC's libgomp), so it honours at::set_num_threads and shares LibTorch's thread pool. No
// LibTorch here.
#include <cstdint>
#include <functional>

namespace attnkit::ops::cpu {

// Runs body(b, e) over [begin, end) split into contiguous chunks, one per thread, of at least
// `grain` items (grain >= 1): serially when the range has at most `grain` items, when one thread
// is set, inside another parallel region, or in a build without OpenMP (clang's sanitizer build,
// whose OpenMP runtime is not LibTorch's). An exception thrown by body is rethrown here.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body);

// Threads a parallel_for may use now (1 without OpenMP).
int parallel_threads();

}  // namespace attnkit::ops::cpu
