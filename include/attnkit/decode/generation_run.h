#pragma once
// The generation behind `attnkit generate`: a model of any shape (its decoding entry,
// models/decoding.h: a causal LM, UniLM, or an encoder-decoder whose prompts are its sources),
// prompts as token ids, the strategy settings and a per-token streaming callback in; the results
// with their scores out (generation.h). Also the Hugging Face generation settings
// (generation_config.json over config.json). Token text (prompts in, text out) stays with the
// caller.
#include "attnkit/decode/generation.h"
#include "attnkit/models/model.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnkit::decode {

// The end-of-sequence ids and the pad id, into config.eos_token_ids and config.pad_token_id:
// EOS: `eos` when given; none with no_eos; else config.json's eos_token_id (an id or a list;
// hf_config may be null or not an object), else tokenizer_eos. Pad: config.json's pad_token_id,
// else the first EOS, else model_pad.
void set_special_tokens(GenerationConfig& config, const nlohmann::json& hf_config,
                        const std::vector<int64_t>& eos, bool no_eos,
                        std::optional<int64_t> tokenizer_eos, int64_t model_pad);

// The generation rules a Hugging Face config (config.json, with generation_config.json's keys
// over it) carries, into `config`: bad_words_ids (Marian forbids its pad token this way),
// forced_bos_token_id, forced_eos_token_id; absent or null keys leave them off. Throws
// attnkit::Error "WHERE: 'KEY' ..." for a value of the wrong type.
void set_generation_rules(GenerationConfig& config, const nlohmann::json& hf_config,
                          const std::string& where);

// A model directory's generation settings: a Hugging Face directory's config.json (`config_json`;
// not an object for an attnkit directory, which then has none) with the keys of its
// generation_config.json over it; `source` names the file for messages (generation_config.json
// when the directory has one, else config.json). Throws attnkit::Error when
// generation_config.json is not valid JSON.
struct GenerationSettings {
  nlohmann::json values;
  std::string source;
};
GenerationSettings read_generation_settings(const nlohmann::json& config_json,
                                            const std::string& model_dir);

// Called with (prompt index, token) as each token is chosen (beam search: the best sequence's
// tokens at the end).
using TokenCallback = std::function<void(int64_t prompt, int64_t token)>;

struct GenerationRequest {
  std::shared_ptr<models::Model> model;
  std::string name;  // the model's directory, for messages
  int64_t condition_class = -1;  // class id of a class-conditional causal LM (-1: none)
  // Non-empty, ids in the model's vocabulary (an encoder-decoder's: the sources, in its
  // encoder's vocabulary; the decoder starts from decoder_start_token_id).
  std::vector<std::vector<int64_t>> prompts;
  // Encoder-decoder; -1: the model config's decoder_start_token_id, else the decoder's pad id.
  int64_t decoder_start_token_id = -1;
  GenerationConfig config;                    // its on_token is replaced by on_token
  TokenCallback on_token;
};

// A moment on the two clocks a generation is timed with: the steady clock (wall seconds) and
// the process's CPU clock (user + system seconds of all its threads).
struct TimePoint {
  double wall = 0.0, cpu = 0.0;
  static TimePoint now();
};

// Where one run_generation's time went, measured inside the process.
struct GenerationTimes {
  // Prefill: from the decoding entry to the first new token's logits (the session's start, which
  // runs an encoder-decoder's encoder over its sources, and the forward over the prompts).
  double prefill_seconds = 0.0, prefill_cpu_seconds = 0.0;
  // Decoding: the rest (every token's choice, the forwards of the later steps, beam search's
  // reordering). Both are 0 with max_new_tokens 0, where no forward runs.
  double decode_seconds = 0.0, decode_cpu_seconds = 0.0;
  int64_t prompt_tokens = 0;  // ids of all prompts (an encoder-decoder's: its sources)
  int64_t new_tokens = 0;     // ids of all returned sequences (an EOS that ended one included)
  int64_t decode_steps = 0;   // forwards after the prefill's

  // Adds another generation's times and counts (consecutive generations of one command).
  GenerationTimes& operator+=(const GenerationTimes& o) {
    prefill_seconds += o.prefill_seconds;
    prefill_cpu_seconds += o.prefill_cpu_seconds;
    decode_seconds += o.decode_seconds;
    decode_cpu_seconds += o.decode_cpu_seconds;
    prompt_tokens += o.prompt_tokens;
    new_tokens += o.new_tokens;
    decode_steps += o.decode_steps;
    return *this;
  }
};

// Generates in eval mode without gradients through the model's decoding entry
// (models::Model::decoding, which checks the prompts: attnkit::Error "generate: ..." for an
// empty prompt or an id outside [0, vocab)): one result list per prompt. With `times`, also
// where the time went (the session is wrapped; the results are the same).
std::vector<std::vector<Hypothesis>> run_generation(const GenerationRequest& request,
                                                    GenerationTimes* times = nullptr);

// --json's "timing" fields of `times`: prefill_s, prefill_cpu_s, decode_s, decode_cpu_s,
// prompt_tokens, new_tokens, decode_steps.
nlohmann::json times_json(const GenerationTimes& times);

// The settings into `request` (its model set): the end and pad ids (set_special_tokens, the
// model's output pad last), the rules (set_generation_rules), and decoder_start_token_id when
// the request has none (an encoder-decoder's; other models ignore it).
void apply_generation_settings(GenerationRequest& request, const GenerationSettings& settings,
                               const std::vector<int64_t>& eos, bool no_eos,
                               std::optional<int64_t> tokenizer_eos);

// --json's document: {"strategy", "results": [{"prompt": shown[p], "prompt_ids", "sequences":
// [{"ids", "score"[, "text"]}]}]}, "text" when detokenize is given.
nlohmann::json results_json(Strategy strategy, const std::vector<std::string>& shown,
                            const std::vector<std::vector<int64_t>>& prompts,
                            const std::vector<std::vector<Hypothesis>>& results,
                            const std::function<std::string(const std::vector<int64_t>&)>& detokenize);

}  // namespace attnkit::decode
