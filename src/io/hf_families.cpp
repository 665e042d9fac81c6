// The table of Hugging Face families (hf_family.h) and the config.json readers they share.
#include "hf_family.h"

#include <fmt/format.h>

#include <algorithm>

namespace attnkit::io::detail {

using nlohmann::json;

// The records, one file each (hf_bert.cpp, hf_albert.cpp, hf_gpt2.cpp, hf_roberta.cpp; Marian and
// BART share hf_bart_like.cpp; the Llama families hf_llama.cpp). A family = its file + its line here + its row below.
const HuggingFaceFamily& bert_family();
const HuggingFaceFamily& albert_family();
const HuggingFaceFamily& gpt2_family();
const HuggingFaceFamily& marian_family();
const HuggingFaceFamily& bart_family();
const HuggingFaceFamily& roberta_family();
const HuggingFaceFamily& llama_family();
const HuggingFaceFamily& mistral_family();
const HuggingFaceFamily& qwen2_family();
const HuggingFaceFamily& gemma_family();
const HuggingFaceFamily& gemma2_family();
const HuggingFaceFamily& gemma3_text_family();
const HuggingFaceFamily& phi3_family();

const std::vector<const HuggingFaceFamily*>& huggingface_families() {
  static const std::vector<const HuggingFaceFamily*> families = {
      &bert_family(),
      &albert_family(),
      &gpt2_family(),
      &marian_family(),
      &bart_family(),
      &roberta_family(),
      &llama_family(),
      &mistral_family(),
      &qwen2_family(),
      &gemma_family(),
      &gemma2_family(),
      &gemma3_text_family(),
      &phi3_family(),
  };
  return families;
}

std::string huggingface_model_types() {
  std::string names;
  for (const HuggingFaceFamily* family : huggingface_families())
    names += (names.empty() ? "" : ", ") + std::string(family->model_type);
  return names;
}

const HuggingFaceFamily& huggingface_family_named(const std::string& model_type) {
  for (const HuggingFaceFamily* family : huggingface_families())
    if (model_type == family->model_type) return *family;
  throw Error(fmt::format("config.json: model_type {} is not supported (attnkit reads {})",
                          quoted(model_type), huggingface_model_types()));
}

const HuggingFaceFamily& detect_family(const json& j) {
  if (!j.is_object()) throw Error("config.json: expected a JSON object");
  if (j.contains("model_type") && j["model_type"].is_string())
    return huggingface_family_named(j["model_type"].get<std::string>());
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"]) {
      const auto name = a.is_string() ? a.get<std::string>() : "";
      for (const HuggingFaceFamily* family : huggingface_families())
        for (const auto& prefix : family->architecture_prefixes)
          if (name.rfind(prefix, 0) == 0) return *family;
    }
  std::string prefixes;
  for (const HuggingFaceFamily* family : huggingface_families())
    for (const auto& prefix : family->architecture_prefixes)
      prefixes += (prefixes.empty() ? "" : ", ") + prefix;
  throw Error(fmt::format("config.json: no 'model_type' (and no architectures naming {}; attnkit "
                          "reads {})", prefixes, huggingface_model_types()));
}

bool HuggingFaceFamily::has(Stack stack) const {
  return std::find(stacks.begin(), stacks.end(), stack) != stacks.end();
}

void add_dense(std::vector<NameRule>& rules, const std::string& hf, const std::string& ours, Stack stack,
               TensorLayout layout, bool bias) {
  rules.push_back({hf + ".weight", ours + ".weight", stack, layout});
  if (bias) rules.push_back({hf + ".bias", ours + ".bias", stack, layout});
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

const json& require(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) throw Error(fmt::format("config.json: missing '{}'", key));
  return *it;
}

void reject_true(const json& j, const char* key, const char* what) {
  if (value_or<bool>(j, key, false))
    throw Error(fmt::format("config.json: '{}' = true ({}) is not supported", key, what));
}

layers::Activation activation_or(const json& j, const char* key, const char* fallback) {
  const auto name = value_or<std::string>(j, key, fallback);
  try {
    return layers::parse_activation(name);
  } catch (const Error&) {
    throw Error(fmt::format("config.json: {} {} is not supported (attnkit knows gelu, gelu_new, "
                            "gelu_tanh, gelu_pytorch_tanh, relu, silu, swish)", key, quoted(name)));
  }
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

void require_expressible(bool ok, const models::TransformerConfig& config, const char* what) {
  if (!ok)
    throw Error(fmt::format("cannot write a Hugging Face '{}' config: {}",
                            config.family.name(), what));
}

}  // namespace attnkit::io::detail
