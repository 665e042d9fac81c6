#pragma once
// Per-token decoding latency of a causal LM, as `make bench` (bench/decode_bench.cpp) and the
// demo's decoding stage measure it: random GPT-2-shaped models, a prefill of random tokens, then
// greedy-sized steps one column at a time (batch 1).
#include "attnkit/models/task_model.h"

#include <cstdint>
#include <string>

namespace attnkit::decode {

// A GPT-2-shaped causal LM with random weights: attention `kind` (layers::AttentionSpec grammar,
// made causal), no dropout, eval mode, drawn after torch::manual_seed(0) so that every kind of
// the same shape starts from the same generator state.
models::TaskModel random_causal_lm(const std::string& kind, int64_t layers, int64_t hidden,
                                   int64_t heads, int64_t vocab, int64_t max_positions);

struct TokenLatency {
  double ms_per_token = 0;  // median over the timed steps
  double prefill_s = 0;     // the prefill of `position` tokens
  int64_t state_bytes = 0;  // what the decoding state holds after the last step
};
// Prefills `position` random tokens (batch 1), then times `steps` single-token steps (forward
// and argmax of the logits). Needs position >= 1, steps >= 1 and the model's max_positions >=
// position + steps (attnkit::Error otherwise). Runs under NoGradGuard.
TokenLatency token_latency(const models::TaskModel& model, int64_t position, int64_t steps);

}  // namespace attnkit::decode
