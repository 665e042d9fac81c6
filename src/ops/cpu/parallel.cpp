#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace attnkit::ops::cpu {

int parallel_threads() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (begin >= end) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t n = end - begin;
  const int64_t threads = std::min<int64_t>(parallel_threads(), (n + grain - 1) / grain);
  if (threads <= 1) {
    body(begin, end);
    return;
  }
#ifdef _OPENMP
  const int64_t chunk = (n + threads - 1) / threads;
  std::atomic_flag failed = ATOMIC_FLAG_INIT;
  std::exception_ptr error;
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    const int64_t b = begin + omp_get_thread_num() * chunk;
    if (b < end) {
      try {
        body(b, std::min(end, b + chunk));
      } catch (...) {
        if (!failed.test_and_set()) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
#else
  body(begin, end);
#endif
}

}  // namespace attnkit::ops::cpu
