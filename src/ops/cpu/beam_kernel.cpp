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

ATTNKIT_INLINE void log_softmax_row_impl(float* __restrict x, int64_t n) {
  const float m = max_reduce(x, n, kNegInf);
  float lanes[kReductionLanes] = {};
  int64_t i = 0;
  for (; i + kReductionLanes <= n; i += kReductionLanes)
    for (int64_t j = 0; j < kReductionLanes; ++j) lanes[j] += exp_vectorizable(x[i + j] - m);
  float sum = 0;
  for (int64_t j = 0; j < kReductionLanes; ++j) sum += lanes[j];
  for (; i < n; ++i) sum += exp_vectorizable(x[i] - m);
  // x − max − log(sum), in ATen's order; a row whose max is ±inf or NaN gives NaN (x − m), as
  // ATen does.
  const float log_sum = std::log(sum);
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
ATTNKIT_KERNEL_ENTRY(beam_scan, beam_scan_impl,
                     (const float* scores, int64_t ld, int64_t K, int64_t V,
                      const float* beam_score, int64_t count, BeamCandidate* heap,
                      int64_t* size_out),
                     (scores, ld, K, V, beam_score, count, heap, size_out))

}  // namespace

void log_softmax_row(float* x, int64_t n) {
  if (n > 0) log_softmax_row_dispatch(x, n);
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
