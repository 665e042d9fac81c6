#include "attnkit/decode/generation_run.h"

#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"
#include "attnkit/file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <ctime>
#include <filesystem>

namespace attnkit::decode {

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

GenerationSettings read_generation_settings(const nlohmann::json& config_json,
                                            const std::string& model_dir) {
  GenerationSettings out;
  out.values = config_json;
  const auto generation_file = std::filesystem::path(model_dir) / "generation_config.json";
  const bool has_file = std::filesystem::exists(generation_file);
  if (out.values.is_object() && has_file) {
    nlohmann::json overlay;
    try {
      overlay = nlohmann::json::parse(read_file(generation_file.string()));
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}: not valid JSON ({})", generation_file.string(), one_line(e.what())));
    }
    if (overlay.is_object()) out.values.update(overlay);
  }
  out.source = has_file ? generation_file.string() : model_dir + "/config.json";
  return out;
}

void apply_generation_settings(GenerationRequest& request, const GenerationSettings& settings,
                               const std::vector<int64_t>& eos, bool no_eos,
                               std::optional<int64_t> tokenizer_eos) {
  if (!request.model) throw Error("generate: no model");
  const nlohmann::json& values = settings.values;
  set_special_tokens(request.config, values, eos, no_eos, tokenizer_eos,
                     request.model->decoding_traits().output_pad_id);
  set_generation_rules(request.config, values, settings.source);
  if (request.decoder_start_token_id < 0 && values.is_object() &&
      values.contains("decoder_start_token_id") && values["decoder_start_token_id"].is_number_integer())
    request.decoder_start_token_id = values["decoder_start_token_id"].get<int64_t>();
}

TimePoint TimePoint::now() {
  TimePoint t;
  t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec cpu{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0) t.cpu = cpu.tv_sec + 1e-9 * cpu.tv_nsec;
  return t;
}

namespace {

// A session that passes every call on and notes when the first forward (the prefill) returned.
class TimedSession : public models::DecodingSession {
 public:
  explicit TimedSession(models::DecodingSession& inner) : inner_(inner) {}
  void start(int64_t batch, int64_t horizon) override { inner_.start(batch, horizon); }
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& valid,
                     const at::Tensor& positions) override {
    at::Tensor logits = inner_.forward(ids, valid, positions);
    if (forwards_++ == 0) prefill_end = TimePoint::now();
    return logits;
  }
  void select_rows(const at::Tensor& index) override { inner_.select_rows(index); }
  int64_t state_bytes() const override { return inner_.state_bytes(); }
  int64_t forwards() const { return forwards_; }
  TimePoint prefill_end;

 private:
  models::DecodingSession& inner_;
  int64_t forwards_ = 0;
};

}  // namespace

std::vector<std::vector<Hypothesis>> run_generation(const GenerationRequest& request,
                                                    GenerationTimes* times) {
  if (!request.model) throw Error("generate: no model");
  const TimePoint begin = TimePoint::now();
  torch::NoGradGuard no_grad;
  request.model->module().eval();
  GenerationConfig config = request.config;
  config.on_token = request.on_token;
  models::DecodingRequest decoding_request;
  decoding_request.prompts = request.prompts;
  decoding_request.condition_class = request.condition_class;
  decoding_request.decoder_start_token_id = request.decoder_start_token_id;
  decoding_request.name = request.name;
  models::Decoding decoding = start_decoding(*request.model, decoding_request);
  if (!times) return generate(*decoding.session, decoding.prompts, config);
  TimedSession timed(*decoding.session);
  auto results = generate(timed, decoding.prompts, config);
  const TimePoint end = TimePoint::now();
  *times = GenerationTimes{};
  if (timed.forwards() > 0) {
    times->prefill_seconds = timed.prefill_end.wall - begin.wall;
    times->prefill_cpu_seconds = timed.prefill_end.cpu - begin.cpu;
    times->decode_seconds = end.wall - timed.prefill_end.wall;
    times->decode_cpu_seconds = end.cpu - timed.prefill_end.cpu;
    times->decode_steps = timed.forwards() - 1;
  }
  for (const auto& prompt : request.prompts) times->prompt_tokens += static_cast<int64_t>(prompt.size());
  for (const auto& list : results)
    for (const auto& h : list) times->new_tokens += static_cast<int64_t>(h.tokens.size());
  return results;
}

nlohmann::json times_json(const GenerationTimes& times) {
  return {{"prefill_s", times.prefill_seconds},   {"prefill_cpu_s", times.prefill_cpu_seconds},
          {"decode_s", times.decode_seconds},     {"decode_cpu_s", times.decode_cpu_seconds},
          {"prompt_tokens", times.prompt_tokens}, {"new_tokens", times.new_tokens},
          {"decode_steps", times.decode_steps}};
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
