#include "beam_kernel.h"

#include "kernel_isa.h"
#include "vector_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnkit::ops::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Entries per block of the candidate scan: one max over the block decides whether any can enter.
constexpr int64_t kScanBlock = 64;

// The row's max m and log Σ exp(x − m), both passes vectorised.
ATTNKIT_INLINE void max_and_log_sum_impl(const float* __restrict x, int64_t n, float& m, float& log_sum) {
  m = max_reduce(x, n, kNegInf);
  float lanes[kReductionLanes] = {};
  int64_t i = 0;
  for (; i + kReductionLanes <= n; i += kReductionLanes)
    for (int64_t j = 0; j < kReductionLanes; ++j) lanes[j] += exp_vectorizable(x[i + j] - m);
  float sum = 0;
  for (int64_t j = 0; j < kReductionLanes; ++j) sum += lanes[j];
  for (; i < n; ++i) sum += exp_vectorizable(x[i] - m);
  log_sum = std::log(sum);
}

// The first index of the row's largest value, a NaN counting as largest (ATen's argmax): one
// vectorised pass for the max (and whether any value is NaN), then blocks of kReductionLanes
// tested whole, to the first holding the max.
ATTNKIT_INLINE int64_t argmax_row_impl(const float* __restrict x, int64_t n) {
  float lanes[kReductionLanes];
  for (int64_t j = 0; j < kReductionLanes; ++j) lanes[j] = kNegInf;
  unsigned nan = 0;
  int64_t i = 0;
  for (; i + kReductionLanes <= n; i += kReductionLanes)
    for (int64_t j = 0; j < kReductionLanes; ++j) {
      lanes[j] = std::max(lanes[j], x[i + j]);
      nan |= static_cast<unsigned>(x[i + j] != x[i + j]);
    }
  float m = kNegInf;
  for (int64_t j = 0; j < kReductionLanes; ++j) m = std::max(m, lanes[j]);
  for (; i < n; ++i) {
    m = std::max(m, x[i]);
    nan |= static_cast<unsigned>(x[i] != x[i]);
  }
  if (nan != 0) {
    for (i = 0; i < n; ++i)
      if (x[i] != x[i]) return i;
  }
  for (i = 0; i + kReductionLanes <= n; i += kReductionLanes) {
    unsigned hit = 0;
    for (int64_t j = 0; j < kReductionLanes; ++j) hit |= static_cast<unsigned>(x[i + j] == m);
    if (hit != 0) break;
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;  // not reached: some value equals the max
}

ATTNKIT_INLINE void log_softmax_row_impl(float* __restrict x, int64_t n) {
  float m, log_sum;
  max_and_log_sum_impl(x, n, m, log_sum);
  // x − max − log(sum), in ATen's order; a row whose max is ±inf or NaN gives NaN (x − m), as
  // ATen does.
  for (int64_t c = 0; c < n; ++c) x[c] = (x[c] - m) - log_sum;
}

// heap[0, size) is a binary heap whose front is the worst kept candidate (lower score, or the
// same score and a higher index).
bool better(const BeamCandidate& a, const BeamCandidate& b) {
  return a.score > b.score || (a.score == b.score && a.index < b.index);
}

inline void offer(BeamCandidate* heap, int64_t& size, int64_t count, float score, int64_t index) {
  if (score != score) return;  // NaN
  if (size < count) {
    heap[size++] = {score, index};
    std::push_heap(heap, heap + size, better);
  } else if (score > heap[0].score) {  // equal: the kept one has the lower index
    std::pop_heap(heap, heap + size, better);
    heap[size - 1] = {score, index};
    std::push_heap(heap, heap + size, better);
  }
}

ATTNKIT_INLINE void beam_scan_impl(const float* __restrict scores, int64_t ld, int64_t K,
                                   int64_t V, const float* beam_score, int64_t count,
                                   BeamCandidate* heap, int64_t* size_out) {
  int64_t size = 0;
  for (int64_t k = 0; k < K; ++k) {
    const float bs = beam_score[k];
    const float* row = scores + k * ld;
    int64_t v = 0;
    for (; v + kScanBlock <= V; v += kScanBlock) {
      // float addition is monotonic, so max(x) + bs = max(x + bs); NaN entries are ignored by
      // max_reduce and by offer.
      if (size == count && !(max_reduce(row + v, kScanBlock, kNegInf) + bs > heap[0].score))
        continue;
      for (int64_t c = v; c < v + kScanBlock; ++c) offer(heap, size, count, row[c] + bs, k * V + c);
    }
    for (; v < V; ++v) offer(heap, size, count, row[v] + bs, k * V + v);
  }
  *size_out = size;
}

ATTNKIT_KERNEL_ENTRY(log_softmax_row_dispatch, log_softmax_row_impl, (float* x, int64_t n), (x, n))
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))) int64_t argmax_row_avx512(
    const float* x, int64_t n) {
  return argmax_row_impl(x, n);
}
__attribute__((target("avx2,fma"))) int64_t argmax_row_avx2(const float* x, int64_t n) {
  return argmax_row_impl(x, n);
}
int64_t argmax_row_baseline(const float* x, int64_t n) { return argmax_row_impl(x, n); }
ATTNKIT_KERNEL_ENTRY(max_and_log_sum_dispatch, max_and_log_sum_impl,
                     (const float* x, int64_t n, float& m, float& log_sum), (x, n, m, log_sum))
ATTNKIT_KERNEL_ENTRY(beam_scan, beam_scan_impl,
                     (const float* scores, int64_t ld, int64_t K, int64_t V,
                      const float* beam_score, int64_t count, BeamCandidate* heap,
                      int64_t* size_out),
                     (scores, ld, K, V, beam_score, count, heap, size_out))

}  // namespace

void log_softmax_row(float* x, int64_t n) {
  if (n > 0) log_softmax_row_dispatch(x, n);
}

int64_t argmax_row(const float* x, int64_t n) {
  if (n <= 0) return 0;
  switch (kernel_isa()) {
    case KernelIsa::Avx512: return argmax_row_avx512(x, n);
    case KernelIsa::Avx2: return argmax_row_avx2(x, n);
    default: return argmax_row_baseline(x, n);
  }
}

float log_softmax_at(const float* x, int64_t n, int64_t index) {
  float m, log_sum;
  max_and_log_sum_dispatch(x, n, m, log_sum);
  return (x[index] - m) - log_sum;
}

std::vector<BeamCandidate> beam_candidates(const float* scores, int64_t ld, int64_t K, int64_t V,
                                           const float* beam_score, int64_t count) {
  count = std::max<int64_t>(0, std::min(count, K * V));
  std::vector<BeamCandidate> heap(static_cast<size_t>(count));
  int64_t size = 0;
  if (count > 0) beam_scan(scores, ld, K, V, beam_score, count, heap.data(), &size);
  heap.resize(static_cast<size_t>(size));
  std::sort_heap(heap.begin(), heap.end(), better);
  return heap;
}

}  // namespace attnkit::ops::cpu
