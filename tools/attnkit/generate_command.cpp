// attnkit generate: decode from a model directory (attnkit or Hugging Face GPT-2 layout; a BERT
// with a masked-LM head decodes as UniLM) with greedy, beam or sampling, streaming tokens to the
// terminal as they come; --json prints ids, text and scores.
#include "attnkit/decode/generation.h"
#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/text/pretrained.h"
#include "command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

namespace attnkit::cli {
namespace {

struct GenerateOptions {
  std::string model, tokenizer;
  std::vector<std::string> prompts;      // --prompt (repeatable)
  std::string prompts_file;              // --prompts
  std::vector<std::string> prompt_ids;   // --prompt-ids (repeatable)
  std::string strategy = "greedy";
  int64_t beams = 4, top_k = 0, max_new_tokens = 20, min_new_tokens = 0, no_repeat_ngram = 0;
  int64_t num_return = 1, condition = -1;
  double top_p = 1.0, min_p = 0.0, temperature = 1.0, repetition_penalty = 1.0;
  double length_penalty = 1.0;
  bool early_stopping = false;
  std::vector<int64_t> eos_ids;
  bool no_eos = false;
  std::vector<std::string> stops;
  std::optional<uint64_t> seed;
  bool json = false;
};

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> values;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    if (!token.empty() && token.back() == ',') token.pop_back();
    if (token.empty()) continue;
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != token.size() || v < 0)
      throw Error(fmt::format("--prompt-ids: '{}' is not a token id (give ids separated by spaces)",
                              token));
    values.push_back(v);
  }
  if (values.empty()) throw Error("--prompt-ids: no ids given");
  return values;
}

// The tokenizer: --tokenizer, else the model directory when it holds one, else none.
std::optional<text::Tokenizer> find_tokenizer(const GenerateOptions& o) {
  if (!o.tokenizer.empty()) return text::load_tokenizer(o.tokenizer);
  namespace fs = std::filesystem;
  if (fs::is_directory(o.model))
    for (const char* name : {"tokenizer.json", "vocab.json", "encoder.json", "vocab.txt"})
      if (fs::exists(fs::path(o.model) / name)) return text::load_tokenizer(o.model);
  return std::nullopt;
}

std::vector<uint32_t> to_u32(const std::vector<int64_t>& ids) {
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

// Prints the new text of a growing sequence, holding back an incomplete UTF-8 character.
class Streamer {
 public:
  explicit Streamer(const text::Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  // Prints what is still held back.
  void finish() {
    if (!tokenizer_ || tokens_.empty()) return;
    std::string text = tokenizer_->decode(to_u32(tokens_));
    if (text.size() > printed_ && text.compare(0, printed_, printed_text_) == 0)
      std::fwrite(text.data() + printed_, 1, text.size() - printed_, stdout);
  }
  void add(int64_t token) {
    tokens_.push_back(token);
    if (!tokenizer_) {
      std::printf("%s%lld", tokens_.size() > 1 ? " " : "", static_cast<long long>(token));
      std::fflush(stdout);
      return;
    }
    std::string text = tokenizer_->decode(to_u32(tokens_));
    size_t end = text.size();
    // Hold back a trailing partial UTF-8 sequence until its last byte arrives.
    size_t back = 0;
    while (back < 4 && back < end && (static_cast<unsigned char>(text[end - 1 - back]) & 0xC0) == 0x80)
      ++back;
    if (back < end) {
      const auto lead = static_cast<unsigned char>(text[end - 1 - back]);
      const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      if (need > back + 1) end = end - 1 - back;
    }
    if (end > printed_ && text.compare(0, printed_, printed_text_) == 0) {
      std::fwrite(text.data() + printed_, 1, end - printed_, stdout);
      std::fflush(stdout);
      printed_ = end;
      printed_text_ = text.substr(0, end);
    }
  }

 private:
  const text::Tokenizer* tokenizer_;
  std::vector<int64_t> tokens_;
  size_t printed_ = 0;
  std::string printed_text_;
};

int run_generate(const GenerateOptions& o, const GlobalOptions& global) {
  torch::NoGradGuard no_grad;
  auto loaded = io::load_model(o.model);
  loaded.task->eval();
  auto tokenizer = find_tokenizer(o);
  const auto& c = loaded.config;

  // Prompts.
  std::vector<std::string> texts = o.prompts;
  if (!o.prompts_file.empty()) {
    const std::string content = read_file(o.prompts_file, "prompts file");
    for_each_line(content, [&](std::string_view line, size_t) {
      if (!line.empty()) texts.emplace_back(line);
    });
    if (texts.empty()) throw Error(fmt::format("--prompts {}: no prompts in the file", o.prompts_file));
  }
  if (texts.empty() && o.prompt_ids.empty())
    throw Error("generate: give --prompt TEXT, --prompts FILE or --prompt-ids IDS");
  if (!texts.empty() && !tokenizer)
    throw Error(fmt::format("generate: {} has no tokenizer (tokenizer.json, vocab.json + "
                            "merges.txt, vocab.txt); give --tokenizer PATH or --prompt-ids",
                            o.model));
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::string> shown;
  const bool unilm = !loaded.heads.causal_lm && loaded.heads.masked_lm;
  for (const auto& t : texts) {
    auto enc = tokenizer->encode(t, /*add_special_tokens=*/unilm);
    if (enc.ids.empty()) throw Error(fmt::format("generate: prompt '{}' has no tokens", t));
    prompts.emplace_back(enc.ids.begin(), enc.ids.end());
    shown.push_back(t);
  }
  for (const auto& ids : o.prompt_ids) {
    prompts.push_back(parse_ids(ids));
    for (int64_t id : prompts.back())
      if (id >= c.vocab_size)
        throw Error(fmt::format("--prompt-ids: token id {} is outside the model's vocabulary [0, {})",
                                id, c.vocab_size));
    shown.push_back(tokenizer ? tokenizer->decode(to_u32(prompts.back()), false) : ids);
  }
  for (const auto& p : prompts)
    for (int64_t id : p)
      if (id >= c.vocab_size)
        throw Error(fmt::format("generate: token id {} is outside the model's vocabulary [0, {})",
                                id, c.vocab_size));

  decode::GenerationConfig config;
  config.strategy = decode::parse_strategy(o.strategy);
  config.max_new_tokens = o.max_new_tokens;
  config.min_new_tokens = o.min_new_tokens;
  config.num_beams = o.beams;
  config.length_penalty = o.length_penalty;
  config.early_stopping = o.early_stopping;
  config.num_return_sequences = o.num_return;
  config.temperature = o.temperature;
  config.top_k = o.top_k;
  config.top_p = o.top_p;
  config.min_p = o.min_p;
  config.seed = o.seed ? *o.seed : global.seed;
  config.repetition_penalty = o.repetition_penalty;
  config.no_repeat_ngram_size = o.no_repeat_ngram;
  config.stop_strings = o.stops;
  // EOS and pad: --eos-id, else config.json's eos_token_id (HF), else the tokenizer's
  // <|endoftext|> / [SEP] (UniLM).
  const auto& hf = loaded.huggingface.config_json;
  auto json_ids = [&](const char* key) {
    std::vector<int64_t> ids;
    if (!hf.is_object() || !hf.contains(key) || hf[key].is_null()) return ids;
    if (hf[key].is_array())
      for (const auto& v : hf[key]) ids.push_back(v.get<int64_t>());
    else
      ids.push_back(hf[key].get<int64_t>());
    return ids;
  };
  if (!o.eos_ids.empty()) {
    config.eos_token_ids = o.eos_ids;
  } else if (!o.no_eos) {
    config.eos_token_ids = json_ids("eos_token_id");
    if (config.eos_token_ids.empty() && tokenizer) {
      auto id = tokenizer->token_to_id(unilm ? "[SEP]" : "<|endoftext|>");
      if (id) config.eos_token_ids.push_back(*id);
    }
  }
  {
    auto pad = json_ids("pad_token_id");
    config.pad_token_id = !pad.empty()                      ? pad[0]
                          : !config.eos_token_ids.empty() ? config.eos_token_ids[0]
                                                          : c.pad_token_id;
  }
  if (tokenizer)
    config.detokenize = [&](const std::vector<int64_t>& ids) { return tokenizer->decode(to_u32(ids)); };

  // Streaming: one prompt, one sequence, not JSON.
  const bool stream = !o.json && prompts.size() == 1 && config.num_return_sequences == 1 &&
                      config.strategy != decode::Strategy::Beam;
  std::unique_ptr<Streamer> streamer;
  if (stream) {
    streamer = std::make_unique<Streamer>(tokenizer ? &*tokenizer : nullptr);
    if (!global.quiet && tokenizer) {
      std::fputs(shown[0].c_str(), stdout);
      std::fflush(stdout);
    }
    config.on_token = [&](int64_t, int64_t token) { streamer->add(token); };
  }

  std::unique_ptr<decode::LanguageModel> lm;
  if (loaded.heads.causal_lm)
    lm = std::make_unique<decode::CausalLM>(loaded.task, o.condition);
  else if (unilm) {
    if (o.condition >= 0) throw Error("--condition: UniLM models take no condition");
    lm = std::make_unique<decode::UnilmLM>(loaded.task);
  } else
    throw Error(fmt::format("generate: {} has neither a causal-LM nor a masked-LM head", o.model));
  auto results = decode::generate(*lm, prompts, config);

  if (stream) {
    streamer->finish();
    std::fputs("\n", stdout);
    return 0;
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t p = 0; p < prompts.size(); ++p) {
      nlohmann::json sequences = nlohmann::json::array();
      for (const auto& h : results[p]) {
        nlohmann::json s{{"ids", h.tokens}, {"score", h.score}};
        if (tokenizer) s["text"] = tokenizer->decode(to_u32(h.tokens));
        sequences.push_back(std::move(s));
      }
      out.push_back({{"prompt", shown[p]}, {"prompt_ids", prompts[p]}, {"sequences", sequences}});
    }
    nlohmann::json doc{{"strategy", decode::strategy_name(config.strategy)}, {"results", out}};
    std::puts(doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (size_t p = 0; p < prompts.size(); ++p)
    for (const auto& h : results[p]) {
      const std::string body = tokenizer ? tokenizer->decode(to_u32(h.tokens))
                                         : fmt::format("{}", fmt::join(h.tokens, " "));
      // With a tokenizer: prompt text + new text; without: the new ids.
      const std::string head = tokenizer ? shown[p] : "";
      if (results[p].size() > 1 || config.strategy == decode::Strategy::Beam)
        fmt::print("{}{}\t[score {:.4f}]\n", head, body, h.score);
      else
        fmt::print("{}{}\n", head, body);
    }
  return 0;
}

}  // namespace

void register_generate_command(CLI::App& app, GlobalOptions& global) {
  auto o = std::make_shared<GenerateOptions>();
  auto* g = app.add_subcommand(
      "generate",
      "generate text from a model directory (GPT-2 in attnkit or Hugging Face layout; a BERT with "
      "a masked-LM head decodes as UniLM): greedy, beam search or sampling, with cached decoding");
  g->add_option("--model", o->model, "model directory (config.json + model.safetensors)")->required();
  g->add_option("--tokenizer", o->tokenizer,
                "tokenizer file or directory (default: the model directory's)");
  auto* prompt = g->add_option("--prompt", o->prompts, "prompt text (repeatable)");
  auto* file = g->add_option("--prompts", o->prompts_file, "file with one prompt per line");
  g->add_option("--prompt-ids", o->prompt_ids, "prompt as token ids \"1 2 3\" (repeatable)");
  (void)prompt;
  (void)file;
  g->add_option("--strategy", o->strategy, "greedy | beam | sample")
      ->check(CLI::IsMember({"greedy", "beam", "sample"}))
      ->capture_default_str();
  g->add_option("--beams", o->beams, "beam width")->check(at_least(1))->capture_default_str();
  g->add_option("--num-return-sequences", o->num_return,
                "sequences per prompt (beam: the n best, <= --beams; sample: independent draws)")
      ->check(at_least(1))
      ->capture_default_str();
  g->add_option("--length-penalty", o->length_penalty, "beam score = sum log p / length^this")
      ->capture_default_str();
  g->add_flag("--early-stopping", o->early_stopping,
              "beam: stop a prompt as soon as --beams hypotheses have ended");
  g->add_option("--top-k", o->top_k, "sample from the k most probable tokens (0 = off)")
      ->check(at_least(0));
  g->add_option("--top-p", o->top_p, "nucleus: the smallest set whose mass reaches p (1 = off)");
  g->add_option("--min-p", o->min_p, "keep tokens with p >= min_p · max p (0 = off)");
  g->add_option("--temperature", o->temperature, "sampling temperature")->capture_default_str();
  g->add_option("--repetition-penalty", o->repetition_penalty, "HF repetition penalty (1 = off)");
  g->add_option("--no-repeat-ngram-size", o->no_repeat_ngram, "forbid repeating n-grams (0 = off)")
      ->check(at_least(0));
  g->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate at most")
      ->check(at_least(0))
      ->capture_default_str();
  g->add_option("--min-new-tokens", o->min_new_tokens, "no EOS before this many new tokens")
      ->check(at_least(0));
  g->add_option("--eos-id", o->eos_ids,
                "end-of-sequence token id (repeatable; default: config.json's eos_token_id, else "
                "the tokenizer's <|endoftext|> or [SEP])");
  g->add_flag("--no-eos", o->no_eos, "no end-of-sequence token: always --max-new-tokens");
  g->add_option("--stop", o->stops, "stop string (repeatable)");
  g->add_option("--condition", o->condition, "class id of a class-conditional model")
      ->check(at_least(0));
  g->add_option("--seed", o->seed, "sampling seed (default: the global --seed)");
  g->add_flag("--json", o->json, "print ids, text and scores as JSON instead of streaming text");
  g->callback([o, &global] { global.action = [o, &global] { return run_generate(*o, global); }; });
}

}  // namespace attnkit::cli
