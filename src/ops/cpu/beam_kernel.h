#pragma once
// A beam search step's scoring without LibTorch passes (src/decode/generation.cpp):
//   log_softmax_row: x ← log_softmax(x) in place, one row;
//   beam_candidates: the best `count` of total[k·V + v] = scores[k, v] + beam_score[k] over the
//   K rows of one source, as at::topk(total, count, largest, sorted) returns them.
// The beam step used to run log_softmax (a new [R, V] tensor), an add of the beam scores (another)
// and topk over [P, K·V] (which copies every row before selecting): three allocations and five
// passes over V = 58101 entries per row at a Marian decoder's step. Here: two passes in place
// (max, then exp-sum and subtract), and one read-only scan that keeps `count` candidates and skips
// any block of 64 entries whose maximum cannot enter them (most blocks, after the first).
// No LibTorch here; runtime dispatch to AVX-512 / AVX2 / baseline copies (kernel_isa.h).
#include <cstdint>
#include <vector>

namespace attnkit::ops::cpu {

// x[0, n) ← x − max − log Σ exp(x − max); a row without a finite maximum (all -inf, or NaN)
// becomes NaN where ATen's log_softmax gives NaN as well (callers treat such rows themselves).
void log_softmax_row(float* x, int64_t n);
// log_softmax(x)[index] as log_softmax_row gives it (the same bits), without writing the row: the
// score of a greedy step's chosen token.
float log_softmax_at(const float* x, int64_t n, int64_t index);
// The first index of x's largest value, a NaN counting as largest, as ATen's argmax (0 for n = 0):
// greedy decoding's choice.
int64_t argmax_row(const float* x, int64_t n);

struct BeamCandidate {
  float score;    // scores[k, v] + beam_score[k], in float arithmetic (as ATen's add)
  int64_t index;  // k · V + v
};

// The `count` largest of scores[k · ld + v] + beam_score[k] (k < K, v < V) in decreasing order;
// equal values in increasing index order; count is clamped to K · V. NaN entries are never
// selected, so fewer than count come back when the rest are NaN (at::topk would rank NaN first;
// generation.cpp then takes the ATen path).
std::vector<BeamCandidate> beam_candidates(const float* scores, int64_t ld, int64_t K, int64_t V,
                                           const float* beam_score, int64_t count);

}  // namespace attnkit::ops::cpu
