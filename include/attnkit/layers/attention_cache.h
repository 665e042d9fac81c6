#pragma once
// What a layer's cached decoding step (MultiHeadAttentionImpl::step, TransformerBlockImpl::step)
// reads and writes. The layers compute; the state they keep between steps is behind these two
// interfaces, implemented in decode/ (decode/incremental.h: the KV cache, the linear-attention
// and cosFormer RNN states, the cross-attention cache).
//
// Batches are left padded. Every step feeds `n` new columns for every row.
#include "attnkit/ops/rotary.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace attnkit::layers {

class MultiHeadAttentionImpl;

// The new columns of one step.
struct StepInputs {
  at::Tensor valid;      // [batch, n] bool: false = left padding (never a key; output ignored)
  at::Tensor positions;  // [batch, n] int64: each token's position (HF's cumsum(mask) − 1)
  // true: the n new columns see each other causally; false: all of them (a UniLM source, a
  // prefix-LM prefix: one bidirectional segment).
  bool causal = true;
  // Rotary positions (the model's tables at `positions`, ops::RotaryTables; undefined = none),
  // applied to the new columns' queries and keys before they meet the cache.
  ops::RotaryTables rotary;
};

// A float32 KV cache's buffers as the fused one-column step (layers/fused_step.h) writes and
// reads them: keys [batch, kv_heads, capacity, key_size], values [batch, kv_heads, capacity,
// value_size], valid [batch, capacity] (false = padding, never a key), all contiguous. The step's
// new column goes to slot `slot` of every row; it then attends slots [0, filled) in place (the
// prefix of the columns so far, or a sliding window's whole ring, in any order).
struct KVColumn {
  float* keys = nullptr;
  float* values = nullptr;
  bool* valid = nullptr;
  int64_t batch = 0, kv_heads = 0, capacity = 0, key_size = 0, value_size = 0;
  int64_t slot = 0, filled = 0;
};

// The state one self-attention layer keeps between steps.
class AttentionCache {
 public:
  virtual ~AttentionCache() = default;
  // q, k, v: the new columns per head ([batch, heads, n, key_size | value_size]), positions
  // already applied. Takes the new keys into the state and returns the new columns' contexts
  // [batch, heads, n, value_size] (before head gates and the output projection).
  virtual at::Tensor attend(const MultiHeadAttentionImpl& attention, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, const StepInputs& step) = 0;
  // Keeps rows `index` (int64 [new_batch], repeats allowed) in that order (beam search).
  virtual void select_rows(const at::Tensor& index) = 0;
  virtual int64_t length() const = 0;  // columns consumed
  virtual int64_t bytes() const = 0;   // memory the state holds
  virtual std::string name() const = 0;
  // A float32 KV cache whose buffers exist (after its first attend) and have room for one more
  // column: true, with `out` describing where that column goes. Nothing changes until
  // column_written(), which counts the column once the caller has written it (key, value and
  // validity of every row). Other states: false.
  virtual bool one_column(KVColumn& out) const {
    (void)out;
    return false;
  }
  virtual void column_written() {}
};

// A float32 cross-attention cache's memory as the fused step (layers/fused_step.h) reads it in
// place: keys [memory rows, heads, length, key_size] and values [.., value_size] by element strides
// (memory row, head, position; the feature dimension contiguous), padding [memory rows, length]
// (true = a real token; null = none) with its row stride, and `group`: decoding row r reads memory
// row r / group (a batch: 1; the beams of one source: the beam count).
struct MemoryRows {
  const float* keys = nullptr;
  const float* values = nullptr;
  const bool* padding = nullptr;
  int64_t memory_rows = 0, heads = 0, length = 0, key_size = 0, value_size = 0;
  int64_t key_strides[3] = {0, 0, 0}, value_strides[3] = {0, 0, 0};
  int64_t padding_stride = 0;
  int64_t group = 0;
};

// Cross attention's state: the keys and values (or feature sums) of a fixed encoder memory.
class MemoryCache {
 public:
  virtual ~MemoryCache() = default;
  // A float32 softmax memory read by `rows` decoding rows in consecutive blocks (MemoryRows::group):
  // true, with `out` describing it. Other states and arrangements: false.
  virtual bool memory_rows(int64_t rows, MemoryRows& out) const {
    (void)rows;
    (void)out;
    return false;
  }
  // q [rows, n, heads · key_size]: the new columns' queries, heads not yet split. Returns their
  // contexts [rows, heads, n, value_size].
  virtual at::Tensor attend(const MultiHeadAttentionImpl& attention, const at::Tensor& q) = 0;
  virtual void select_rows(const at::Tensor& index) = 0;
};

}  // namespace attnkit::layers
