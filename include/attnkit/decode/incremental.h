#pragma once
// The decoding states, a layer above models/: what each attention layer keeps between the
// cached steps of layers::MultiHeadAttentionImpl::step (the layers compute; these hold).
//
//   softmax            KV cache: the keys and values of every column so far, preallocated to the
//                      horizon, plus which columns are real tokens (left padding is not a key).
//   linear attention   RNN state: S = Σ φ(k)[v, 1]ᵀ ([batch, heads, m, dv + 1], the numerator S
//                      and the denominator z = Σ φ(k) side by side; ops::feature_recurrence),
//                      fixed size: token t costs the same at t = 4096 as at t = 16 ("Transformers
//                      are RNNs").
//   cosFormer          the same sums over the cos/sin features. cosFormer's re-weighting needs
//                      its horizon M in advance; the state fixes M to the horizon given at start
//                      (prompt columns + max new tokens), so its outputs equal the parallel op run
//                      on a sequence of exactly M columns (causal: the columns after t change
//                      nothing before t). The parallel op picks M = the current length, so a
//                      model decoded with the state equals the full recomputation of the sequence
//                      right-padded to M columns.
//   cross attention    CrossAttentionCache: the encoder memory's keys and values (softmax) or
//                      the memory's keys and values for the feature map (linear), computed once.
// Synthesizer, talking-heads and mixture kinds have no incremental form here: the factory throws
// an attnkit::Error naming the kind.
//
// caches() is the factory models::Model::decoding takes; IncrementalModel is one stack's session
// (a TransformerModel and its StackCache) for callers that drive a stack directly.
#include "attnkit/layers/attention_cache.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/models/decoding.h"
#include "attnkit/models/transformer_model.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace attnkit::decode {

// The state for self attention `attention` (its spec says which), for at most `horizon` columns.
std::unique_ptr<layers::AttentionCache> make_state(const layers::MultiHeadAttentionImpl& attention,
                                                   int64_t horizon);

// Cross attention over a fixed memory: keys and values computed once at construction.
class CrossAttentionCache : public layers::MemoryCache {
 public:
  CrossAttentionCache(layers::MultiHeadAttentionImpl& attention, const at::Tensor& memory,
                      const c10::optional<at::Tensor>& memory_padding);
  at::Tensor attend(const layers::MultiHeadAttentionImpl& attention, const at::Tensor& q) override;
  void select_rows(const at::Tensor& index) override;
  bool memory_rows(int64_t rows, layers::MemoryRows& out) const override;

 private:
  // The keys and values of the memory the cache was made with, one row per memory row (never
  // copied): [memory rows, heads, S, d]; row_ids_[r] is the memory row that decoding row r reads.
  // select_rows only maps rows (a beam search's expansion to its beams and their reordering at
  // every step copy nothing); attend reads each memory row once for all the rows that read it
  // when they are consecutive blocks (the beams of one source).
  at::Tensor keys_, values_;
  c10::optional<at::Tensor> padding_;
  std::vector<int64_t> row_ids_;
};

// The factory of these states (models::Model::decoding, TransformerModelImpl::start_decoding).
const models::CacheFactory& caches();

// One decoding session of a TransformerModel (GPT-2, a BERT under UniLM, the decoder half of the
// encoder-decoder): TransformerModelImpl::start_decoding and step. The model must be in eval mode
// (in training the blocks would apply their dropout); call under torch::NoGradGuard.
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
  void select_rows(const at::Tensor& index) { cache_.select_rows(index); }
  int64_t length() const { return cache_.length; }
  int64_t horizon() const { return cache_.horizon; }
  int64_t state_bytes() const { return cache_.bytes(); }
  const models::TransformerModel& model() const { return model_; }

 private:
  models::TransformerModel model_;
  models::StackCache cache_;
};

// HF-style positions for a left-padded batch: cumsum(valid) − 1, 0 on padding. valid [batch, n].
at::Tensor positions_from_valid(const at::Tensor& valid);

}  // namespace attnkit::decode
