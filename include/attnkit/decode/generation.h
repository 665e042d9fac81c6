#pragma once
// Text generation over any model that can feed columns incrementally (models/decoding.h):
// greedy, beam search and sampling with the logits processors of Hugging Face `generate`.
//
// Semantics follow transformers 4.38 (the test peer, tests/python/test_generate_hf.py):
//   greedy   processors on the raw logits, argmax. Finished rows are fed pad_token_id.
//   beam     log_softmax, processors, + beam score; top max(2, 1 + #eos)·num_beams candidates;
//            a candidate ending in EOS within the top num_beams becomes a finished hypothesis
//            scored sum_logprobs / generated_len^length_penalty (generated_len counts the EOS);
//            early_stopping true stops a prompt once num_beams hypotheses are finished, false
//            when no running beam can beat the worst finished one; at max_new_tokens the running
//            beams are added too. Returns the num_return_sequences best with those scores.
//   sample   processors, then temperature, top-k, top-p, min-p, then a draw from a generator
//            seeded with `seed` (same seed, same samples).
// Processors: repetition_penalty (each token seen in the prompt or generated: score / p when
// positive, · p when negative), no_repeat_ngram_size (a token that would repeat an n-gram seen
// in the prompt or generated gets −inf), bad_words_ids (a token that would complete a listed
// sequence gets −inf; a one-token sequence always; sequences equal to an EOS are ignored),
// min_new_tokens (EOS gets −inf before that), forced_bos_token_id (the first new token, when
// every prompt is one token, as the encoder-decoder's start token is: HF's cur_len == 1), forced_eos_token_id (the last
// new token at max_new_tokens; every other token −inf, it 0), in that order. The history
// the processors see is the prompt's real tokens + the generated ones (HF also sees left padding).
// Stop strings (greedy and sampling): a row ends when its decoded new text contains one.
#include "attnkit/models/decoding.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attnkit::decode {

enum class Strategy { Greedy, Beam, Sample };
Strategy parse_strategy(const std::string& name);  // greedy | beam | sample
const char* strategy_name(Strategy strategy);

struct GenerationConfig {
  Strategy strategy = Strategy::Greedy;
  int64_t max_new_tokens = 20;
  int64_t min_new_tokens = 0;
  // Beam search.
  int64_t num_beams = 4;
  double length_penalty = 1.0;
  bool early_stopping = false;
  int64_t num_return_sequences = 1;  // <= num_beams (beam); sampling draws this many per prompt
  // Sampling.
  double temperature = 1.0;
  int64_t top_k = 0;     // 0 = off
  double top_p = 1.0;    // 1 = off
  double min_p = 0.0;    // 0 = off
  uint64_t seed = 0;
  // Processors.
  double repetition_penalty = 1.0;  // 1 = off
  int64_t no_repeat_ngram_size = 0;  // 0 = off
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = 0;
  std::vector<std::vector<int64_t>> bad_words_ids;  // token sequences never generated
  int64_t forced_bos_token_id = -1;  // -1 = off
  int64_t forced_eos_token_id = -1;  // -1 = off
  std::vector<std::string> stop_strings;
  // Text of new tokens, for stop strings (required when stop_strings is not empty).
  std::function<std::string(const std::vector<int64_t>&)> detokenize;
  // Called with (prompt index, token) as each token is chosen (greedy and sampling; beam search
  // calls it for the best sequence at the end).
  std::function<void(int64_t, int64_t)> on_token;

  void validate() const;  // throws attnkit::Error naming the first bad field
};

struct Hypothesis {
  std::vector<int64_t> tokens;  // new tokens, an EOS that ended the sequence included
  double score = 0.0;  // beam: HF's sequence score; greedy/sample: Σ log p of the chosen tokens
                       // under the processed (and warped) distribution
};

// A model that decodes column by column: what the strategies drive (models::Model::decoding
// makes one for every model; tests drive their own).
using LanguageModel = models::DecodingSession;

// One result list per prompt (num_return_sequences hypotheses, best first for beam search).
// Prompts must be non-empty; they are left padded into one batch.
std::vector<std::vector<Hypothesis>> generate(LanguageModel& model,
                                              const std::vector<std::vector<int64_t>>& prompts,
                                              const GenerationConfig& config);

// ---- the pieces, exposed for tests --------------------------------------------------------
// Sampling filters on logits [rows, vocab] (removed entries become −inf).
at::Tensor top_k_filter(const at::Tensor& logits, int64_t k);
// Keeps, per row, the smallest set of most probable tokens whose probability mass reaches p.
at::Tensor top_p_filter(const at::Tensor& logits, double p);
// Keeps tokens whose probability is at least min_p times the row's largest probability.
at::Tensor min_p_filter(const at::Tensor& logits, double min_p);
// HF RepetitionPenaltyLogitsProcessor on one row's scores [vocab].
void apply_repetition_penalty(at::Tensor& scores, const std::vector<int64_t>& history,
                              double penalty);
// Tokens that would complete an n-gram already in `history`.
std::vector<int64_t> banned_ngram_tokens(const std::vector<int64_t>& history, int64_t n);

}  // namespace attnkit::decode
