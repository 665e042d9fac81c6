#include "attnkit/io/huggingface.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/safetensors.h"
#include "model_size_check.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

namespace attnkit::io {
namespace {

using nlohmann::json;
using models::HeadsConfig;
using models::TransformerConfig;

// ------------------------------------------------------------------------------------------
// Name tables. A rule binds one HF tensor to one attnkit parameter (or three, for GPT-2's fused
// c_attn). Base rules are relative to the base prefix on the HF side and to "transformer." on
// ours; head rules are absolute on both sides. "{layer}" is the block index.

enum class Layout { Same, Transposed, FusedQkv };
enum class Scope { Base, Head };

struct Rule {
  std::string hf;
  std::string ours;  // for FusedQkv: contains "{qkv}"
  Layout layout = Layout::Same;
  Scope scope = Scope::Base;
};

// One module's weight and bias.
void add_dense(std::vector<Rule>& rules, const std::string& hf, const std::string& ours,
               Layout layout = Layout::Same, Scope scope = Scope::Base, bool bias = true) {
  rules.push_back({hf + ".weight", ours + ".weight", layout, scope});
  if (bias) rules.push_back({hf + ".bias", ours + ".bias", layout, scope});
}

const char* base_prefix(const std::string& model_type) {
  if (model_type == "bert") return "bert.";
  if (model_type == "albert") return "albert.";
  return "transformer.";
}

std::vector<Rule> bert_like_rules(const TransformerConfig& c, const HeadsConfig& h, bool albert) {
  std::vector<Rule> r;
  r.push_back({"embeddings.word_embeddings.weight", "embeddings.token.weight"});
  r.push_back({"embeddings.position_embeddings.weight", "embeddings.position.weight"});
  if (c.type_vocab_size > 0)
    r.push_back({"embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"});
  add_dense(r, "embeddings.LayerNorm", "embeddings.norm");
  const std::string block = "blocks.{layer}.";
  if (albert) {
    add_dense(r, "encoder.embedding_hidden_mapping_in", "embeddings.projection");
    const std::string layer = "encoder.albert_layer_groups.{layer}.albert_layers.0.";
    add_dense(r, layer + "attention.query", block + "attention.q");
    add_dense(r, layer + "attention.key", block + "attention.k");
    add_dense(r, layer + "attention.value", block + "attention.v");
    add_dense(r, layer + "attention.dense", block + "attention.o");
    add_dense(r, layer + "attention.LayerNorm", block + "ln_attention");
    add_dense(r, layer + "ffn", block + "ffn.fc_in");
    add_dense(r, layer + "ffn_output", block + "ffn.fc_out");
    add_dense(r, layer + "full_layer_layer_norm", block + "ln_ffn");
    if (c.pooler) add_dense(r, "pooler", "pooler");
  } else {
    const std::string layer = "encoder.layer.{layer}.";
    add_dense(r, layer + "attention.self.query", block + "attention.q");
    add_dense(r, layer + "attention.self.key", block + "attention.k");
    add_dense(r, layer + "attention.self.value", block + "attention.v");
    add_dense(r, layer + "attention.output.dense", block + "attention.o");
    add_dense(r, layer + "attention.output.LayerNorm", block + "ln_attention");
    add_dense(r, layer + "intermediate.dense", block + "ffn.fc_in");
    add_dense(r, layer + "output.dense", block + "ffn.fc_out");
    add_dense(r, layer + "output.LayerNorm", block + "ln_ffn");
    if (c.pooler) add_dense(r, "pooler.dense", "pooler");
  }
  const Scope head = Scope::Head;
  if (h.masked_lm) {
    const std::string mlm = albert ? "predictions." : "cls.predictions.";
    add_dense(r, mlm + (albert ? "dense" : "transform.dense"), "masked_lm.dense", Layout::Same, head);
    add_dense(r, mlm + (albert ? "LayerNorm" : "transform.LayerNorm"), "masked_lm.norm",
              Layout::Same, head);
    r.push_back({mlm + "bias", "masked_lm.bias", Layout::Same, head});
    if (!h.tie_lm) r.push_back({mlm + "decoder.weight", "masked_lm.decoder", Layout::Same, head});
  }
  if (h.next_sentence > 0)
    add_dense(r, albert ? "sop_classifier.classifier" : "cls.seq_relationship", "next_sentence",
              Layout::Same, head);
  if (h.sequence_labels > 0) add_dense(r, "classifier", "classifier", Layout::Same, head);
  if (h.token_labels > 0) add_dense(r, "classifier", "tagger", Layout::Same, head);
  if (h.span) add_dense(r, "qa_outputs", "span", Layout::Same, head);
  return r;
}

std::vector<Rule> gpt2_rules(const TransformerConfig& c, const HeadsConfig& h) {
  std::vector<Rule> r;
  r.push_back({"wte.weight", "embeddings.token.weight"});
  r.push_back({"wpe.weight", "embeddings.position.weight"});
  const std::string layer = "h.{layer}.", block = "blocks.{layer}.";
  add_dense(r, layer + "ln_1", block + "ln_attention");
  add_dense(r, layer + "attn.c_attn", block + "attention.{qkv}", Layout::FusedQkv);
  add_dense(r, layer + "attn.c_proj", block + "attention.o", Layout::Transposed);
  add_dense(r, layer + "ln_2", block + "ln_ffn");
  add_dense(r, layer + "mlp.c_fc", block + "ffn.fc_in", Layout::Transposed);
  add_dense(r, layer + "mlp.c_proj", block + "ffn.fc_out", Layout::Transposed);
  add_dense(r, "ln_f", "final_norm");
  if (h.causal_lm && !h.tie_lm) r.push_back({"lm_head.weight", "lm_head", Layout::Same, Scope::Head});
  if (h.sequence_labels > 0)
    add_dense(r, "score", "classifier", Layout::Same, Scope::Head, h.sequence_bias);
  return r;
}

// A rule instantiated for one block: full HF name and the attnkit parameter name(s).
struct Binding {
  std::string hf;
  std::vector<std::string> ours;
  Layout layout;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::vector<Binding> bindings(const std::string& model_type, const TransformerConfig& c,
                              const HeadsConfig& h, bool prefixed, int64_t blocks) {
  const auto rules = model_type == "gpt2" ? gpt2_rules(c, h)
                                          : bert_like_rules(c, h, model_type == "albert");
  std::vector<Binding> out;
  for (const auto& rule : rules) {
    const bool per_block = rule.hf.find("{layer}") != std::string::npos;
    for (int64_t b = 0; b < (per_block ? blocks : 1); ++b) {
      const std::string index = std::to_string(b);
      Binding binding;
      binding.layout = rule.layout;
      binding.hf = (rule.scope == Scope::Base && prefixed ? base_prefix(model_type) : "") +
                   replace_all(rule.hf, "{layer}", index);
      const std::string ours = (rule.scope == Scope::Base ? "transformer." : "") +
                               replace_all(rule.ours, "{layer}", index);
      if (rule.layout == Layout::FusedQkv) {
        for (const char* part : {"q", "k", "v"}) binding.ours.push_back(replace_all(ours, "{qkv}", part));
      } else {
        binding.ours.push_back(ours);
      }
      out.push_back(std::move(binding));
    }
  }
  return out;
}

// Tied copies and aliases: HF name -> the canonical HF name whose value it repeats. The word
// embeddings' own name is given without the base prefix (resolved at use).
std::vector<std::pair<std::string, std::string>> aliases(const std::string& model_type,
                                                         const HeadsConfig& h) {
  std::vector<std::pair<std::string, std::string>> a;
  if (model_type == "gpt2") {
    if (h.causal_lm && h.tie_lm) a.push_back({"lm_head.weight", "@wte.weight"});
    return a;
  }
  if (!h.masked_lm) return a;
  const std::string mlm = model_type == "albert" ? "predictions." : "cls.predictions.";
  if (h.tie_lm) a.push_back({mlm + "decoder.weight", "@embeddings.word_embeddings.weight"});
  a.push_back({mlm + "decoder.bias", mlm + "bias"});
  return a;
}

bool is_buffer(const std::string& model_type, const std::string& base_name) {
  static const std::regex bert_buffers(R"(^embeddings\.(position_ids|token_type_ids)$)");
  static const std::regex gpt2_buffers(R"(^h\.\d+\.attn\.(bias|masked_bias)$)");
  return std::regex_match(base_name, model_type == "gpt2" ? gpt2_buffers : bert_buffers);
}

std::string shape_string(at::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string list_names(const std::vector<std::string>& names, size_t limit = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += fmt::format(", ... ({} in all)", names.size());
  return out;
}

// ------------------------------------------------------------------------------------------
// config.json

const json& require(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) throw Error(fmt::format("config.json: missing '{}'", key));
  return *it;
}

template <typename T>
T value(const json& j, const char* key) {
  const json& v = require(j, key);
  try {
    if constexpr (std::is_same_v<T, int64_t>) {
      if (!v.is_number_integer())
        throw Error(fmt::format("config.json: '{}' must be an integer ({})", key, v.dump()));
    }
    return v.get<T>();
  } catch (const json::exception&) {
    throw Error(fmt::format("config.json: '{}' has the wrong type ({})", key, v.dump()));
  }
}

template <typename T>
T value_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : value<T>(j, key);
}

void reject_true(const json& j, const char* key, const char* what) {
  if (value_or<bool>(j, key, false))
    throw Error(fmt::format("config.json: '{}' = true ({}) is not supported", key, what));
}

std::string detect_model_type(const json& j) {
  if (!j.is_object()) throw Error("config.json: expected a JSON object");
  if (j.contains("model_type") && j["model_type"].is_string()) {
    const auto mt = j["model_type"].get<std::string>();
    if (mt == "bert" || mt == "albert" || mt == "gpt2") return mt;
    throw Error(fmt::format("config.json: model_type '{}' is not supported (attnkit reads bert, "
                            "albert, gpt2)", mt));
  }
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"]) {
      const auto name = a.is_string() ? a.get<std::string>() : "";
      if (name.rfind("Bert", 0) == 0) return "bert";
      if (name.rfind("Albert", 0) == 0) return "albert";
      if (name.rfind("GPT2", 0) == 0) return "gpt2";
    }
  throw Error("config.json: no 'model_type' (and no architectures naming Bert, Albert or GPT2)");
}

bool architecture_contains(const json& j, const std::string& part) {
  if (!j.contains("architectures") || !j["architectures"].is_array()) return false;
  for (const auto& a : j["architectures"])
    if (a.is_string() && a.get<std::string>().find(part) != std::string::npos) return true;
  return false;
}

json label_maps(int64_t labels) {
  json id2label = json::object(), label2id = json::object();
  for (int64_t i = 0; i < labels; ++i) {
    id2label[std::to_string(i)] = fmt::format("LABEL_{}", i);
    label2id[fmt::format("LABEL_{}", i)] = i;
  }
  return json{{"id2label", id2label}, {"label2id", label2id}};
}

}  // namespace

TransformerConfig config_from_huggingface(const json& j, std::string* model_type_out) {
  const std::string model_type = detect_model_type(j);
  if (model_type_out) *model_type_out = model_type;
  TransformerConfig c;
  if (model_type == "gpt2") {
    const int64_t hidden = value<int64_t>(j, "n_embd");
    c = TransformerConfig::gpt2(value<int64_t>(j, "vocab_size"), hidden,
                                value<int64_t>(j, "n_layer"), value<int64_t>(j, "n_head"));
    c.intermediate = value_or<int64_t>(j, "n_inner", 4 * hidden);
    c.activation = value_or<std::string>(j, "activation_function", "gelu_new");
    c.max_positions = value_or<int64_t>(j, "n_positions", 1024);
    c.layer_norm_eps = value_or<double>(j, "layer_norm_epsilon", 1e-5);
    c.dropout = value_or<double>(j, "resid_pdrop", 0.1);
    c.attention_dropout = value_or<double>(j, "attn_pdrop", 0.1);
    c.tie_word_embeddings = value_or<bool>(j, "tie_word_embeddings", true);
    if (!value_or<bool>(j, "scale_attn_weights", true))
      throw Error("config.json: 'scale_attn_weights' = false is not supported");
    reject_true(j, "scale_attn_by_inverse_layer_idx", "per-layer attention scaling");
    reject_true(j, "add_cross_attention", "GPT-2 with cross attention");
  } else {
    const bool albert = model_type == "albert";
    const int64_t vocab = value<int64_t>(j, "vocab_size"), hidden = value<int64_t>(j, "hidden_size");
    const int64_t layers = value<int64_t>(j, "num_hidden_layers");
    const int64_t heads = value<int64_t>(j, "num_attention_heads");
    const int64_t intermediate = value<int64_t>(j, "intermediate_size");
    if (albert) {
      c = TransformerConfig::albert(vocab, value_or<int64_t>(j, "embedding_size", 128), hidden,
                                    layers, heads, intermediate);
      c.layer_groups = value_or<int64_t>(j, "num_hidden_groups", 1);
      const int64_t inner = value_or<int64_t>(j, "inner_group_num", 1);
      if (inner != 1)
        throw Error(fmt::format("config.json: inner_group_num = {} is not supported (only 1)", inner));
    } else {
      c = TransformerConfig::bert(vocab, hidden, layers, heads, intermediate);
      reject_true(j, "is_decoder", "BERT as a decoder");
      reject_true(j, "add_cross_attention", "BERT with cross attention");
    }
    c.activation = value_or<std::string>(j, "hidden_act", albert ? "gelu_new" : "gelu");
    c.max_positions = value_or<int64_t>(j, "max_position_embeddings", 512);
    c.type_vocab_size = value_or<int64_t>(j, "type_vocab_size", 2);
    c.layer_norm_eps = value_or<double>(j, "layer_norm_eps", 1e-12);
    c.dropout = value_or<double>(j, "hidden_dropout_prob", albert ? 0.0 : 0.1);
    c.attention_dropout = value_or<double>(j, "attention_probs_dropout_prob", albert ? 0.0 : 0.1);
    c.pad_token_id = value_or<int64_t>(j, "pad_token_id", 0);
    const auto positions = value_or<std::string>(j, "position_embedding_type", "absolute");
    if (positions != "absolute")
      throw Error(fmt::format("config.json: position_embedding_type '{}' is not supported (only "
                              "absolute)", positions));
  }
  if (j.contains("pruned_heads") && !j["pruned_heads"].is_null())
    c.pruned_heads = models::head_indices_from_json(j["pruned_heads"], "config.json: pruned_heads");
  c.validate();
  return c;
}

json config_to_huggingface(const TransformerConfig& c, const HeadsConfig& h) {
  auto require_config = [&](bool ok, const char* what) {
    if (!ok)
      throw Error(fmt::format("cannot write a Hugging Face '{}' config: {}", c.family, what));
  };
  require_config(c.attention.kind == layers::AttentionKind::Softmax && !c.attention.talking_heads &&
                     c.attention.key_size == 0 && c.attention.value_size == 0,
                 "HF models use plain softmax attention with key_size = hidden / heads");
  require_config(!c.cross_attention && c.condition_size == 0,
                 "cross attention and Conditional LayerNorm have no HF equivalent here");
  require_config(c.positions == "learned", "HF models use learned absolute positions");
  json j;
  if (c.family == "gpt2") {
    require_config(c.norm_first && c.final_layer_norm && !c.embedding_layer_norm && !c.pooler &&
                       c.type_vocab_size == 0 && c.attention.causal && !c.share_layers,
                   "the switches differ from GPT-2's (pre-LN, final LN, causal, no pooler)");
    j = {{"model_type", "gpt2"},
         {"architectures", {h.sequence_labels > 0 ? "GPT2ForSequenceClassification"
                                                  : "GPT2LMHeadModel"}},
         {"vocab_size", c.vocab_size}, {"n_embd", c.hidden}, {"n_layer", c.layers},
         {"n_head", c.heads}, {"n_inner", c.intermediate}, {"n_positions", c.max_positions},
         {"n_ctx", c.max_positions}, {"activation_function", c.activation},
         {"layer_norm_epsilon", c.layer_norm_eps}, {"resid_pdrop", c.dropout},
         {"embd_pdrop", c.dropout}, {"attn_pdrop", c.attention_dropout},
         {"scale_attn_weights", true}, {"tie_word_embeddings", h.tie_lm},
         {"initializer_range", 0.02}};
    if (h.sequence_labels > 0) j.update(label_maps(h.sequence_labels));
  } else {
    const bool albert = c.family == "albert";
    require_config(c.family == "bert" || albert, "family must be bert, albert or gpt2");
    require_config(!c.norm_first && !c.final_layer_norm && c.embedding_layer_norm &&
                       !c.attention.causal && c.share_layers == albert,
                   "the switches differ from the family's (post-LN, bidirectional)");
    std::string arch = albert ? "AlbertModel" : "BertModel";
    const std::string family = albert ? "Albert" : "Bert";
    if (h.masked_lm && h.next_sentence > 0) arch = family + "ForPreTraining";
    else if (h.masked_lm) arch = family + "ForMaskedLM";
    else if (h.sequence_labels > 0) arch = family + "ForSequenceClassification";
    else if (h.token_labels > 0) arch = family + "ForTokenClassification";
    else if (h.span) arch = family + "ForQuestionAnswering";
    j = {{"model_type", albert ? "albert" : "bert"},
         {"architectures", {arch}},
         {"vocab_size", c.vocab_size}, {"hidden_size", c.hidden},
         {"num_hidden_layers", c.layers}, {"num_attention_heads", c.heads},
         {"intermediate_size", c.intermediate}, {"hidden_act", c.activation},
         {"max_position_embeddings", c.max_positions}, {"type_vocab_size", c.type_vocab_size},
         {"layer_norm_eps", c.layer_norm_eps}, {"hidden_dropout_prob", c.dropout},
         {"attention_probs_dropout_prob", c.attention_dropout}, {"pad_token_id", c.pad_token_id},
         {"position_embedding_type", "absolute"}, {"initializer_range", 0.02}};
    if (albert) {
      j["embedding_size"] = c.effective_embedding_size();
      j["num_hidden_groups"] = c.layer_groups;
      j["inner_group_num"] = 1;
    }
    const int64_t labels = std::max(h.sequence_labels, h.token_labels);
    if (labels > 0) j.update(label_maps(labels));
  }
  if (!c.pruned_heads.empty()) j["pruned_heads"] = models::head_indices_to_json(c.pruned_heads);
  j["torch_dtype"] = "float32";
  return j;
}

HuggingFaceLayout default_layout(const TransformerConfig& c, const HeadsConfig& h) {
  HuggingFaceLayout layout;
  layout.model_type = c.family;
  layout.prefixed = h.any();  // *ForPreTraining, GPT2LMHeadModel, ...: save_pretrained's names
  return layout;
}

// ------------------------------------------------------------------------------------------
// Loading

namespace {

// Parameters by name; throws if a rule names one the model lacks (a table bug, not user input).
at::Tensor parameter(std::map<std::string, at::Tensor>& params, const std::string& name) {
  auto it = params.find(name);
  if (it == params.end()) throw Error(fmt::format("internal: attnkit has no parameter '{}'", name));
  return it->second;
}

std::vector<int64_t> expected_hf_shape(const Binding& b, std::map<std::string, at::Tensor>& params) {
  auto ours = parameter(params, b.ours[0]).sizes().vec();
  if (b.layout == Layout::Same) return ours;
  if (b.layout == Layout::Transposed) {
    if (ours.size() == 2) std::swap(ours[0], ours[1]);
    return ours;
  }
  // FusedQkv: weight [out, in] x3 -> [in, 3 out]; bias [out] x3 -> [3 out]
  if (ours.size() == 2) return {ours[1], 3 * ours[0]};
  return {3 * ours[0]};
}

void assign(const Binding& b, const at::Tensor& hf, std::map<std::string, at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  auto value = hf.to(at::kFloat);
  switch (b.layout) {
    case Layout::Same: parameter(params, b.ours[0]).copy_(value); break;
    case Layout::Transposed:
      parameter(params, b.ours[0]).copy_(value.dim() == 2 ? value.t() : value);
      break;
    case Layout::FusedQkv: {
      auto parts = (value.dim() == 2 ? value.t() : value).chunk(3, 0);
      for (int i = 0; i < 3; ++i) parameter(params, b.ours[i]).copy_(parts[i]);
      break;
    }
  }
}

at::Tensor hf_value(const Binding& b, std::map<std::string, at::Tensor>& params) {
  switch (b.layout) {
    case Layout::Same: return parameter(params, b.ours[0]).detach().clone();
    case Layout::Transposed: {
      auto p = parameter(params, b.ours[0]).detach();
      return (p.dim() == 2 ? p.t() : p).contiguous();
    }
    case Layout::FusedQkv: {
      auto fused = at::cat({parameter(params, b.ours[0]).detach(), parameter(params, b.ours[1]).detach(),
                            parameter(params, b.ours[2]).detach()}, 0);
      return (fused.dim() == 2 ? fused.t() : fused).contiguous();
    }
  }
  return {};
}

std::string canonical_name(std::string name) {
  // Old TF-converted checkpoints call LayerNorm's parameters gamma and beta.
  static const std::regex gamma(R"(\.gamma$)"), beta(R"(\.beta$)");
  name = std::regex_replace(name, gamma, ".weight");
  return std::regex_replace(name, beta, ".bias");
}

json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    throw Error(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
}

}  // namespace

models::TaskModel load_huggingface(const std::string& directory, HuggingFaceModel* info_out) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(directory) / "config.json").string();
  const std::string weights_path = (fs::path(directory) / "model.safetensors").string();
  if (!fs::exists(config_path)) throw Error(fmt::format("{}: no config.json", directory));
  if (!fs::exists(weights_path)) {
    if (fs::exists(fs::path(directory) / "pytorch_model.bin"))
      throw Error(fmt::format("{}: only pytorch_model.bin (pickle) found; attnkit reads "
                              "model.safetensors (convert it with transformers' save_pretrained("
                              "safe_serialization=True))", directory));
    throw Error(fmt::format("{}: no model.safetensors", directory));
  }
  HuggingFaceModel info;
  info.config_json = read_json_file(config_path);
  std::string model_type;
  try {
    info.config = config_from_huggingface(info.config_json, &model_type);
  } catch (const Error& e) {
    // Its messages say "config.json: ..."; name the file the user gave (fuzz finding).
    const std::string what = e.what(), prefix = "config.json: ";
    throw Error(config_path + ": " + (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what));
  }
  auto& layout = info.layout;
  layout.model_type = model_type;

  auto file = SafetensorsFile::open(weights_path);
  // Canonical name -> name in the file.
  std::map<std::string, std::string> by_name;
  for (const auto& e : file.entries()) {
    const auto canonical = canonical_name(e.name);
    if (!by_name.emplace(canonical, e.name).second)
      throw Error(fmt::format("{}: '{}' appears twice (as gamma/beta and weight/bias)",
                              weights_path, canonical));
  }
  const std::string prefix = base_prefix(model_type);
  layout.prefixed = std::any_of(by_name.begin(), by_name.end(), [&](const auto& kv) {
    return kv.first.rfind(prefix, 0) == 0;
  });
  auto base = [&](const std::string& name) { return (layout.prefixed ? prefix : "") + name; };
  auto has = [&](const std::string& name) { return by_name.count(name) > 0; };
  auto tensor = [&](const std::string& name) { return file.tensor(by_name.at(name)); };
  auto rows = [&](const std::string& name) {
    const TensorEntry& entry = file.entry(by_name.at(name));
    if (entry.shape.empty())
      throw Error(fmt::format("{}: tensor '{}' is a scalar, not a matrix", weights_path, entry.name));
    return entry.shape[0];
  };

  // Which heads and optional parts the checkpoint holds.
  auto& c = info.config;
  auto& h = info.heads;
  const auto& cj = info.config_json;
  if (model_type == "gpt2") {
    h.causal_lm = true;
    if (has("lm_head.weight") && has(base("wte.weight")))
      h.tie_lm = tensor("lm_head.weight").equal(tensor(base("wte.weight")));
    if (has("score.weight")) {
      h.sequence_labels = rows("score.weight");
      h.sequence_pooling = models::Pooling::Last;
      h.sequence_bias = has("score.bias");
    }
  } else {
    const bool albert = model_type == "albert";
    const std::string mlm = albert ? "predictions." : "cls.predictions.";
    c.pooler = has(base(albert ? "pooler.weight" : "pooler.dense.weight"));
    c.type_vocab_size = has(base("embeddings.token_type_embeddings.weight")) ? c.type_vocab_size : 0;
    h.masked_lm = std::any_of(by_name.begin(), by_name.end(),
                              [&](const auto& kv) { return kv.first.rfind(mlm, 0) == 0; });
    if (h.masked_lm && has(mlm + "decoder.weight") && has(base("embeddings.word_embeddings.weight")))
      h.tie_lm = tensor(mlm + "decoder.weight").equal(tensor(base("embeddings.word_embeddings.weight")));
    const std::string nsp = albert ? "sop_classifier.classifier.weight" : "cls.seq_relationship.weight";
    if (has(nsp)) h.next_sentence = rows(nsp);
    if (has("classifier.weight")) {
      if (architecture_contains(cj, "TokenClassification")) h.token_labels = rows("classifier.weight");
      else h.sequence_labels = rows("classifier.weight");
    }
    h.span = has("qa_outputs.weight");
    if (value_or<double>(cj, "classifier_dropout", -1.0) >= 0)
      h.classifier_dropout = value<double>(cj, "classifier_dropout");
  }
  if ((h.next_sentence > 0 || (h.sequence_labels > 0 && h.sequence_pooling == models::Pooling::Pooler)) &&
      !c.pooler)
    throw Error(fmt::format("{}: the checkpoint has a classifier over the pooled output but no "
                            "pooler weights", weights_path));

  detail::check_config_fits_weights(c, h, file, config_path);
  models::TaskModel model(c, h);
  model->eval();
  auto params = model->named_parameters(true);
  std::map<std::string, at::Tensor> by_ours;
  for (const auto& item : params) by_ours[item.key()] = item.value();

  std::set<std::string> used;
  std::vector<std::string> missing, mismatched;
  const auto table = bindings(model_type, c, h, layout.prefixed, model->transformer->block_count());
  for (const auto& b : table) {
    if (!has(b.hf)) {
      missing.push_back(b.hf);
      continue;
    }
    const auto& entry = file.entry(by_name.at(b.hf));
    const auto expected = expected_hf_shape(b, by_ours);
    if (entry.shape != expected) {
      mismatched.push_back(fmt::format("{}: expected {}, got {}", b.hf, shape_string(expected),
                                       shape_string(entry.shape)));
      continue;
    }
    assign(b, file.tensor(entry.name), by_ours);
    used.insert(b.hf);
    if (entry.dtype != "F32") layout.dtypes[b.hf] = entry.dtype;
  }
  // Tied copies and aliases: when present they must repeat their canonical tensor.
  for (const auto& [alias, canonical_spec] : aliases(model_type, h)) {
    const std::string canonical =
        canonical_spec[0] == '@' ? base(canonical_spec.substr(1)) : canonical_spec;
    if (!has(alias)) continue;
    if (!has(canonical)) {
      // Only the alias was stored (e.g. cls.predictions.decoder.bias without cls.predictions.bias).
      auto it = std::find(missing.begin(), missing.end(), canonical);
      if (it == missing.end()) continue;
      missing.erase(it);
      for (const auto& b : table)
        if (b.hf == canonical) assign(b, tensor(alias), by_ours);
      layout.alias_only.push_back(canonical);
    }
    used.insert(alias);
    layout.tied_copies.push_back(alias);
    const auto& alias_entry = file.entry(by_name.at(alias));
    if (alias_entry.dtype != "F32") layout.dtypes[alias] = alias_entry.dtype;
  }
  if (!mismatched.empty())
    throw Error(fmt::format("{}: shape mismatch: {}", weights_path, list_names(mismatched, 4)));
  if (!missing.empty())
    throw Error(fmt::format("{}: missing tensors: {}", weights_path, list_names(missing)));
  std::vector<std::string> unknown;
  for (const auto& [canonical, stored] : by_name) {
    if (used.count(canonical)) continue;
    std::string base_name = canonical;
    if (layout.prefixed && base_name.rfind(prefix, 0) == 0) base_name = base_name.substr(prefix.size());
    if (is_buffer(model_type, base_name)) {
      layout.skipped.push_back(stored);
      continue;
    }
    unknown.push_back(stored);
  }
  if (!unknown.empty())
    throw Error(fmt::format("{}: unknown tensors (not part of a {} model attnkit knows): {}",
                            weights_path, model_type, list_names(unknown)));
  if (info_out) *info_out = std::move(info);
  return model;
}

NamedTensors huggingface_tensors(models::TaskModel& model, const HuggingFaceLayout& layout) {
  const auto& c = model->config();
  const auto& h = model->heads();
  std::map<std::string, at::Tensor> by_ours;
  for (const auto& item : model->named_parameters(true)) by_ours[item.key()] = item.value();
  const std::string prefix = layout.prefixed ? base_prefix(layout.model_type) : "";
  std::map<std::string, at::Tensor> out;
  for (const auto& b : bindings(layout.model_type, c, h, layout.prefixed, model->transformer->block_count()))
    out[b.hf] = hf_value(b, by_ours);
  for (const auto& alias : layout.tied_copies)
    for (const auto& [name, canonical_spec] : aliases(layout.model_type, h))
      if (name == alias) {
        const std::string canonical =
            canonical_spec[0] == '@' ? prefix + canonical_spec.substr(1) : canonical_spec;
        out[alias] = out.at(canonical).clone();
      }
  for (const auto& canonical : layout.alias_only) out.erase(canonical);
  NamedTensors tensors;
  for (auto& [name, t] : out) {
    auto it = layout.dtypes.find(name);
    if (it != layout.dtypes.end()) {
      const std::map<std::string, at::ScalarType> types{
          {"F64", at::kDouble}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"F32", at::kFloat}};
      auto type = types.find(it->second);
      if (type != types.end()) t = t.to(type->second);
    }
    tensors.emplace_back(name, t);
  }
  return tensors;
}

void save_huggingface(models::TaskModel& model, const HuggingFaceModel& info,
                      const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create directory ({})", directory, ec.message()));
  json config = info.config_json.is_null() ? config_to_huggingface(model->config(), model->heads())
                                           : info.config_json;
  // Heads pruned since loading: the config records them as save_pretrained does.
  const auto& pruned = model->config().pruned_heads;
  if (!pruned.empty()) config["pruned_heads"] = models::head_indices_to_json(pruned);
  else if (config.contains("pruned_heads")) config["pruned_heads"] = json::object();
  // HF writes config.json with indent 2 and sorted keys (nlohmann's objects are sorted).
  write_file_atomically((fs::path(directory) / "config.json").string(), config.dump(2) + "\n");
  save_safetensors((fs::path(directory) / "model.safetensors").string(),
                   huggingface_tensors(model, info.layout), {{"format", "pt"}});
}

}  // namespace attnkit::io
