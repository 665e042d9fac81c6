#include "attnkit/models/transformer_config.h"

#include "attnkit/error.h"
#include "attnkit/parse.h"
#include "attnkit/layers/embeddings.h"
#include "attnkit/layers/feed_forward.h"
#include "strict_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>

namespace attnkit::models {
namespace {

using nlohmann::json;
using detail::StrictReader;

void require_positive(const char* name, int64_t value) {
  if (value <= 0) throw Error(fmt::format("config: {} must be positive (got {})", name, value));
}

// Reads json[key] as a name and parses it into an enum; an unknown name is an error naming the key.
template <typename Enum, typename Parse, typename Name>
void read_name(StrictReader& r, const char* key, Enum& value, Parse parse, Name name) {
  std::string text = name(value);
  r.read(key, text);
  try {
    value = parse(text);
  } catch (const Error& e) {
    throw Error(fmt::format("config: {}: {}", key, e.what()));
  }
}

// {"layer": spec} <-> per-layer overrides (keys as decimal strings, as pruned_heads').
json layer_specs_to_json(const std::map<int64_t, layers::AttentionSpec>& specs) {
  json j = json::object();
  for (const auto& [layer, spec] : specs) j[std::to_string(layer)] = spec;
  return j;
}

std::map<int64_t, layers::AttentionSpec> layer_specs_from_json(const json& j, const char* what) {
  if (!j.is_object())
    throw Error(fmt::format("config: {}: expected an object {{\"layer\": attention}}, got {}", what,
                            one_line(j.dump())));
  std::map<int64_t, layers::AttentionSpec> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto layer = try_parse_unsigned(it.key());
    if (!layer || *layer > 999999999)
      throw Error(fmt::format("config: {}: layer '{}' is not a non-negative integer", what,
                              one_line(it.key())));
    try {
      out[static_cast<int64_t>(*layer)] = it->get<layers::AttentionSpec>();
    } catch (const Error& e) {
      throw Error(fmt::format("config: {}: layer {}: {}", what, *layer, e.what()));
    } catch (const json::exception& e) {
      throw Error(fmt::format("config: {}: layer {}: {}", what, *layer, e.what()));
    }
  }
  return out;
}

}  // namespace

ModelFamily ModelFamily::named(std::string_view name) {
  // Interned: a family is a name for the life of the process (configs copy it freely).
  static std::mutex mutex;
  static std::set<std::string, std::less<>> names;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = names.find(name);
  if (it == names.end()) it = names.emplace(name).first;
  return ModelFamily(it->c_str());
}

ModelFamily parse_model_family(std::string_view name) {
  const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
  });
  if (!valid)
    throw Error(fmt::format("unknown model family '{}' (a family name is lower-case letters, digits, '-' "
                            "and '_')", one_line(name)));
  return ModelFamily::named(name);
}

void to_json(json& j, const TransformerConfig& c) {
  j = json{{"family", model_family_name(c.family)},
           {"vocab_size", c.vocab_size},
           {"hidden", c.hidden},
           {"layers", c.layers},
           {"heads", c.heads},
           {"intermediate", c.intermediate},
           {"embedding_size", c.embedding_size},
           {"max_positions", c.max_positions},
           {"type_vocab_size", c.type_vocab_size},
           {"positions", layers::position_encoding_name(c.positions)},
           {"activation", layers::activation_name(c.activation)},
           {"norm_first", c.norm_first},
           {"layer_norm_eps", c.layer_norm_eps},
           {"embedding_layer_norm", c.embedding_layer_norm},
           {"final_layer_norm", c.final_layer_norm},
           {"pooler", c.pooler},
           {"share_layers", c.share_layers},
           {"layer_groups", c.layer_groups},
           {"tie_word_embeddings", c.tie_word_embeddings},
           {"dropout", c.dropout},
           {"attention_dropout", c.attention_dropout},
           {"attention", c.attention},
           {"cross_attention", c.cross_attention},
           {"cross_attention_spec", c.cross_attention_spec},
           {"memory_hidden", c.memory_hidden},
           {"condition_size", c.condition_size},
           {"pad_token_id", c.pad_token_id}};
  // Written only when set, so the configs of other models read as before.
  if (c.embedding_scale != 1.0) j["embedding_scale"] = c.embedding_scale;
  if (c.position_id_offset != 0) j["position_id_offset"] = c.position_id_offset;
  if (c.padding_positions) j["padding_positions"] = true;
  if (!c.pruned_heads.empty()) j["pruned_heads"] = head_indices_to_json(c.pruned_heads);
  if (!c.pruned_cross_heads.empty())
    j["pruned_cross_heads"] = head_indices_to_json(c.pruned_cross_heads);
  if (c.norm != layers::NormKind::LayerNorm) j["norm"] = layers::norm_kind_name(c.norm);
  if (c.gated_mlp) j["gated_mlp"] = true;
  if (!c.mlp_bias) j["mlp_bias"] = false;
  if (c.sublayer_output_norm) j["sublayer_output_norm"] = true;
  if (c.rotary) j["rotary"] = *c.rotary;
  if (c.rotary_local) j["rotary_local"] = *c.rotary_local;
  if (!c.layer_windows.empty()) j["layer_windows"] = c.layer_windows;
  if (c.final_logit_softcap != 0) j["final_logit_softcap"] = c.final_logit_softcap;
  if (!c.layer_attention_specs.empty())
    j["layer_attention_specs"] = layer_specs_to_json(c.layer_attention_specs);
  if (!c.layer_cross_attention_specs.empty())
    j["layer_cross_attention_specs"] = layer_specs_to_json(c.layer_cross_attention_specs);
}

json head_indices_to_json(const HeadIndices& heads) {
  json j = json::object();
  for (const auto& [layer, list] : heads) j[std::to_string(layer)] = list;
  return j;
}

HeadIndices head_indices_from_json(const json& j, const std::string& what) {
  if (!j.is_object())
    throw Error(fmt::format("{}: expected an object {{\"layer\": [heads]}}, got {}", what, j.dump()));
  HeadIndices out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const auto layer = try_parse_unsigned(key);
    if (!layer || *layer > 999999999)
      throw Error(fmt::format("{}: layer '{}' is not a non-negative integer", what, key));
    if (!it->is_array())
      throw Error(fmt::format("{}: layer {}: expected a list of heads, got {}", what, key, it->dump()));
    std::vector<int64_t> list;
    for (const auto& h : *it) {
      if (!h.is_number_integer() || h.get<int64_t>() < 0)
        throw Error(fmt::format("{}: layer {}: head {} is not a non-negative integer", what, key,
                                h.dump()));
      list.push_back(h.get<int64_t>());
    }
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    auto& slot = out[static_cast<int64_t>(*layer)];
    slot.insert(slot.end(), list.begin(), list.end());
    std::sort(slot.begin(), slot.end());
    slot.erase(std::unique(slot.begin(), slot.end()), slot.end());
  }
  return out;
}

void from_json(const json& j, TransformerConfig& c) {
  StrictReader r(j, "config");
  read_name(r, "family", c.family, parse_model_family, model_family_name);
  r.read("vocab_size", c.vocab_size);
  r.read("hidden", c.hidden);
  r.read("layers", c.layers);
  r.read("heads", c.heads);
  r.read("intermediate", c.intermediate);
  r.read("embedding_size", c.embedding_size);
  r.read("max_positions", c.max_positions);
  r.read("type_vocab_size", c.type_vocab_size);
  read_name(r, "positions", c.positions, layers::parse_position_encoding,
            layers::position_encoding_name);
  read_name(r, "activation", c.activation, layers::parse_activation, layers::activation_name);
  r.read("norm_first", c.norm_first);
  r.read("layer_norm_eps", c.layer_norm_eps);
  r.read("embedding_layer_norm", c.embedding_layer_norm);
  r.read("final_layer_norm", c.final_layer_norm);
  r.read("pooler", c.pooler);
  r.read("share_layers", c.share_layers);
  r.read("layer_groups", c.layer_groups);
  r.read("tie_word_embeddings", c.tie_word_embeddings);
  r.read("dropout", c.dropout);
  r.read("attention_dropout", c.attention_dropout);
  r.read("attention", c.attention);
  r.read("cross_attention", c.cross_attention);
  r.read("cross_attention_spec", c.cross_attention_spec);
  r.read("memory_hidden", c.memory_hidden);
  r.read("condition_size", c.condition_size);
  r.read("pad_token_id", c.pad_token_id);
  r.read("embedding_scale", c.embedding_scale);
  r.read("position_id_offset", c.position_id_offset);
  r.read("padding_positions", c.padding_positions);
  json pruned = json::object(), pruned_cross = json::object();
  r.read("pruned_heads", pruned);
  r.read("pruned_cross_heads", pruned_cross);
  c.pruned_heads = head_indices_from_json(pruned, "config: pruned_heads");
  c.pruned_cross_heads = head_indices_from_json(pruned_cross, "config: pruned_cross_heads");
  read_name(r, "norm", c.norm, layers::parse_norm_kind, layers::norm_kind_name);
  r.read("gated_mlp", c.gated_mlp);
  r.read("mlp_bias", c.mlp_bias);
  r.read("sublayer_output_norm", c.sublayer_output_norm);
  json rotary = nullptr, rotary_local = nullptr;
  r.read("rotary", rotary);
  r.read("rotary_local", rotary_local);
  if (!rotary.is_null()) c.rotary = rotary.get<ops::RotaryConfig>();
  if (!rotary_local.is_null()) c.rotary_local = rotary_local.get<ops::RotaryConfig>();
  r.read("layer_windows", c.layer_windows);
  r.read("final_logit_softcap", c.final_logit_softcap);
  json layer_specs = json::object(), layer_cross_specs = json::object();
  r.read("layer_attention_specs", layer_specs);
  r.read("layer_cross_attention_specs", layer_cross_specs);
  c.layer_attention_specs = layer_specs_from_json(layer_specs, "layer_attention_specs");
  c.layer_cross_attention_specs = layer_specs_from_json(layer_cross_specs, "layer_cross_attention_specs");
  r.reject_unknown();
}

layers::AttentionSpec TransformerConfig::layer_attention(int64_t layer) const {
  const auto it = layer_attention_specs.find(layer);
  layers::AttentionSpec spec = it != layer_attention_specs.end() ? it->second : attention;
  // A linear or cosFormer override has no window (a softmax setting).
  if (!layer_windows.empty() && layer >= 0 && layer < static_cast<int64_t>(layer_windows.size()) &&
      spec.kind == layers::AttentionKind::Softmax)
    spec.window = layer_windows[static_cast<size_t>(layer)];
  return spec;
}

layers::AttentionSpec TransformerConfig::layer_cross_attention(int64_t layer) const {
  const auto it = layer_cross_attention_specs.find(layer);
  return it != layer_cross_attention_specs.end() ? it->second : cross_attention_spec;
}

void TransformerConfig::validate() const {
  require_positive("vocab_size", vocab_size);
  require_positive("hidden", hidden);
  require_positive("layers", layers);
  require_positive("heads", heads);
  require_positive("intermediate", intermediate);
  require_positive("max_positions", max_positions);
  if (embedding_size < 0) throw Error("config: embedding_size must be >= 0");
  if (type_vocab_size < 0) throw Error("config: type_vocab_size must be >= 0");
  if ((attention.key_size == 0 || attention.value_size == 0) && hidden % heads != 0)
    throw Error(fmt::format("config: hidden {} is not divisible by heads {}", hidden, heads));
  if (share_layers && (layer_groups <= 0 || layers % layer_groups != 0))
    throw Error(fmt::format("config: layers {} must be a multiple of layer_groups {}", layers,
                            layer_groups));
  if (dropout < 0 || dropout >= 1)
    throw Error(fmt::format("config: dropout must be in [0, 1) (got {})", dropout));
  if (attention_dropout < 0 || attention_dropout >= 1)
    throw Error(fmt::format("config: attention_dropout must be in [0, 1) (got {})", attention_dropout));
  if (!(layer_norm_eps > 0) || !std::isfinite(layer_norm_eps))
    throw Error(fmt::format("config: layer_norm_eps must be positive and finite (got {})", layer_norm_eps));
  if (!(embedding_scale > 0) || !std::isfinite(embedding_scale))
    throw Error(fmt::format("config: embedding_scale must be positive (got {})", embedding_scale));
  if (position_id_offset < 0 || position_id_offset > 1000000)
    throw Error(fmt::format("config: position_id_offset must be in [0, 1000000] (got {})",
                            position_id_offset));
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    throw Error(fmt::format("config: pad_token_id {} outside the vocabulary", pad_token_id));
  if (padding_positions && (positions != layers::PositionEncoding::Learned ||
                            position_id_offset != pad_token_id + 1))
    throw Error(fmt::format("config: padding_positions needs learned positions and "
                            "position_id_offset = pad_token_id + 1 = {} (got {})",
                            pad_token_id + 1, position_id_offset));
  if (norm != layers::NormKind::LayerNorm && condition_size > 0)
    throw Error("config: RMS norms are never conditional (condition_size must be 0)");
  if (!layer_windows.empty() && static_cast<int64_t>(layer_windows.size()) != layers)
    throw Error(fmt::format("config: layer_windows has {} entries for {} layers",
                            layer_windows.size(), layers));
  if (!layer_windows.empty() && share_layers)
    throw Error("config: layer_windows with shared layers");
  for (int64_t w : layer_windows)
    if (w < 0) throw Error(fmt::format("config: layer_windows: window {} must be >= 0", w));
  const int64_t head_size = attention.key_size > 0 ? attention.key_size : hidden / heads;
  for (const auto* r : {&rotary, &rotary_local}) {
    if (!*r) continue;
    ops::check_rotary_config(**r);
    if ((*r)->head_dim != head_size)
      throw Error(fmt::format("config: rotary head_dim {} differs from the key size {}",
                              (*r)->head_dim, head_size));
  }
  if (rotary_local && !rotary) throw Error("config: rotary_local without rotary");
  if (rotary && cross_attention) throw Error("config: rotary positions with cross attention");
  if (!(final_logit_softcap >= 0) || !std::isfinite(final_logit_softcap))
    throw Error(fmt::format("config: final_logit_softcap must be finite and >= 0 (got {})",
                            final_logit_softcap));
  const int64_t blocks = share_layers ? layer_groups : layers;
  for (const auto* specs : {&layer_attention_specs, &layer_cross_attention_specs}) {
    const bool cross = specs == &layer_cross_attention_specs;
    const char* name = cross ? "layer_cross_attention_specs" : "layer_attention_specs";
    const layers::AttentionSpec& base = cross ? cross_attention_spec : attention;
    if (cross && !specs->empty() && !cross_attention)
      throw Error("config: layer_cross_attention_specs without cross_attention");
    for (const auto& [layer, spec] : *specs) {
      if (layer < 0 || layer >= blocks)
        throw Error(fmt::format("config: {}: layer {} outside [0, {})", name, layer, blocks));
      if (spec.causal != base.causal)
        throw Error(fmt::format("config: {}: layer {}: causal {} differs from the model's {}", name,
                                layer, spec.causal, base.causal));
      if ((spec.key_size == 0 || spec.value_size == 0) && hidden % heads != 0)
        throw Error(fmt::format("config: {}: layer {}: hidden {} is not divisible by heads {}", name,
                                layer, hidden, heads));
      if (spec.kv_heads < 0 || (spec.kv_heads > 0 && heads % spec.kv_heads != 0))
        throw Error(fmt::format("config: {}: layer {}: kv_heads {} does not divide heads {}", name,
                                layer, spec.kv_heads, heads));
      if (rotary && !cross && (spec.key_size > 0 ? spec.key_size : hidden / heads) != head_size)
        throw Error(fmt::format("config: {}: layer {}: key size differs from the rotary head_dim {}",
                                name, layer, head_size));
    }
  }
  for (const auto* pruned : {&pruned_heads, &pruned_cross_heads}) {
    const char* name = pruned == &pruned_heads ? "pruned_heads" : "pruned_cross_heads";
    if (pruned == &pruned_cross_heads && !pruned->empty() && !cross_attention)
      throw Error("config: pruned_cross_heads without cross_attention");
    for (const auto& [layer, list] : *pruned) {
      if (layer < 0 || layer >= blocks)
        throw Error(fmt::format("config: {}: layer {} outside [0, {})", name, layer, blocks));
      for (int64_t h : list)
        if (h < 0 || h >= heads)
          throw Error(fmt::format("config: {}: layer {}: head {} outside [0, {})", name, layer, h,
                                  heads));
    }
  }
}

TransformerConfig TransformerConfig::bert(int64_t vocab_size, int64_t hidden, int64_t layers,
                                          int64_t heads, int64_t intermediate) {
  TransformerConfig c;
  c.family = ModelFamily::Bert;
  c.vocab_size = vocab_size;
  c.hidden = hidden;
  c.layers = layers;
  c.heads = heads;
  c.intermediate = intermediate;
  return c;
}

TransformerConfig TransformerConfig::albert(int64_t vocab_size, int64_t embedding_size,
                                            int64_t hidden, int64_t layers, int64_t heads,
                                            int64_t intermediate) {
  TransformerConfig c = bert(vocab_size, hidden, layers, heads, intermediate);
  c.family = ModelFamily::Albert;
  c.embedding_size = embedding_size;
  c.activation = layers::Activation::GeluTanh;
  c.share_layers = true;
  c.dropout = 0.0;
  return c;
}

TransformerConfig TransformerConfig::gpt2(int64_t vocab_size, int64_t hidden, int64_t layers,
                                          int64_t heads) {
  TransformerConfig c;
  c.family = ModelFamily::Gpt2;
  c.vocab_size = vocab_size;
  c.hidden = hidden;
  c.layers = layers;
  c.heads = heads;
  c.intermediate = 4 * hidden;
  c.max_positions = 1024;
  c.type_vocab_size = 0;
  c.activation = layers::Activation::GeluTanh;
  c.norm_first = true;
  c.layer_norm_eps = 1e-5;
  c.embedding_layer_norm = false;
  c.final_layer_norm = true;
  c.pooler = false;
  c.attention.causal = true;
  return c;
}

TransformerConfig TransformerConfig::roberta(int64_t vocab_size, int64_t hidden, int64_t layers,
                                             int64_t heads, int64_t intermediate) {
  TransformerConfig c = bert(vocab_size, hidden, layers, heads, intermediate);
  c.family = ModelFamily::Roberta;
  c.type_vocab_size = 1;
  c.layer_norm_eps = 1e-5;
  c.pooler = false;
  c.padding_positions = true;
  c.set_pad_token_id(1);
  return c;
}

void TransformerConfig::set_pad_token_id(int64_t id) {
  pad_token_id = id;
  if (padding_positions) position_id_offset = id + 1;
}

namespace {

// The presets: a family and its conventions at given sizes.
struct Preset {
  ModelFamily family;
  TransformerConfig (*make)(const PresetSizes& sizes, int64_t intermediate);
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {ModelFamily::Bert,
       [](const PresetSizes& s, int64_t intermediate) {
         return TransformerConfig::bert(s.vocab_size, s.hidden, s.layers, s.heads, intermediate);
       }},
      {ModelFamily::Albert,
       [](const PresetSizes& s, int64_t intermediate) {
         return TransformerConfig::albert(s.vocab_size, s.embedding_size > 0 ? s.embedding_size : s.hidden,
                                          s.hidden, s.layers, s.heads, intermediate);
       }},
      {ModelFamily::Gpt2,
       [](const PresetSizes& s, int64_t intermediate) {
         TransformerConfig c = TransformerConfig::gpt2(s.vocab_size, s.hidden, s.layers, s.heads);
         c.intermediate = intermediate;
         return c;
       }},
      {ModelFamily::Roberta,
       [](const PresetSizes& s, int64_t intermediate) {
         return TransformerConfig::roberta(s.vocab_size, s.hidden, s.layers, s.heads, intermediate);
       }},
  };
  return table;
}

const Preset* find_preset(ModelFamily family) {
  for (const Preset& p : presets())
    if (p.family == family) return &p;
  return nullptr;
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Preset& p : presets()) out.emplace_back(p.family.name());
    return out;
  }();
  return names;
}

bool is_preset(ModelFamily family) { return find_preset(family) != nullptr; }

bool is_preset(std::string_view name) {
  const auto& names = preset_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TransformerConfig preset(ModelFamily family, const PresetSizes& s) {
  const Preset* p = find_preset(family);
  if (!p)
    throw Error(fmt::format("unknown model preset '{}' (presets: {})", family.name(),
                            fmt::join(preset_names(), ", ")));
  TransformerConfig c = p->make(s, s.intermediate > 0 ? s.intermediate : 4 * s.hidden);
  if (s.embedding_size > 0) c.embedding_size = s.embedding_size;
  return c;
}

TransformerConfig preset(std::string_view name, const PresetSizes& s) {
  if (!is_preset(name))
    throw Error(fmt::format("unknown model preset '{}' (presets: {})", name,
                            fmt::join(preset_names(), ", ")));
  return preset(ModelFamily::named(name), s);
}

}  // namespace attnkit::models

namespace attnkit::ops {

void to_json(nlohmann::json& j, const RotaryConfig& c) {
  j = nlohmann::json{{"head_dim", c.head_dim}, {"theta", c.theta},
                     {"scaling", to_string(c.scaling)}};
  if (c.rotary_dim > 0) j["rotary_dim"] = c.rotary_dim;
  if (c.factor) j["factor"] = *c.factor;
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  if (c.original_max_position_embeddings > 0)
    j["original_max_position_embeddings"] = c.original_max_position_embeddings;
  if (c.low_freq_factor != 0) j["low_freq_factor"] = c.low_freq_factor;
  if (c.high_freq_factor != 0) j["high_freq_factor"] = c.high_freq_factor;
  const std::pair<const char*, const std::optional<double>*> optional[] = {
      {"beta_fast", &c.beta_fast}, {"beta_slow", &c.beta_slow}, {"mscale", &c.mscale},
      {"mscale_all_dim", &c.mscale_all_dim}, {"attention_factor", &c.attention_factor}};
  for (const auto& [key, value] : optional)
    if (*value) j[key] = **value;
  if (!c.truncate) j["truncate"] = false;
  if (!c.short_factor.empty()) j["short_factor"] = c.short_factor;
  if (!c.long_factor.empty()) j["long_factor"] = c.long_factor;
}

void from_json(const nlohmann::json& j, RotaryConfig& c) {
  models::detail::StrictReader r(j, "config: rotary");
  r.read("head_dim", c.head_dim);
  r.read("rotary_dim", c.rotary_dim);
  r.read("theta", c.theta);
  std::string scaling = to_string(c.scaling);
  r.read("scaling", scaling);
  try {
    c.scaling = parse_rotary_scaling(scaling);
  } catch (const Error& e) {
    throw Error(fmt::format("config: rotary: scaling: {}", e.what()));
  }
  const std::pair<const char*, std::optional<double>*> optional[] = {
      {"factor", &c.factor}, {"beta_fast", &c.beta_fast}, {"beta_slow", &c.beta_slow},
      {"mscale", &c.mscale}, {"mscale_all_dim", &c.mscale_all_dim},
      {"attention_factor", &c.attention_factor}};
  for (const auto& [key, value] : optional) {
    double number = 0;
    if (!j.contains(key)) {
      r.read(key, number);  // marks the key as known
      continue;
    }
    r.read(key, number);
    *value = number;
  }
  r.read("max_position_embeddings", c.max_position_embeddings);
  r.read("original_max_position_embeddings", c.original_max_position_embeddings);
  r.read("low_freq_factor", c.low_freq_factor);
  r.read("high_freq_factor", c.high_freq_factor);
  r.read("truncate", c.truncate);
  r.read("short_factor", c.short_factor);
  r.read("long_factor", c.long_factor);
  r.reject_unknown();
  check_rotary_config(c);
}

}  // namespace attnkit::ops

namespace attnkit::layers {

void to_json(nlohmann::json& j, const AttentionSpec& spec) {
  j = nlohmann::json{{"kind", spec.to_string()},   {"causal", spec.causal},
           {"key_size", spec.key_size},  {"value_size", spec.value_size},
           {"talking_heads", spec.talking_heads}, {"max_length", spec.max_length},
           {"synthesizer_hidden", spec.synthesizer_hidden},
           {"factor_rank", spec.factor_rank}, {"bias", spec.bias}};
  // The Llama-family fields only when set: other configs serialise as before.
  if (!spec.output_bias) j["output_bias"] = false;
  if (spec.kv_heads > 0) j["kv_heads"] = spec.kv_heads;
  if (spec.scale > 0) j["scale"] = spec.scale;
  if (spec.window > 0) j["window"] = spec.window;
  if (spec.logit_softcap > 0) j["logit_softcap"] = spec.logit_softcap;
  if (spec.qk_norm) j["qk_norm"] = true;
}

void from_json(const nlohmann::json& j, AttentionSpec& spec) {
  models::detail::StrictReader r(j, "config: attention");
  std::string kind = spec.to_string();
  r.read("kind", kind);
  // The text form decides kind, feature map and mixture; the other fields are read as they are.
  const AttentionSpec parsed = AttentionSpec::parse(kind);
  spec.kind = parsed.kind;
  spec.feature_map = parsed.feature_map;
  spec.mixture = parsed.mixture;
  spec.talking_heads = parsed.talking_heads;
  r.read("causal", spec.causal);
  r.read("key_size", spec.key_size);
  r.read("value_size", spec.value_size);
  r.read("talking_heads", spec.talking_heads);
  if (parsed.talking_heads && !spec.talking_heads)
    throw Error("config: attention: kind 'talking-heads' contradicts talking_heads = false");
  r.read("max_length", spec.max_length);
  r.read("synthesizer_hidden", spec.synthesizer_hidden);
  r.read("factor_rank", spec.factor_rank);
  r.read("bias", spec.bias);
  r.read("output_bias", spec.output_bias);
  r.read("kv_heads", spec.kv_heads);
  r.read("scale", spec.scale);
  r.read("window", spec.window);
  r.read("logit_softcap", spec.logit_softcap);
  r.read("qk_norm", spec.qk_norm);
  r.reject_unknown();
}

}  // namespace attnkit::layers
