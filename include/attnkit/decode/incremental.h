#pragma once
// Incremental (cached) forward passes for decoding, a layer above models/.
//
// Every attention layer keeps an AttentionState between calls:
//   softmax            KVCache: the keys and values of every column so far, preallocated to the
//                      horizon, plus which columns are real tokens (left padding is not a key).
//   linear attention   LinearAttentionState: S = Σ φ(k)[v, 1]ᵀ ([batch, heads, m, dv + 1], the
//                      numerator S and the denominator z = Σ φ(k) side by side), fixed size:
//                      token t costs the same at t = 4096 as at t = 16 ("Transformers are RNNs").
//   cosFormer          CosformerState: the same sums over the cos/sin features. cosFormer's
//                      re-weighting needs its horizon M in advance; the state fixes M to the
//                      horizon given at start() (prompt columns + max new tokens), so its outputs
//                      equal the parallel op run on a sequence of exactly M columns (causal: the
//                      columns after t change nothing before t). The parallel op picks M = the
//                      current length, so a model decoded with the state equals the full
//                      recomputation of the sequence right-padded to M columns.
//   cross attention    CrossAttentionCache: the encoder memory's keys and values (or, for the
//                      feature-map kinds, the memory's sums), computed once.
// Synthesizer, talking-heads and mixture kinds have no incremental form here: make_state throws
// an attnkit::Error naming the kind.
//
// Batches: rows are left padded. Every call feeds `n` new columns for every row, with `valid`
// [batch, n] (false = padding: never a key, its own output is ignored) and per-row `positions`
// [batch, n] (the learned / sinusoidal position of each token; HF's cumsum(mask) − 1).
// Beam search reorders rows with select_rows(index).
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/models/transformer_model.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnkit::decode {

class AttentionState {
 public:
  virtual ~AttentionState() = default;
  // x [batch, n, hidden] (the attention sub-layer's input), valid [batch, n] bool. causal:
  // the n new columns see each other causally (false: all of them, e.g. a UniLM source segment
  // or a prefix-LM prefix; the softmax cache and the linear/cosFormer sums support both). Returns the sub-layer output [batch, n, hidden].
  virtual at::Tensor step(layers::MultiHeadAttentionImpl& attention, const at::Tensor& x,
                          const at::Tensor& valid, bool causal) = 0;
  // Keeps rows `index` (int64 [new_batch], repeats allowed) in that order.
  virtual void select_rows(const at::Tensor& index) = 0;
  virtual int64_t length() const = 0;  // columns consumed
  virtual int64_t bytes() const = 0;   // memory the state holds
  virtual std::string name() const = 0;
};

// The state for self attention `attention` (its spec says which), for at most `horizon` columns.
std::unique_ptr<AttentionState> make_state(const layers::MultiHeadAttentionImpl& attention,
                                           int64_t horizon);

// Cross attention over a fixed memory: keys and values computed once at construction.
class CrossAttentionCache {
 public:
  CrossAttentionCache(layers::MultiHeadAttentionImpl& attention, const at::Tensor& memory,
                      const c10::optional<at::Tensor>& memory_padding);
  at::Tensor forward(layers::MultiHeadAttentionImpl& attention, const at::Tensor& x);
  void select_rows(const at::Tensor& index);

 private:
  // The keys and values of the memory the cache was made with, one row per memory row (never
  // copied): [memory rows, heads, S, d]; row_ids_[r] is the memory row that decoding row r reads.
  // select_rows only maps rows (a beam search's expansion to its beams and their reordering at
  // every step copy nothing); forward reads each memory row once for all the rows that read it
  // when they are consecutive blocks (the beams of one source).
  at::Tensor keys_, values_;
  c10::optional<at::Tensor> padding_;
  std::vector<int64_t> row_ids_;
};

// One decoding session of a TransformerModel (GPT-2, a BERT under UniLM, the decoder half of the
// encoder-decoder). Each block runs its own residual / LayerNorm / paths sequence around the
// cached sub-layers (layers::TransformerBlockImpl::forward with BlockSublayers). The model must be
// in eval mode (in training the blocks would apply their dropout); call under torch::NoGradGuard.
class IncrementalModel {
 public:
  IncrementalModel(models::TransformerModel model, int64_t batch, int64_t horizon,
                   const c10::optional<at::Tensor>& memory = c10::nullopt,
                   const c10::optional<at::Tensor>& memory_padding = c10::nullopt,
                   const c10::optional<at::Tensor>& condition = c10::nullopt);
  // ids, valid, positions [batch, n]; token_types optional [batch, n]. Returns the last hidden
  // states [batch, n, hidden] (after the final LayerNorm when the model has one).
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid, const at::Tensor& positions,
                     const c10::optional<at::Tensor>& token_types = c10::nullopt,
                     bool causal = true);
  void select_rows(const at::Tensor& index);
  int64_t length() const { return length_; }
  int64_t horizon() const { return horizon_; }
  int64_t state_bytes() const;
  const models::TransformerModel& model() const { return model_; }

 private:
  models::TransformerModel model_;
  int64_t horizon_ = 0;
  int64_t length_ = 0;
  c10::optional<at::Tensor> condition_;
  std::vector<std::unique_ptr<AttentionState>> self_;
  std::vector<std::unique_ptr<CrossAttentionCache>> cross_;
};

// HF-style positions for a left-padded batch: cumsum(valid) − 1, 0 on padding. valid [batch, n].
at::Tensor positions_from_valid(const at::Tensor& valid);

}  // namespace attnkit::decode
