// The table of Hugging Face families (hf_family.h) and the config.json readers they share.
#include "hf_family.h"

#include <fmt/format.h>

namespace attnkit::io::detail {

using nlohmann::json;

const std::vector<const HuggingFaceFamily*>& huggingface_families() {
  static const std::vector<const HuggingFaceFamily*> families = {
      &bert_family(),
      &albert_family(),
      &gpt2_family(),
      &marian_family(),
      &bart_family(),
      &roberta_family(),
  };
  return families;
}

std::string huggingface_model_types() {
  std::string names;
  for (const HuggingFaceFamily* family : huggingface_families())
    names += (names.empty() ? "" : ", ") + std::string(family->model_type);
  return names;
}

const HuggingFaceFamily* huggingface_family(models::ModelFamily family) {
  for (const HuggingFaceFamily* candidate : huggingface_families())
    if (candidate->family == family && !candidate->encoder_decoder) return candidate;
  return nullptr;
}

const HuggingFaceFamily& huggingface_family_named(const std::string& model_type) {
  for (const HuggingFaceFamily* family : huggingface_families())
    if (model_type == family->model_type) return *family;
  throw Error(fmt::format("config.json: model_type {} is not supported (attnkit reads {})",
                          quoted(model_type), huggingface_model_types()));
}

void add_dense(std::vector<NameRule>& rules, const std::string& hf, const std::string& ours,
               TensorLayout layout, RuleScope scope, bool bias) {
  rules.push_back({hf + ".weight", ours + ".weight", layout, scope});
  if (bias) rules.push_back({hf + ".bias", ours + ".bias", layout, scope});
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
                            models::model_family_name(config.family), what));
}

}  // namespace attnkit::io::detail
