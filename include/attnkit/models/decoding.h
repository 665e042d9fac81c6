#pragma once
// The decoding entry of every model (models::Model::decoding): a DecodingSession that the search
// strategies of decode/generation.h drive column by column, whatever the model's shape:
//   causal LM        a task model with a causal-LM head (GPT-2; optional class condition);
//   UniLM            a task model with a masked-LM head only: the prompt ([CLS] source [SEP]) is
//                    one bidirectional segment (token type 0) cached once; every new token (type
//                    1) sees the source and the tokens before it;
//   encoder-decoder  the encoder runs once per source; each decoder layer caches the memory's
//                    cross-attention keys and values; the prompt is the decoder's start token.
// The per-layer states (KV cache, RNN state, cross-attention cache) are decode/'s: the model asks
// a CacheFactory for them (decode::caches(), decode/incremental.h).
#include "attnkit/layers/attention_cache.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnkit::layers {
class MultiHeadAttentionImpl;
}

namespace attnkit::models {

// A model that decodes column by column.
class DecodingSession {
 public:
  virtual ~DecodingSession() = default;
  // A fresh session for `batch` rows and at most `horizon` columns (prompt + new tokens).
  virtual void start(int64_t batch, int64_t horizon) = 0;
  // ids, valid, positions [batch, n]: returns the next-token logits [batch, vocab] at the last
  // column of every row.
  virtual at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid,
                             const at::Tensor& positions) = 0;
  // Keeps rows `index` (beam expansion and reordering).
  virtual void select_rows(const at::Tensor& index) = 0;
  // Memory the layers' states hold now (0 when the session does not say).
  virtual int64_t state_bytes() const { return 0; }
};

// Makes the state each attention layer keeps between steps.
class CacheFactory {
 public:
  virtual ~CacheFactory() = default;
  // Self attention, for at most `horizon` columns. Throws attnkit::Error for a kind without a
  // cached form.
  virtual std::unique_ptr<layers::AttentionCache> self_attention(
      const layers::MultiHeadAttentionImpl& attention, int64_t horizon) const = 0;
  // Cross attention over `memory` [batch, S, width] (padding [batch, S] bool, true = real).
  virtual std::unique_ptr<layers::MemoryCache> cross_attention(
      layers::MultiHeadAttentionImpl& attention, const at::Tensor& memory,
      const c10::optional<at::Tensor>& padding) const = 0;
};

// One decoding session's state of a layer stack (TransformerModelImpl::start_decoding / step).
struct StackCache {
  std::vector<std::unique_ptr<layers::AttentionCache>> self;  // per layer (depth)
  std::vector<std::unique_ptr<layers::MemoryCache>> cross;    // per layer, with cross attention
  c10::optional<at::Tensor> condition;  // [batch, condition_size] for conditional LayerNorms
  int64_t horizon = 0;
  int64_t length = 0;  // columns consumed
  void select_rows(const at::Tensor& index);
  int64_t bytes() const;  // what the self-attention states hold
};

// What a session decodes.
struct DecodingRequest {
  // Task models: the prompts; the encoder-decoder: the sources (in its encoder's vocabulary).
  // Non-empty, ids in [0, DecodingTraits::prompt_vocab).
  std::vector<std::vector<int64_t>> prompts;
  int64_t condition_class = -1;          // a class-conditional causal LM's class (-1: none)
  int64_t decoder_start_token_id = -1;   // encoder-decoder; -1: the config's
  int64_t source_pad_id = -1;            // encoder-decoder's source padding; -1: the config's
  std::string name = "the model";        // for messages
};

// A session and the prompts the search starts from (the request's, or one decoder start token
// per source).
struct Decoding {
  std::unique_ptr<DecodingSession> session;
  std::vector<std::vector<int64_t>> prompts;
};

// How a model's prompts are written and ended: the tokenizer's side of decoding.
struct DecodingTraits {
  // The end-of-sequence token's name (text::end_token_id's model token): "[SEP]" for UniLM,
  // "</s>" for the encoder-decoder, else "<|endoftext|>".
  const char* end_token = "<|endoftext|>";
  // Whether text::end_token_id may fall back to other end tokens (an encoder-decoder trained
  // here ends at its tokenizer's own end token, [SEP] for BERT-style vocabularies).
  bool end_token_fallbacks = false;
  // Whether prompts are encoded with the tokenizer's special tokens (UniLM prompts and an
  // encoder-decoder's sources are).
  bool prompts_take_special_tokens = false;
  // Whether the output continues the prompt (a language model) or stands alone (the
  // encoder-decoder's translation of its source).
  bool continues_prompt = true;
  int64_t prompt_vocab = 0;  // prompt ids lie in [0, prompt_vocab)
  int64_t output_pad_id = 0;  // the pad id of the stack that generates (the decoder's)
  // The learned or sinusoidal positions of the stack that generates (0: no limit, rotary or no
  // positions, or a UniLM model, which keeps its positions inside the table itself). Its prompt (a
  // language model's) or its start token (the decoder's) and every new token but the last take
  // one each: max_new_tokens_limit says how many new tokens fit.
  int64_t output_positions = 0;
};

// The most new tokens `traits`' model can generate after `prompts` before its output stack runs
// out of positions (every prompt the same way: the longest decides); -1 when there is no limit or
// a prompt is longer than the table (the prompt checks refuse that).
int64_t max_new_tokens_limit(const DecodingTraits& traits, const std::vector<std::vector<int64_t>>& prompts);

}  // namespace attnkit::models
