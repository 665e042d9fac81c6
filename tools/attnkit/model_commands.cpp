// attnkit encode / attnkit convert: run and convert model directories (Hugging Face layout or
// attnkit's own; see include/attnkit/io/model_directory.h).
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/parse.h"
#include "command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <memory>
#include <sstream>

namespace attnkit::cli {
namespace {

struct EncodeOptions {
  std::string model;
  std::string ids;
  std::string token_type_ids;
  std::string attention_mask;
  std::string output;
  std::string head_mask;  // {"layer": [heads]} masked with gate 0 (depth numbering), or per site
  std::string decoder_ids;  // encoder-decoder models: the decoder's input ids (teacher forcing)
};

at::Tensor parse_row(const std::string& text, const char* option) {
  return torch::tensor(parse_id_list(text, option), torch::kLong).unsqueeze(0);
}

// --head-mask: {"layer": [heads]} for a model with one attention site, or {"SITE": {"layer":
// [heads]}, ...} naming sites (any model); the heads get gate 0.
void set_head_mask(models::Model& model, const std::string& text) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw Error("--head-mask: not JSON (expected {\"layer\": [heads]} or {\"site\": {\"layer\": [heads]}})");
  }
  const auto given = models::site_heads_from_json(parsed, "--head-mask");
  const bool by_site = !given.count("");
  const auto masked = model.resolve_site_heads(given, "--head-mask");
  for (const auto& [site, heads] : masked) {
    std::vector<at::Tensor> gates;
    for (int64_t count : site.heads_per_layer()) gates.push_back(torch::ones({count}));
    for (const auto& [layer, list] : heads) {
      if (layer >= site.layers())
        throw Error(fmt::format("--head-mask: {}layer {} outside [0, {})",
                                by_site ? site.name + ": " : "", layer, site.layers()));
      for (int64_t h : list) {
        if (h >= gates[layer].size(0))
          throw Error(fmt::format("--head-mask: {}layer {}: head {} outside [0, {})",
                                  by_site ? site.name + ": " : "", layer, h, gates[layer].size(0)));
        gates[layer][h] = 0.0;
      }
    }
    site.set_head_gates(gates);
  }
}

void check_ids(const at::Tensor& ids, const models::TransformerConfig& c, const char* option) {
  if (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= c.vocab_size)
    throw Error(fmt::format("{}: ids must lie in [0, {}) for this model", option, c.vocab_size));
  if (ids.size(1) > c.max_positions && c.positions == layers::PositionEncoding::Learned)
    throw Error(fmt::format("{}: {} tokens exceed the model's {} positions", option, ids.size(1),
                            c.max_positions));
}

// Prints the shape and a checksum of `main`, or writes `tensors` to --output.
int write_outputs(const EncodeOptions& o, const GlobalOptions& global, io::NamedTensors tensors,
                  const std::string& main_name, const at::Tensor& main) {
  if (!o.output.empty()) {
    for (auto& [name, t] : tensors) t = t.contiguous();
    io::save_safetensors(o.output, tensors, {{"format", "pt"}, {"model", o.model}});
    if (!global.quiet)
      fmt::print("wrote {}: {} [{}] and {} more tensors\n", o.output, main_name,
                 fmt::join(main.sizes(), ", "), tensors.size() - 1);
    return 0;
  }
  const auto m = main.to(at::kDouble);
  fmt::print("{} [{}] sum {:.6f} sum|x| {:.6f} first {:.6f}\n", main_name,
             fmt::join(main.sizes(), ", "), m.sum().item<double>(), m.abs().sum().item<double>(),
             m.flatten()[0].item<double>());
  return 0;
}

// An encoder-decoder: --ids are the source; with --decoder-ids the decoder runs on them too
// (teacher forcing). Outputs under the names of Hugging Face's seq2seq models.
int run_encode_encoder_decoder(const EncodeOptions& o, const GlobalOptions& global,
                               models::EncoderDecoderModelImpl& model) {
  const at::Tensor source = parse_row(o.ids, "--ids");
  check_ids(source, model.config().encoder, "--ids");
  c10::optional<at::Tensor> source_mask;
  if (!o.attention_mask.empty()) {
    source_mask = parse_row(o.attention_mask, "--attention-mask");
    if (source_mask->size(1) != source.size(1))
      throw Error(fmt::format("--attention-mask: {} values for {} ids", source_mask->size(1), source.size(1)));
  }
  if (!o.token_type_ids.empty()) throw Error("--token-type-ids: this encoder-decoder model has no token types");
  const at::Tensor memory = model.encode(source, source_mask);
  io::NamedTensors tensors{{"input_ids", source}};
  if (source_mask) tensors.emplace_back("attention_mask", *source_mask);
  tensors.emplace_back("encoder_last_hidden_state", memory);
  if (o.decoder_ids.empty()) return write_outputs(o, global, tensors, "encoder_last_hidden_state", memory);
  const at::Tensor target = parse_row(o.decoder_ids, "--decoder-ids");
  check_ids(target, model.config().decoder, "--decoder-ids");
  const at::Tensor logits = model.decode(target, memory, source_mask);
  tensors.emplace_back("decoder_input_ids", target);
  tensors.emplace_back("logits", logits);
  return write_outputs(o, global, tensors, "logits", logits);
}

int run_encode(const EncodeOptions& o, const GlobalOptions& global) {
  torch::NoGradGuard no_grad;
  auto loaded = io::load_model(o.model);
  if (loaded.model->shape() == models::ModelShape::EncoderDecoder) {
    if (!o.head_mask.empty()) set_head_mask(*loaded.model, o.head_mask);
    return run_encode_encoder_decoder(o, global, loaded.model->encoder_decoder("encode"));
  }
  if (!o.decoder_ids.empty())
    throw Error(fmt::format("--decoder-ids: {} is a {} model, not an encoder-decoder", o.model,
                            models::to_string(loaded.model->shape())));
  models::TaskInputs in;
  in.input_ids = parse_row(o.ids, "--ids");
  const int64_t n = in.input_ids.size(1);
  auto same_length = [&](const at::Tensor& t, const char* option) {
    if (t.size(1) != n)
      throw Error(fmt::format("{}: {} values for {} ids", option, t.size(1), n));
    return t;
  };
  const auto& c = loaded.config;
  check_ids(in.input_ids, c, "--ids");
  if (!o.token_type_ids.empty()) {
    if (c.type_vocab_size == 0) throw Error("--token-type-ids: this model has no token types");
    in.token_type_ids = same_length(parse_row(o.token_type_ids, "--token-type-ids"), "--token-type-ids");
  }
  if (!o.attention_mask.empty())
    in.attention_mask = same_length(parse_row(o.attention_mask, "--attention-mask"), "--attention-mask");
  in.output_hidden_states = true;
  if (!o.head_mask.empty()) set_head_mask(*loaded.model, o.head_mask);
  auto out = loaded.task->forward(in);

  // Outputs under the names Hugging Face's models return them (see tests/python/hf_reference.py).
  io::NamedTensors tensors{{"input_ids", in.input_ids}};
  if (in.token_type_ids) tensors.emplace_back("token_type_ids", *in.token_type_ids);
  if (in.attention_mask) tensors.emplace_back("attention_mask", *in.attention_mask);
  for (size_t k = 0; k < out.base.hidden_states.size(); ++k)
    tensors.emplace_back(fmt::format("hidden_states.{}", k), out.base.hidden_states[k]);
  tensors.emplace_back("last_hidden_state", out.base.last_hidden_state);
  if (out.base.pooled.defined()) tensors.emplace_back("pooler_output", out.base.pooled);
  if (out.masked_lm_logits.defined()) tensors.emplace_back("mlm_logits", out.masked_lm_logits);
  if (out.next_sentence_logits.defined())
    tensors.emplace_back(io::next_sentence_output_name(c.family), out.next_sentence_logits);
  if (out.causal_lm_logits.defined()) tensors.emplace_back("logits", out.causal_lm_logits);
  if (out.sequence_logits.defined()) tensors.emplace_back("sequence_logits", out.sequence_logits);
  if (out.token_logits.defined()) tensors.emplace_back("token_logits", out.token_logits);
  if (out.start_logits.defined()) {
    tensors.emplace_back("start_logits", out.start_logits);
    tensors.emplace_back("end_logits", out.end_logits);
  }
  const bool logits = out.causal_lm_logits.defined();
  return write_outputs(o, global, tensors, logits ? "logits" : "last_hidden_state",
                       logits ? out.causal_lm_logits : out.base.last_hidden_state);
}

}  // namespace

void register_model_commands(CLI::App& app, GlobalOptions& global) {
  auto encode = std::make_shared<EncodeOptions>();
  auto* e = app.add_subcommand(
      "encode",
      "run a model directory (Hugging Face BERT/RoBERTa/ALBERT/GPT-2 layout or attnkit, any model "
      "shape) on token ids");
  e->add_option("--model", encode->model,
                "model directory (config.json + model.safetensors), a llama-architecture .gguf file, "
                "checkpoint or run directory "
                "(its best checkpoint, else its newest)")
      ->required();
  e->add_option("--ids", encode->ids,
                "token ids separated by spaces, e.g. \"101 7592 102\" (an encoder-decoder's source)")
      ->required();
  e->add_option("--decoder-ids", encode->decoder_ids,
                "encoder-decoder models: the decoder's input ids; adds logits [1, m, vocab] to "
                "encoder_last_hidden_state");
  e->add_option("--token-type-ids", encode->token_type_ids, "segment ids (default zeros)");
  e->add_option("--attention-mask", encode->attention_mask, "1 = real token, 0 = padding");
  e->add_option("--output", encode->output,
                "write a safetensors file with last_hidden_state [1, n, hidden] (BERT/ALBERT) or "
                "logits [1, n, vocab] (GPT-2), every layer's hidden_states.{k} and the heads' "
                "outputs; without it, print the shape and a checksum");
  e->add_option("--head-mask", encode->head_mask,
                "heads to mask with gate 0, JSON {\"layer\": [heads]} (heads numbered as the model "
                "has them now), or per attention site {\"decoder.cross\": {\"layer\": [heads]}}");
  e->callback([encode, &global] { global.action = [encode, &global] { return run_encode(*encode, global); }; });

  struct ConvertOptions {
    std::string from, to, format = "attnkit", quantize = "float32";
  };
  auto convert = std::make_shared<ConvertOptions>();
  auto* c = app.add_subcommand("convert",
                               "convert a model directory between Hugging Face and attnkit format");
  c->add_option("--from", convert->from, "input model directory (either format) or llama-architecture .gguf file")->required();
  c->add_option("--to", convert->to, "output directory")->required();
  c->add_option("--format", convert->format,
                 "output format (attnkit: weights laid out to be mapped at load, not copied; "
                 "huggingface: saves back byte for byte)")
      ->check(CLI::IsMember({"attnkit", "huggingface"}))
      ->capture_default_str();
  c->add_option("--quantize", convert->quantize,
                "int8: save int8 weights per row (attnkit format; loads back as int8 with no flag)")
      ->capture_default_str();
  c->callback([convert, &global] {
    global.action = [convert, &global] {
      const auto type = layers::parse_compute_type(convert->quantize, "--quantize");
      if (type == layers::ComputeType::Bf16) throw Error("--quantize: bf16 is not saved (float32 or int8)");
      io::convert_model(convert->from, convert->to, convert->format, type);
      if (!global.quiet) fmt::print("wrote {} ({} format)\n", convert->to, convert->format);
      return 0;
    };
  });
}

}  // namespace attnkit::cli
