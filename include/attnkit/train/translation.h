#pragma once
// The translation pipeline, Marian's conventions (which `attnkit generate` follows for every
// encoder-decoder), shared by `attnkit train --task.name translation` (train/tasks/translation.cpp)
// and `attnkit analyze heads` on an encoder-decoder:
//   pairs            source<TAB>target examples encoded by the tokenizer: the source with its
//                    special tokens, the target without (by Marian's target.spm when the tokenizer
//                    has one); a pair with no token on a side is dropped;
//   cut              a source keeps its first `source_length` tokens, a target its first
//                    `target_length` (the decoder's input then holds target_length + 1);
//   teacher forcing  the encoder reads the source; the decoder reads start + target and predicts
//                    target + the end token; right padded with pad (labels with kIgnoreLabel);
//   decoding         greedy or beam search through the model's decoding entry, from the start
//                    token: the new tokens without the end token that ended them.
#include "attnkit/data/text_datasets.h"
#include "attnkit/decode/generation.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/text/text_tokenizer.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::train {

struct TranslationPair {
  std::vector<int64_t> source, target;
  std::string reference;  // the target as the file has it
};

// The first `limit` pairs of `data` that keep a token on both sides (0 = all).
std::vector<TranslationPair> encode_translation_pairs(const data::Seq2SeqData& data,
                                                      const text::TextTokenizer& tokenizer,
                                                      bool source_special_tokens,
                                                      int64_t limit = 0);

// Cuts every pair's source to `source_length` and target to `target_length` tokens.
void cut_translation_pairs(std::vector<TranslationPair>& pairs, int64_t source_length,
                           int64_t target_length);

// The ids of the decoder's start, the padding and the end token.
struct TranslationTokens {
  int64_t start = 0, pad = 0, eos = 0;
};

struct TranslationBatch {
  at::Tensor source, source_mask;          // [batch, S]
  at::Tensor decoder_input, target_mask;   // [batch, T + 1]: start + target
  at::Tensor labels;                       // [batch, T + 1]: target + eos, kIgnoreLabel padding
};
TranslationBatch translation_batch(const std::vector<const TranslationPair*>& rows,
                                   const TranslationTokens& tokens);

// The new tokens of each source (without the end token config.eos_token_ids[0] when it ended
// them), decoded with `config` in batches of `batch_size` sources (0 = one batch), the sources
// padded with tokens.pad, the decoder starting from tokens.start.
std::vector<std::vector<int64_t>> translate(models::EncoderDecoderModelImpl& model,
                                            const std::vector<std::vector<int64_t>>& sources,
                                            const decode::GenerationConfig& config,
                                            const TranslationTokens& tokens,
                                            int64_t batch_size = 0);

}  // namespace attnkit::train
