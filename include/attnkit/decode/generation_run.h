#pragma once
// The generation behind `attnkit generate`: a model of any shape (a task model with a causal-LM
// head: CausalLM; with a masked-LM head only: UnilmLM; an encoder-decoder: Seq2SeqLM, the
// prompts being its sources; language_models.h), prompts as token ids, the strategy settings and
// a per-token streaming callback in; the results with their scores out (generation.h). Token
// text (prompts in, text out) stays with the caller.
#include "attnkit/decode/generation.h"
#include "attnkit/models/model.h"
#include "attnkit/models/task_model.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnkit::decode {

// A model with a masked-LM head and no causal-LM head decodes as UniLM: its prompts carry the
// tokenizer's special tokens ([CLS] ... [SEP]) and its end token is "[SEP]".
bool decodes_as_unilm(const models::HeadsConfig& heads);
// The tokenizer token that ends a sequence by default: "[SEP]" (UniLM) or "<|endoftext|>".
const char* default_end_token(const models::HeadsConfig& heads);

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

// The language model for a task model. Throws attnkit::Error when it has neither LM head, or for
// a condition class with UniLM.
std::unique_ptr<LanguageModel> language_model(const models::TaskModel& model,
                                              const std::string& name,
                                              int64_t condition_class = -1);
// The end-of-sequence token name of a model of any shape ("[SEP]" for UniLM, else
// "<|endoftext|>"; an encoder-decoder: "</s>"): text::end_token_id's model token (the tokenizer
// gives its id, text/text_tokenizer.h).
const char* default_end_token(const models::Model& model);
// Whether prompts are encoded with the tokenizer's special tokens: UniLM prompts and an
// encoder-decoder's sources are.
bool prompts_take_special_tokens(const models::Model& model);

// Checks the prompts (attnkit::Error "generate: ..." for an empty prompt or an id outside
// [0, vocab)), then generates in eval mode without gradients: one result list per prompt.
std::vector<std::vector<Hypothesis>> run_generation(const GenerationRequest& request);

// --json's document: {"strategy", "results": [{"prompt": shown[p], "prompt_ids", "sequences":
// [{"ids", "score"[, "text"]}]}]}, "text" when detokenize is given.
nlohmann::json results_json(Strategy strategy, const std::vector<std::string>& shown,
                            const std::vector<std::vector<int64_t>>& prompts,
                            const std::vector<std::vector<Hypothesis>>& results,
                            const std::function<std::string(const std::vector<int64_t>&)>& detokenize);

}  // namespace attnkit::decode
