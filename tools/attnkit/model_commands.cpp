// attnkit encode / attnkit convert: run and convert model directories (Hugging Face layout or
// attnkit's own; see include/attnkit/io/model_directory.h).
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
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
  std::string head_mask;  // {"layer": [heads]} masked with gate 0 (depth numbering)
};

at::Tensor parse_row(const std::string& text, const char* option) {
  return torch::tensor(parse_id_list(text, option), torch::kLong).unsqueeze(0);
}

int run_encode(const EncodeOptions& o, const GlobalOptions& global) {
  torch::NoGradGuard no_grad;
  auto loaded = io::load_model(o.model);
  models::TaskInputs in;
  in.input_ids = parse_row(o.ids, "--ids");
  const int64_t n = in.input_ids.size(1);
  auto same_length = [&](const at::Tensor& t, const char* option) {
    if (t.size(1) != n)
      throw Error(fmt::format("{}: {} values for {} ids", option, t.size(1), n));
    return t;
  };
  const auto& c = loaded.config;
  if (in.input_ids.min().item<int64_t>() < 0 || in.input_ids.max().item<int64_t>() >= c.vocab_size)
    throw Error(fmt::format("--ids: ids must lie in [0, {}) for this model", c.vocab_size));
  if (n > c.max_positions && c.positions == layers::PositionEncoding::Learned)
    throw Error(fmt::format("--ids: {} tokens exceed the model's {} positions", n, c.max_positions));
  if (!o.token_type_ids.empty()) {
    if (c.type_vocab_size == 0) throw Error("--token-type-ids: this model has no token types");
    in.token_type_ids = same_length(parse_row(o.token_type_ids, "--token-type-ids"), "--token-type-ids");
  }
  if (!o.attention_mask.empty())
    in.attention_mask = same_length(parse_row(o.attention_mask, "--attention-mask"), "--attention-mask");
  in.output_hidden_states = true;
  if (!o.head_mask.empty()) {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(o.head_mask);
    } catch (const nlohmann::json::exception&) {
      throw Error("--head-mask: not JSON (expected {\"layer\": [heads]})");
    }
    const auto masked = models::head_indices_from_json(parsed, "--head-mask");
    std::vector<at::Tensor> gates;
    for (int64_t heads : loaded.model->heads_per_layer()) gates.push_back(torch::ones({heads}));
    for (const auto& [layer, list] : masked) {
      if (layer >= c.layers) throw Error(fmt::format("--head-mask: layer {} outside [0, {})", layer, c.layers));
      for (int64_t h : list) {
        if (h >= gates[layer].size(0))
          throw Error(fmt::format("--head-mask: layer {}: head {} outside [0, {})", layer, h,
                                  gates[layer].size(0)));
        gates[layer][h] = 0.0;
      }
    }
    loaded.model->set_head_gates(gates);
  }
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
    tensors.emplace_back(c.family == models::ModelFamily::Albert ? "sop_logits" : "seq_relationship_logits",
                         out.next_sentence_logits);
  if (out.causal_lm_logits.defined()) tensors.emplace_back("logits", out.causal_lm_logits);
  if (out.sequence_logits.defined()) tensors.emplace_back("sequence_logits", out.sequence_logits);
  if (out.token_logits.defined()) tensors.emplace_back("token_logits", out.token_logits);
  if (out.start_logits.defined()) {
    tensors.emplace_back("start_logits", out.start_logits);
    tensors.emplace_back("end_logits", out.end_logits);
  }
  const bool logits = out.causal_lm_logits.defined();
  const at::Tensor main = logits ? out.causal_lm_logits : out.base.last_hidden_state;
  if (!o.output.empty()) {
    for (auto& [name, t] : tensors) t = t.contiguous();
    io::save_safetensors(o.output, tensors, {{"format", "pt"}, {"model", o.model}});
    if (!global.quiet)
      fmt::print("wrote {}: {} [{}] and {} more tensors\n", o.output, logits ? "logits" : "last_hidden_state",
                 fmt::join(main.sizes(), ", "), tensors.size() - 1);
    return 0;
  }
  const auto m = main.to(at::kDouble);
  fmt::print("{} [{}] sum {:.6f} sum|x| {:.6f} first {:.6f}\n", logits ? "logits" : "last_hidden_state",
             fmt::join(main.sizes(), ", "), m.sum().item<double>(), m.abs().sum().item<double>(),
             m.flatten()[0].item<double>());
  return 0;
}

}  // namespace

void register_model_commands(CLI::App& app, GlobalOptions& global) {
  auto encode = std::make_shared<EncodeOptions>();
  auto* e = app.add_subcommand(
      "encode",
      "run a model directory (Hugging Face BERT/ALBERT/GPT-2 layout or attnkit) on token ids");
  e->add_option("--model", encode->model, "model directory (config.json + model.safetensors)")
      ->required();
  e->add_option("--ids", encode->ids, "token ids separated by spaces, e.g. \"101 7592 102\"")
      ->required();
  e->add_option("--token-type-ids", encode->token_type_ids, "segment ids (default zeros)");
  e->add_option("--attention-mask", encode->attention_mask, "1 = real token, 0 = padding");
  e->add_option("--output", encode->output,
                "write a safetensors file with last_hidden_state [1, n, hidden] (BERT/ALBERT) or "
                "logits [1, n, vocab] (GPT-2), every layer's hidden_states.{k} and the heads' "
                "outputs; without it, print the shape and a checksum");
  e->add_option("--head-mask", encode->head_mask,
                "heads to mask with gate 0, JSON {\"layer\": [heads]} (heads numbered as the model "
                "has them now)");
  e->callback([encode, &global] { global.action = [encode, &global] { return run_encode(*encode, global); }; });

  struct ConvertOptions {
    std::string from, to, format = "attnkit";
  };
  auto convert = std::make_shared<ConvertOptions>();
  auto* c = app.add_subcommand("convert",
                               "convert a model directory between Hugging Face and attnkit format");
  c->add_option("--from", convert->from, "input model directory (either format)")->required();
  c->add_option("--to", convert->to, "output directory")->required();
  c->add_option("--format", convert->format, "output format")
      ->check(CLI::IsMember({"attnkit", "huggingface"}))
      ->capture_default_str();
  c->callback([convert, &global] {
    global.action = [convert, &global] {
      io::convert_model(convert->from, convert->to, convert->format);
      if (!global.quiet) fmt::print("wrote {} ({} format)\n", convert->to, convert->format);
      return 0;
    };
  });
}

}  // namespace attnkit::cli
