#pragma once
// Input embeddings: token + position (learned, sinusoidal or none) + token type, then an optional
// (conditional) LayerNorm and an optional projection embedding_size -> hidden (ALBERT's
// factorised embeddings). Output [batch, n, hidden].
#include "attnkit/layers/conditional_layer_norm.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

namespace attnkit::layers {

// Sinusoidal: Vaswani et al.'s table, sin and cos interleaved (column 2i sin, 2i + 1 cos).
// SinusoidalHalves: the same frequencies laid out as Marian (and fairseq / tensor2tensor) do,
// the sines in the first ceil(size / 2) columns and the cosines after them.
enum class PositionEncoding { Learned, Sinusoidal, None, SinusoidalHalves };
// learned|sinusoidal|none|sinusoidal-halves
PositionEncoding parse_position_encoding(const std::string& name);
const char* position_encoding_name(PositionEncoding encoding);

// The fixed sinusoidal table of Vaswani et al. [positions, size] (interleaved, or in halves).
at::Tensor sinusoidal_positions(int64_t positions, int64_t size, bool halves = false);

struct EmbeddingsOptions {
  EmbeddingsOptions(int64_t vocab_size, int64_t embedding_size)
      : vocab_size_(vocab_size), embedding_size_(embedding_size) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, embedding_size);
  TORCH_ARG(int64_t, hidden) = 0;  // > 0 and != embedding_size: add a projection to hidden
  TORCH_ARG(int64_t, max_positions) = 512;
  TORCH_ARG(PositionEncoding, positions) = PositionEncoding::Learned;
  TORCH_ARG(int64_t, type_vocab_size) = 0;  // 0: no token-type embedding
  TORCH_ARG(bool, layer_norm) = true;
  TORCH_ARG(double, layer_norm_eps) = 1e-12;
  TORCH_ARG(int64_t, condition_size) = 0;
  TORCH_ARG(double, dropout) = 0.0;
  // Token embeddings are multiplied by this before positions are added (Marian's and BART's
  // scale_embedding: sqrt(hidden)).
  TORCH_ARG(double, token_scale) = 1.0;
  // Learned positions: rows of the table before position 0 (BART's 2): position p reads row
  // p + offset of a table of max_positions + offset rows.
  TORCH_ARG(int64_t, position_id_offset) = 0;
  // RoBERTa's positions (learned only; -1 = off): without position_ids, forward() gives a token
  // the position that counts the tokens before it in its row that are not this padding id (from
  // position_offset), and a padding token position -1, which reads row `padding_positions` of the
  // table, as Hugging Face's create_position_ids_from_input_ids does (position_ids may then hold
  // -1 too). Needs position_id_offset = padding_positions + 1.
  TORCH_ARG(int64_t, padding_positions) = -1;
};

class EmbeddingsImpl : public torch::nn::Module {
 public:
  explicit EmbeddingsImpl(const EmbeddingsOptions& options);
  // input_ids [batch, n] int64; token_type_ids [batch, n] (zeros if absent); positions start at
  // position_offset (incremental decoding), or are given per token by position_ids [batch, n]
  // (left-padded batches: each row counts from its first real token).
  at::Tensor forward(const at::Tensor& input_ids,
                     const c10::optional<at::Tensor>& token_type_ids = c10::nullopt,
                     int64_t position_offset = 0,
                     const c10::optional<at::Tensor>& condition = c10::nullopt,
                     const c10::optional<at::Tensor>& position_ids = c10::nullopt);
  // The same from token vectors [batch, n, embedding_size] in place of the looked-up (and scaled)
  // token embeddings: positions, token types, LayerNorm, dropout and projection as above (XLNet's
  // query stream starts from one learned vector at every position, models::TaskModelImpl::
  // two_stream_forward).
  at::Tensor forward_vectors(const at::Tensor& vectors,
                             const c10::optional<at::Tensor>& token_type_ids = c10::nullopt,
                             int64_t position_offset = 0,
                             const c10::optional<at::Tensor>& condition = c10::nullopt,
                             const c10::optional<at::Tensor>& position_ids = c10::nullopt);
  const EmbeddingsOptions& options() const { return options_; }

  torch::nn::Embedding token{nullptr}, position{nullptr}, token_type{nullptr};
  ConditionalLayerNorm norm{nullptr};
  torch::nn::Linear projection{nullptr};

 private:
  EmbeddingsOptions options_;
  at::Tensor sinusoid_;  // buffer for sinusoidal positions
};
TORCH_MODULE(Embeddings);

}  // namespace attnkit::layers
