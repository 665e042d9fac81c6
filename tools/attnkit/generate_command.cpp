// attnkit generate: decode from a model directory (attnkit or Hugging Face GPT-2 layout; a BERT
// with a masked-LM head decodes as UniLM) with greedy, beam or sampling, streaming tokens to the
// terminal as they come; --json prints ids, text and scores. The generation is
// decode/generation_run.h's; this file keeps the flags, prompt text <-> ids and the printing.
#include "attnkit/decode/generation_run.h"
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/models/quantize.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/text_stream.h"
#include "attnkit/parse.h"
#include "attnkit/train/tasks.h"
#include "command.h"

#include <fmt/format.h>

#include <future>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
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
  decode::GenerationConfig config;  // the strategy settings, bound to their flags
  std::string condition;  // a class id, or a label of the model's condition_labels.txt
  int64_t decoder_start = -1;
  std::vector<int64_t> eos_ids;
  bool no_eos = false;
  std::optional<uint64_t> seed;
  bool json = false;
  bool hf_decode = false;  // the tokenizer's own text (Hugging Face's decode), CJK spaces kept
  std::string compute_type = "float32";  // --compute-type
  int64_t max_input_length = 0;  // --max-input-length: prompts cut to their first N tokens (0: kept whole)
  int64_t batch_size = 0;        // --batch-size: prompts decoded N at a time (0: all at once)
  const CLI::Option* max_new_tokens_flag = nullptr;  // whether --max-new-tokens was given
};


void write_out(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

// Prompt texts of --prompt and --prompts FILE, in that order.
std::vector<std::string> prompt_texts(const GenerateOptions& o) {
  std::vector<std::string> texts = o.prompts;
  if (!o.prompts_file.empty()) {
    const std::string content = read_file(o.prompts_file, "prompts file");
    for_each_line(content, [&](std::string_view line, size_t) {
      if (!line.empty()) texts.emplace_back(line);
    });
    if (texts.empty()) throw Error(fmt::format("--prompts {}: no prompts in the file", o.prompts_file));
  }
  return texts;
}

// --condition: a class id, or a class label the model's checkpoint names (conditional-lm writes
// train::kConditionLabelsFile, one label per line in id order); -1 when not given.
int64_t condition_class(const std::string& given, const std::string& model_path) {
  if (given.empty()) return -1;
  if (const auto id = try_parse_int(given); id && *id >= 0) return *id;
  namespace fs = std::filesystem;
  fs::path folder(model_path);
  if (!fs::is_directory(folder)) folder = folder.parent_path();
  const fs::path file = folder / train::kConditionLabelsFile;
  if (!fs::exists(file))
    throw Error(fmt::format("--condition {}: not a class id, and {} has no {} naming its classes", one_line(given),
                            folder.string(), train::kConditionLabelsFile));
  std::vector<std::string> labels;
  for_each_line(read_file(file.string(), "condition labels"), [&](std::string_view line, size_t) {
    if (!line.empty()) labels.emplace_back(line);
  });
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] == given) return static_cast<int64_t>(i);
  throw Error(fmt::format("--condition {}: not a class of {} ({})", one_line(given), file.string(),
                          fmt::join(labels, ", ")));
}

int run_generate(const GenerateOptions& o, const GlobalOptions& global) {
  const layers::ComputeType compute = layers::parse_compute_type(o.compute_type, "--compute-type");
  if (compute == layers::ComputeType::Bf16) fmt::print(stderr, "{}\n", layers::bf16_note());
  const decode::TimePoint begin = decode::TimePoint::now();  // --json's "timing" (load includes quantizing)
  // The tokenizer: --tokenizer, else the model directory's (a run's checkpoint's) when it holds
  // one, else none; of any kind (Marian's files are read as transformers' MarianTokenizer). It is
  // read on a second thread while the model loads (Marian's: 0.06 s, its model 0.02-0.15 s); the
  // model's errors still come first.
  const std::string model_path = io::resolve_model_path(o.model);
  std::future<std::unique_ptr<text::TextTokenizer>> tokenizer_read = std::async(
      std::launch::async, [&o, model_path] { return io::tokenizer_for_model(o.tokenizer, model_path); });
  auto loaded = io::load_model(model_path);
  models::quantize_model(*loaded.model, compute);  // int8; a model saved int8 is int8 already
  models::pack_int8_model(*loaded.model);  // int8 layers in the panel kernel's layout where it runs
  const std::unique_ptr<text::TextTokenizer> tokenizer = tokenizer_read.get();
  const decode::TimePoint loaded_at = decode::TimePoint::now();
  // How the model's prompts are written and ended (an encoder-decoder's prompts are its
  // encoder's sources; its output stands alone).
  const models::DecodingTraits traits = loaded.model->decoding_traits();
  const int64_t vocab = traits.prompt_vocab;
  const std::vector<std::string> texts = prompt_texts(o);
  if (texts.empty() && o.prompt_ids.empty())
    throw Error("generate: give --prompt TEXT, --prompts FILE or --prompt-ids IDS");
  if (!texts.empty() && !tokenizer)
    throw Error(fmt::format("generate: {} has no tokenizer (tokenizer.json, vocab.json + "
                            "merges.txt, vocab.txt, Marian's source.spm + vocab.json); give "
                            "--tokenizer PATH or --prompt-ids",
                            o.model));
  decode::GenerationRequest request;
  request.model = loaded.model;
  request.name = o.model;
  request.condition_class = condition_class(o.condition, loaded.path);
  request.decoder_start_token_id = o.decoder_start;
  auto& prompts = request.prompts;
  std::vector<std::string> shown;
  for (const auto& t : texts) {
    std::vector<int64_t> ids = tokenizer->encode_ids(t, traits.prompts_take_special_tokens);
    if (ids.empty()) throw Error(fmt::format("generate: prompt '{}' has no tokens", t));
    // A cut prompt is shown as what the model reads.
    const bool cut = o.max_input_length > 0 && int64_t(ids.size()) > o.max_input_length;
    if (cut) ids.resize(o.max_input_length);
    shown.push_back(cut ? tokenizer->decode_ids(ids, false) : t);
    prompts.push_back(std::move(ids));
  }
  for (const auto& ids : o.prompt_ids) {
    prompts.push_back(parse_id_list(ids, "--prompt-ids"));
    if (o.max_input_length > 0 && int64_t(prompts.back().size()) > o.max_input_length)
      prompts.back().resize(o.max_input_length);
    for (int64_t id : prompts.back())
      if (id >= vocab)
        throw Error(fmt::format("--prompt-ids: token id {} is outside the model's vocabulary [0, {})",
                                id, vocab));
    shown.push_back(tokenizer ? tokenizer->decode_ids(prompts.back(), false)
                              : fmt::format("{}", fmt::join(prompts.back(), " ")));
  }

  auto& config = request.config;
  config = o.config;
  config.strategy = decode::parse_strategy(o.strategy);
  config.seed = o.seed ? *o.seed : global.seed;
  // The tokenizer's own end token (Marian's </s>), else the model's by name; an encoder-decoder
  // trained here (task translation) ends at the tokenizer's end token, [SEP] for BERT-style
  // vocabularies when there is no </s> (text::end_token_id's fallbacks).
  std::optional<int64_t> tokenizer_eos;
  if (tokenizer)
    tokenizer_eos = text::end_token_id(*tokenizer, {traits.end_token, traits.end_token_fallbacks});
  // A Hugging Face directory's settings: config.json with generation_config.json's keys over it.
  decode::apply_generation_settings(
      request, decode::read_generation_settings(loaded.huggingface.config_json, loaded.path),
      o.eos_ids, o.no_eos, tokenizer_eos);
  // Learned or sinusoidal positions end: an explicit --max-new-tokens past what the table leaves
  // after the prompts is refused before any decoding; the default (or a generation config's) is
  // cut to it.
  if (const int64_t most = models::max_new_tokens_limit(traits, prompts); most >= 0 && config.max_new_tokens > most) {
    if (o.max_new_tokens_flag && o.max_new_tokens_flag->count() > 0)
      throw Error(fmt::format("generate: --max-new-tokens {} does not fit the model's {} positions: {} "
                              "at most after {}",
                              config.max_new_tokens, traits.output_positions, most,
                              traits.continues_prompt ? fmt::format("a prompt of {} tokens",
                                                                    traits.output_positions - most + 1)
                                                      : std::string("the decoder's start token")));
    config.max_new_tokens = most;
  }
  std::function<std::string(const std::vector<int64_t>&)> detokenize;
  const text::TextStyle style = o.hf_decode ? text::TextStyle::kTokenizer : text::TextStyle::kReadable;
  if (tokenizer)
    detokenize = [&](const std::vector<int64_t>& ids) { return tokenizer->decode_ids(ids, true, style); };
  config.detokenize = detokenize;

  // Streaming: one prompt, one sequence, not JSON; text with a tokenizer, else the ids.
  const bool stream = !o.json && prompts.size() == 1 && config.num_return_sequences == 1 &&
                      config.strategy != decode::Strategy::Beam;
  std::optional<text::TextStream> text_stream;
  if (stream) {
    if (tokenizer) text_stream.emplace(*tokenizer, style);
    // A language model continues its prompt; an encoder-decoder's output stands alone.
    if (!global.quiet && tokenizer && traits.continues_prompt) std::fputs(shown[0].c_str(), stdout);
    std::fflush(stdout);
    request.on_token = [&, streamed = int64_t(0)](int64_t, int64_t token) mutable {
      if (text_stream)
        write_out(text_stream->add(token));
      else
        std::printf("%s%lld", streamed++ > 0 ? " " : "", static_cast<long long>(token));
      std::fflush(stdout);
    };
  }
  const decode::TimePoint prompts_at = decode::TimePoint::now();
  decode::GenerationTimes times;
  std::vector<std::vector<decode::Hypothesis>> results;
  if (o.batch_size <= 0 || int64_t(prompts.size()) <= o.batch_size) {
    results = decode::run_generation(request, o.json ? &times : nullptr);
  } else {
    // Consecutive slices of --batch-size prompts, each its own generation (the padding of a batch
    // reaches the outputs of cosFormer, whose M is the padded length); times add up.
    decode::GenerationRequest slice = request;
    for (size_t first = 0; first < prompts.size(); first += size_t(o.batch_size)) {
      const size_t last = std::min(prompts.size(), first + size_t(o.batch_size));
      slice.prompts.assign(prompts.begin() + first, prompts.begin() + last);
      decode::GenerationTimes part;
      auto out = decode::run_generation(slice, o.json ? &part : nullptr);
      for (auto& r : out) results.push_back(std::move(r));
      times += part;
    }
  }

  if (stream) {
    if (text_stream) write_out(text_stream->finish());
    std::fputs("\n", stdout);
    return 0;
  }
  if (o.json) {
    auto doc = decode::results_json(config.strategy, shown, prompts, results, detokenize);
    nlohmann::json& timing = doc["timing"] = decode::times_json(times);
    timing["load_s"] = loaded_at.wall - begin.wall;
    timing["load_cpu_s"] = loaded_at.cpu - begin.cpu;
    timing["prompts_s"] = prompts_at.wall - loaded_at.wall;
    timing["total_s"] = decode::TimePoint::now().wall - begin.wall;
    std::puts(doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (size_t p = 0; p < prompts.size(); ++p)
    for (const auto& h : results[p]) {
      // With a tokenizer: prompt text + new text (an encoder-decoder's translation alone);
      // without: the new ids.
      const std::string body = !detokenize ? fmt::format("{}", fmt::join(h.tokens, " "))
                               : traits.continues_prompt ? shown[p] + detokenize(h.tokens)
                                                         : detokenize(h.tokens);
      if (results[p].size() > 1 || config.strategy == decode::Strategy::Beam)
        fmt::print("{}\t[score {:.4f}]\n", body, h.score);
      else
        fmt::print("{}\n", body);
    }
  return 0;
}

}  // namespace

void register_generate_command(CLI::App& app, GlobalOptions& global) {
  auto o = std::make_shared<GenerateOptions>();
  auto* g = app.add_subcommand(
      "generate",
      "generate text from a model directory (GPT-2 in attnkit or Hugging Face layout; a BERT with "
      "a masked-LM head decodes as UniLM; an encoder-decoder's prompts are its sources): greedy, "
      "beam search or sampling, with cached decoding");
  g->add_option("--model", o->model,
                "model directory (config.json + model.safetensors), a llama-architecture .gguf file, "
                "checkpoint or run directory "
                "(its best checkpoint, else its newest)")
      ->required();
  g->add_option("--tokenizer", o->tokenizer,
                "tokenizer file or directory (default: the model directory's)");
  g->add_option("--prompt,--source", o->prompts, "prompt text (repeatable; an encoder-decoder's source)");
  g->add_option("--prompts,--sources", o->prompts_file,
                "file with one prompt per line (an encoder-decoder: one source per line)");
  g->add_option("--prompt-ids", o->prompt_ids, "prompt as token ids \"1 2 3\" (repeatable)");
  g->add_option("--strategy", o->strategy, "greedy | beam | sample")
      ->check(CLI::IsMember({"greedy", "beam", "sample"}))
      ->capture_default_str();
  g->add_option("--beams", o->config.num_beams, "beam width")->check(at_least(1))->capture_default_str();
  g->add_option("--num-return-sequences", o->config.num_return_sequences,
                "sequences per prompt (beam: the n best, <= --beams; sample: independent draws)")
      ->check(at_least(1))
      ->capture_default_str();
  g->add_option("--length-penalty", o->config.length_penalty, "beam score = sum log p / length^this")
      ->capture_default_str();
  g->add_flag("--early-stopping", o->config.early_stopping,
              "beam: stop a prompt as soon as --beams hypotheses have ended");
  g->add_option("--top-k", o->config.top_k, "sample from the k most probable tokens (0 = off)")
      ->check(at_least(0));
  g->add_option("--top-p", o->config.top_p, "nucleus: the smallest set whose mass reaches p (1 = off)");
  g->add_option("--min-p", o->config.min_p, "keep tokens with p >= min_p · max p (0 = off)");
  g->add_option("--temperature", o->config.temperature, "sampling temperature")->capture_default_str();
  g->add_option("--repetition-penalty", o->config.repetition_penalty, "HF repetition penalty (1 = off)");
  g->add_option("--no-repeat-ngram-size", o->config.no_repeat_ngram_size, "forbid repeating n-grams (0 = off)")
      ->check(at_least(0));
  o->max_new_tokens_flag =
      g->add_option("--max-new-tokens", o->config.max_new_tokens,
                    "tokens to generate at most (a model with learned or sinusoidal positions: the "
                    "default is cut to what its table leaves after the prompt, a larger value given "
                    "here is an error)")
          ->check(at_least(0))
          ->capture_default_str();
  g->add_option("--max-input-length", o->max_input_length,
                "keep the first N tokens of each prompt (an encoder-decoder: source, its end token "
                "included; as train's task.truncate cuts sources); 0 = whole, and a prompt longer "
                "than the model's learned or sinusoidal positions is an error")
      ->check(at_least(0));
  g->add_option("--batch-size", o->batch_size,
                "decode the prompts N at a time, in order (0 = all at once); greedy and beam results "
                "do not depend on it, except a cosFormer model's (its M is the padded length); "
                "sampling restarts from --seed in each batch")
      ->check(at_least(0));
  g->add_option("--min-new-tokens", o->config.min_new_tokens, "no EOS before this many new tokens")
      ->check(at_least(0));
  g->add_option("--eos-id", o->eos_ids,
                "end-of-sequence token id (repeatable; default: config.json's eos_token_id, else "
                "the tokenizer's <|endoftext|> or [SEP])");
  g->add_flag("--no-eos", o->no_eos, "no end-of-sequence token: always --max-new-tokens");
  g->add_option("--stop", o->config.stop_strings, "stop string (repeatable)");
  g->add_option("--condition", o->condition,
                "class of a class-conditional model: its id, or its label (the checkpoint's condition_labels.txt)");
  g->add_option("--decoder-start-id", o->decoder_start,
                "encoder-decoder models: the token the decoder starts from (default: the model's "
                "decoder_start_token_id, else its pad id)")
      ->check(at_least(0));
  g->add_option("--compute-type", o->compute_type,
                "float32 | int8 (int8 weights per row, activations per row at run time) | bf16 "
                "(falls back to float32 here)")
      ->capture_default_str();
  g->add_option("--seed", o->seed, "sampling seed (default: the global --seed)");
  g->add_flag("--json", o->json,
              "print ids, text and scores as JSON instead of streaming text, with \"timing\": seconds "
              "(steady clock; *_cpu_s: the process's CPU) of load_s (model + tokenizer), prompts_s "
              "(prompt text to ids, settings), prefill_s (to the first token's logits), decode_s (the "
              "rest), total_s (all of it, before printing), and prompt_tokens, new_tokens, decode_steps");
  g->add_flag("--hf-decode", o->hf_decode,
              "write text exactly as the tokenizer decodes it (= Hugging Face's decode); by default the "
              "spaces a WordPiece tokenizer puts between Chinese/Japanese characters are removed");
  g->callback([o, &global] { global.action = [o, &global] { return run_generate(*o, global); }; });
}

}  // namespace attnkit::cli
