// models::Model (model.h): the interface's shared code, and the two implementations' site lists
// and descriptions (TaskModel: one site; EncoderDecoderModel: three).
#include "attnkit/models/model_factory.h"

#include "attnkit/error.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>

namespace attnkit::models {

const char* to_string(ModelShape shape) {
  // In the enum's order.
  static constexpr const char* kNames[] = {"encoder-only", "decoder-only", "encoder-decoder"};
  const auto index = static_cast<size_t>(shape);
  return index < std::size(kNames) ? kNames[index] : "?";
}

// ---- sites ------------------------------------------------------------------------------------

int64_t AttentionSiteRef::layers() const { return stack->config().layers; }

std::vector<int64_t> AttentionSiteRef::heads_per_layer() const {
  return stack->heads_per_layer(attention);
}

void AttentionSiteRef::set_head_gates(const std::vector<at::Tensor>& gates) const {
  stack.ptr()->set_head_gates(gates, attention);
}

layers::MultiHeadAttention AttentionSiteRef::layer(int64_t layer) const {
  return stack->attention(layer, attention);
}

AttentionSiteRef Model::attention_site(const std::string& name) const {
  std::string names;
  for (auto& site : attention_sites()) {
    if (site.name == name) return site;
    names += (names.empty() ? "" : ", ") + site.name;
  }
  throw Error(fmt::format("attention site '{}' is not one of this {} model's sites ({})",
                          one_line(name), to_string(shape()), names));
}

SiteHeads site_heads_from_json(const nlohmann::json& j, const std::string& what) {
  const bool by_site = j.is_object() && !j.empty() &&
                       std::all_of(j.items().begin(), j.items().end(),
                                   [](const auto& item) { return item.value().is_object(); });
  if (!by_site) return {{"", head_indices_from_json(j, what)}};
  SiteHeads out;
  for (const auto& [name, heads] : j.items())
    out[name] = head_indices_from_json(heads, fmt::format("{}: {}", what, one_line(name)));
  return out;
}

std::vector<std::pair<AttentionSiteRef, HeadIndices>> Model::resolve_site_heads(
    const SiteHeads& heads, const std::string& what) const {
  const auto sites = attention_sites();
  std::vector<std::pair<AttentionSiteRef, HeadIndices>> out;
  for (const auto& [name, list] : heads) {
    if (!name.empty()) {
      try {
        out.emplace_back(attention_site(name), list);
      } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", what, e.what()));
      }
    } else if (sites.size() == 1) {
      out.emplace_back(sites[0], list);
    } else {
      throw Error(fmt::format("{}: this {} model has {} attention sites; name them, e.g. "
                              "{{\"{}\": {{\"0\": [1]}}}}",
                              what, to_string(shape()), sites.size(), sites.back().name));
    }
  }
  return out;
}

int64_t Model::head_count() const {
  int64_t total = 0;
  for (const auto& site : attention_sites())
    for (int64_t heads : site.heads_per_layer()) total += heads;
  return total;
}

TaskModelImpl& Model::task_model(const std::string& what) {
  auto* task = dynamic_cast<TaskModelImpl*>(this);
  if (!task)
    throw Error(fmt::format("{} needs an encoder-only or decoder-only model (BERT, ALBERT, GPT-2 "
                            "shapes); this is an {} model",
                            what, to_string(shape())));
  return *task;
}

EncoderDecoderModelImpl& Model::encoder_decoder(const std::string& what) {
  auto* model = dynamic_cast<EncoderDecoderModelImpl*>(this);
  if (!model)
    throw Error(fmt::format("{} needs an encoder-decoder model; this is a {} model", what,
                            to_string(shape())));
  return *model;
}

// ---- task models: one stack, one site ---------------------------------------------------------

ModelShape TaskModelImpl::shape() const {
  return config().attention.causal ? ModelShape::DecoderOnly : ModelShape::EncoderOnly;
}

std::vector<AttentionSiteRef> TaskModelImpl::attention_sites() const {
  const bool decoder = shape() == ModelShape::DecoderOnly;
  return {{decoder ? "decoder.self" : "encoder.self", transformer, AttentionSite::Self}};
}

void TaskModelImpl::prune_heads(const std::string& site, const HeadIndices& heads) {
  const auto ref = attention_site(site);
  ref.stack.ptr()->prune_heads(heads, ref.attention);
}

nlohmann::json TaskModelImpl::config_description() const {
  return nlohmann::json{{"model", config()}, {"heads", heads()}};
}

// ---- the encoder-decoder: two stacks, three sites ---------------------------------------------

std::vector<AttentionSiteRef> EncoderDecoderModelImpl::attention_sites() const {
  return {{"encoder.self", encoder, AttentionSite::Self},
          {"decoder.self", decoder, AttentionSite::Self},
          {"decoder.cross", decoder, AttentionSite::Cross}};
}

void EncoderDecoderModelImpl::prune_heads(const std::string& site, const HeadIndices& heads) {
  const auto ref = attention_site(site);
  ref.stack.ptr()->prune_heads(heads, ref.attention);
  config_.encoder = encoder->config();
  config_.decoder = decoder->config();
}

nlohmann::json EncoderDecoderModelImpl::config_description() const {
  return nlohmann::json{{"architecture", "encoder-decoder"}, {"encoder_decoder", config_}};
}

// ---- descriptions -----------------------------------------------------------------------------

std::shared_ptr<Model> make_model(const nlohmann::json& description, const std::string& where,
                                  const DescriptionCheck& check) {
  if (!description.is_object()) throw Error(fmt::format("{}: expected a JSON object", where));
  try {
    auto architecture = description.find("architecture");
    if (architecture != description.end()) {
      if (!architecture->is_string() || architecture->get<std::string>() != "encoder-decoder")
        throw Error(fmt::format("'architecture' {} is not supported (this build knows "
                                "\"encoder-decoder\"; task models have no 'architecture')",
                                one_line(architecture->dump())));
      if (!description.contains("encoder_decoder")) throw Error("missing 'encoder_decoder'");
      if (description.contains("model") || description.contains("heads"))
        throw Error("an encoder-decoder description has no 'model' or 'heads'");
      const auto config = description.at("encoder_decoder").get<EncoderDecoderConfig>();
      config.validate();
      if (check) check({{config.encoder, {}}, {config.decoder, {}}});
      return EncoderDecoderModel(config).ptr();
    }
    if (!description.contains("model")) throw Error("missing 'model'");
    const auto config = description.at("model").get<TransformerConfig>();
    const auto heads =
        description.contains("heads") ? description.at("heads").get<HeadsConfig>() : HeadsConfig{};
    if (check) check({{config, heads}});
    return TaskModel(config, heads).ptr();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: {}", where, one_line(e.what())));
  }
}

}  // namespace attnkit::models
