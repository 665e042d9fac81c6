#include "attnkit/decode/generation_run.h"

#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace attnkit::decode {

bool decodes_as_unilm(const models::HeadsConfig& heads) { return !heads.causal_lm && heads.masked_lm; }

const char* default_end_token(const models::HeadsConfig& heads) {
  return decodes_as_unilm(heads) ? "[SEP]" : "<|endoftext|>";
}

void set_special_tokens(GenerationConfig& config, const nlohmann::json& hf_config,
                        const std::vector<int64_t>& eos, bool no_eos,
                        std::optional<int64_t> tokenizer_eos, int64_t model_pad) {
  auto json_ids = [&](const char* key) {
    std::vector<int64_t> ids;
    if (!hf_config.is_object() || !hf_config.contains(key) || hf_config[key].is_null()) return ids;
    if (hf_config[key].is_array())
      for (const auto& v : hf_config[key]) ids.push_back(v.get<int64_t>());
    else
      ids.push_back(hf_config[key].get<int64_t>());
    return ids;
  };
  config.eos_token_ids.clear();
  if (!eos.empty()) {
    config.eos_token_ids = eos;
  } else if (!no_eos) {
    config.eos_token_ids = json_ids("eos_token_id");
    if (config.eos_token_ids.empty() && tokenizer_eos) config.eos_token_ids.push_back(*tokenizer_eos);
  }
  const auto pad = json_ids("pad_token_id");
  config.pad_token_id = !pad.empty()                      ? pad[0]
                        : !config.eos_token_ids.empty() ? config.eos_token_ids[0]
                                                        : model_pad;
}

void set_generation_rules(GenerationConfig& config, const nlohmann::json& hf_config,
                          const std::string& where) {
  if (!hf_config.is_object()) return;
  auto present = [&](const char* key) { return hf_config.contains(key) && !hf_config[key].is_null(); };
  auto bad = [&](const char* key, const std::string& expected) {
    return Error(fmt::format("{}: '{}' must be {} (got {})", where, key, expected,
                             one_line(hf_config[key].dump())));
  };
  for (const char* key : {"forced_bos_token_id", "forced_eos_token_id"}) {
    if (!present(key)) continue;
    const auto& v = hf_config[key];
    // A list (several EOS ids) forces its first, as a single id does.
    const auto& id = v.is_array() && !v.empty() ? v[0] : v;
    if (!id.is_number_integer() || id.get<int64_t>() < 0) throw bad(key, "a token id");
    (std::string(key) == "forced_bos_token_id" ? config.forced_bos_token_id
                                               : config.forced_eos_token_id) = id.get<int64_t>();
  }
  if (present("bad_words_ids")) {
    const auto& v = hf_config["bad_words_ids"];
    if (!v.is_array()) throw bad("bad_words_ids", "a list of token id lists");
    config.bad_words_ids.clear();
    for (const auto& words : v) {
      if (!words.is_array() || words.empty()) throw bad("bad_words_ids", "a list of token id lists");
      std::vector<int64_t> ids;
      for (const auto& id : words) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0)
          throw bad("bad_words_ids", "a list of token id lists");
        ids.push_back(id.get<int64_t>());
      }
      config.bad_words_ids.push_back(std::move(ids));
    }
  }
}

std::unique_ptr<LanguageModel> language_model(const models::TaskModel& model, const std::string& name,
                                              int64_t condition_class) {
  const auto& heads = model->heads();
  if (heads.causal_lm) return std::make_unique<CausalLM>(model, condition_class);
  if (decodes_as_unilm(heads)) {
    if (condition_class >= 0) throw Error("--condition: UniLM models take no condition");
    return std::make_unique<UnilmLM>(model);
  }
  throw Error(fmt::format("generate: {} has neither a causal-LM nor a masked-LM head", name));
}

const char* default_end_token(const models::Model& model) {
  if (model.shape() == models::ModelShape::EncoderDecoder) return "</s>";
  return default_end_token(dynamic_cast<const models::TaskModelImpl&>(model).heads());
}

bool prompts_take_special_tokens(const models::Model& model) {
  if (model.shape() == models::ModelShape::EncoderDecoder) return true;
  return decodes_as_unilm(dynamic_cast<const models::TaskModelImpl&>(model).heads());
}

std::vector<std::vector<Hypothesis>> run_generation(const GenerationRequest& request) {
  if (!request.model) throw Error("generate: no model");
  const bool seq2seq = request.model->shape() == models::ModelShape::EncoderDecoder;
  const int64_t vocab =
      seq2seq ? request.model->encoder_decoder("generate").config().encoder.vocab_size
              : request.model->task_model("generate").config().vocab_size;
  for (const auto& prompt : request.prompts) {
    if (prompt.empty()) throw Error("generate: a prompt has no tokens");
    for (int64_t id : prompt)
      if (id < 0 || id >= vocab)
        throw Error(fmt::format("generate: token id {} is outside the model's vocabulary [0, {})",
                                id, vocab));
  }
  torch::NoGradGuard no_grad;
  request.model->module().eval();
  GenerationConfig config = request.config;
  config.on_token = request.on_token;
  if (seq2seq) {
    if (request.condition_class >= 0) throw Error("--condition: encoder-decoder models take no condition");
    auto model = std::dynamic_pointer_cast<models::EncoderDecoderModelImpl>(request.model);
    const auto& decoder = model->config().decoder;
    const int64_t start = request.decoder_start_token_id >= 0 ? request.decoder_start_token_id
                                                              : model->decoder_start_token();
    if (start < 0 || start >= decoder.vocab_size)
      throw Error(fmt::format("generate: decoder start token {} is outside the decoder's vocabulary "
                              "[0, {})",
                              start, decoder.vocab_size));
    Seq2SeqLM lm(models::EncoderDecoderModel(model), request.prompts, model->config().encoder.pad_token_id);
    const std::vector<std::vector<int64_t>> starts(request.prompts.size(), std::vector<int64_t>{start});
    return generate(lm, starts, config);
  }
  auto lm = language_model(models::TaskModel(std::dynamic_pointer_cast<models::TaskModelImpl>(request.model)),
                           request.name, request.condition_class);
  return generate(*lm, request.prompts, config);
}

nlohmann::json results_json(Strategy strategy, const std::vector<std::string>& shown,
                            const std::vector<std::vector<int64_t>>& prompts,
                            const std::vector<std::vector<Hypothesis>>& results,
                            const std::function<std::string(const std::vector<int64_t>&)>& detokenize) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t p = 0; p < prompts.size(); ++p) {
    nlohmann::json sequences = nlohmann::json::array();
    for (const auto& h : results.at(p)) {
      nlohmann::json s{{"ids", h.tokens}, {"score", h.score}};
      if (detokenize) s["text"] = detokenize(h.tokens);
      sequences.push_back(std::move(s));
    }
    out.push_back({{"prompt", shown.at(p)}, {"prompt_ids", prompts[p]}, {"sequences", sequences}});
  }
  return {{"strategy", strategy_name(strategy)}, {"results", out}};
}

}  // namespace attnkit::decode
