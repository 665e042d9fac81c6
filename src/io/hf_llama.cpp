// Hugging Face Llama-family decoders (LlamaForCausalLM and the families built like it): the
// records of llama (Llama 2/3.x, SmolLM, TinyLlama), mistral (a sliding window), qwen2 (bias on
// q/k/v only), gemma (GELU-tanh gated MLP, RMSNorm weight as 1 + w, embeddings × √hidden),
// gemma2 (norms after the sub-layers too, attention and final logit soft-caps,
// query_pre_attn_scalar, sliding and full layers alternating), gemma3_text (Gemma 3's text model:
// q/k norms, a local rotary base for its sliding layers, no soft-caps) and phi3 (q|k|v and
// gate|up fused in one matrix each, split at load; partial rotary; longrope).
// One reader and one writer over a table of what differs (LlamaVariant); the checkpoints share
// one name table ("model.layers.{layer}.self_attn.q_proj", ...). Pre-RMSNorm blocks, a gated MLP,
// grouped-query attention, rotary positions (ops/rotary.h reads rope_scaling / rope_parameters),
// no position table.
#include "hf_family.h"

#include "attnkit/ops/rotary.h"

#include <fmt/format.h>

#include <cmath>

namespace attnkit::io::detail {
namespace {

using models::HeadsConfig;
using models::TransformerConfig;
using nlohmann::json;

struct LlamaVariant {
  const char* model_type;
  const char* architecture;    // "<architecture>ForCausalLM"
  const char* activation_key = "hidden_act";  // the config.json key of the MLP's activation
  const char* default_activation = "silu";
  bool default_tie = false;    // tie_word_embeddings when config.json is silent
  double default_eps = 1e-6;   // rms_norm_eps when config.json is silent
  bool qkv_bias_only = false;  // qwen2: q/k/v biases always, o without
  bool gemma = false;          // 1 + w norms, embeddings × √hidden
  bool window = false;         // reads sliding_window (every layer, or the sliding layer types)
  bool sandwich = false;       // gemma2/3: norms on the sub-layers' outputs too
  bool softcaps = false;       // gemma2: attn_logit_softcapping, final_logit_softcapping
  bool query_scalar = false;   // gemma2/3: scale = query_pre_attn_scalar^-1/2
  bool qk_norm = false;        // gemma3: q_norm, k_norm
  int64_t layer_pattern = 0;   // gemma2/3: layer_types' default, every Nth layer full attention
  bool fused = false;          // phi3: qkv_proj, gate_up_proj
};

LlamaVariant variant(const char* model_type, const char* architecture) {
  LlamaVariant v;
  v.model_type = model_type;
  v.architecture = architecture;
  return v;
}

const LlamaVariant kLlama = variant("llama", "Llama");
const LlamaVariant kMistral = [] {
  LlamaVariant v = variant("mistral", "Mistral");
  v.window = true;
  return v;
}();
const LlamaVariant kQwen2 = [] {
  LlamaVariant v = variant("qwen2", "Qwen2");
  v.qkv_bias_only = true;
  return v;
}();
const LlamaVariant kGemma = [] {
  LlamaVariant v = variant("gemma", "Gemma");
  v.activation_key = "hidden_activation";
  v.default_activation = "gelu_pytorch_tanh";
  v.default_tie = true;
  v.gemma = true;
  return v;
}();
const LlamaVariant kGemma2 = [] {
  LlamaVariant v = kGemma;
  v.model_type = "gemma2";
  v.architecture = "Gemma2";
  v.window = v.sandwich = v.softcaps = v.query_scalar = true;
  v.layer_pattern = 2;
  return v;
}();
const LlamaVariant kGemma3 = [] {
  LlamaVariant v = kGemma2;
  v.model_type = "gemma3_text";
  v.architecture = "Gemma3";
  v.softcaps = false;
  v.qk_norm = true;
  v.layer_pattern = 6;
  return v;
}();
const LlamaVariant kPhi3 = [] {
  LlamaVariant v = variant("phi3", "Phi3");
  v.default_eps = 1e-5;
  v.window = true;
  v.fused = true;
  return v;
}();

const LlamaVariant* const kVariants[] = {&kLlama, &kMistral, &kQwen2, &kGemma, &kGemma2, &kGemma3, &kPhi3};

const LlamaVariant& variant_of(const TransformerConfig& c) {
  for (const LlamaVariant* v : kVariants)
    if (c.family.name() == std::string(v->model_type)) return *v;
  throw Error(fmt::format("cannot write a Hugging Face config for family '{}'", c.family.name()));
}

// Gemma 2/3's layer_types (or their default pattern): whether each layer is a sliding one.
std::vector<bool> sliding_layers(const LlamaVariant& v, const json& j, int64_t layers) {
  std::vector<bool> sliding(static_cast<size_t>(layers));
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& types = j["layer_types"];
    if (!types.is_array() || static_cast<int64_t>(types.size()) != layers)
      throw Error(fmt::format("config.json: 'layer_types' must list {} layer types", layers));
    for (int64_t i = 0; i < layers; ++i) {
      const json& t = types[static_cast<size_t>(i)];
      if (t == "sliding_attention") sliding[static_cast<size_t>(i)] = true;
      else if (t != "full_attention")
        throw Error(fmt::format("config.json: layer_types: {} is not supported (sliding_attention, "
                                "full_attention)", t.dump()));
    }
    return sliding;
  }
  const int64_t pattern = v.qk_norm ? value_or<int64_t>(j, "sliding_window_pattern", v.layer_pattern)
                                    : v.layer_pattern;
  if (pattern <= 0) throw Error(fmt::format("config.json: sliding_window_pattern {} must be positive", pattern));
  for (int64_t i = 0; i < layers; ++i) sliding[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
  return sliding;
}

TransformerConfig llama_config_from_json(const LlamaVariant& v, const json& j) {
  TransformerConfig c;
  c.family = models::ModelFamily::named(v.model_type);
  c.vocab_size = value<int64_t>(j, "vocab_size");
  c.hidden = value<int64_t>(j, "hidden_size");
  c.layers = value<int64_t>(j, "num_hidden_layers");
  c.heads = value<int64_t>(j, "num_attention_heads");
  c.intermediate = value<int64_t>(j, "intermediate_size");
  if (c.hidden <= 0 || c.heads <= 0 || c.layers <= 0 || c.vocab_size <= 0 || c.intermediate <= 0)
    throw Error("config.json: vocab_size, hidden_size, num_hidden_layers, num_attention_heads and "
                "intermediate_size must be positive");
  const int64_t kv_heads = value_or<int64_t>(j, "num_key_value_heads", c.heads);
  if (kv_heads <= 0 || c.heads % kv_heads != 0)
    throw Error(fmt::format("config.json: num_key_value_heads {} must divide num_attention_heads {}",
                            kv_heads, c.heads));
  const int64_t head_dim = value_or<int64_t>(j, "head_dim", c.hidden / c.heads);
  if (head_dim <= 0) throw Error(fmt::format("config.json: head_dim {} must be positive", head_dim));
  c.max_positions = value_or<int64_t>(j, "max_position_embeddings", 2048);
  c.type_vocab_size = 0;
  c.positions = layers::PositionEncoding::None;
  // Gemma's hidden_activation (transformers 5) falls back to hidden_act (4.38's configs).
  c.activation = j.contains(v.activation_key) && !j[v.activation_key].is_null()
                     ? activation_or(j, v.activation_key, v.default_activation)
                     : activation_or(j, "hidden_act", v.default_activation);
  c.norm_first = true;
  c.layer_norm_eps = value_or<double>(j, "rms_norm_eps", v.default_eps);
  c.embedding_layer_norm = false;
  c.final_layer_norm = true;
  c.pooler = false;
  c.tie_word_embeddings = value_or<bool>(j, "tie_word_embeddings", v.default_tie);
  c.dropout = 0.0;
  c.attention_dropout = value_or<double>(j, "attention_dropout", 0.0);
  c.attention.causal = true;
  if (head_dim * c.heads != c.hidden) c.attention.key_size = c.attention.value_size = head_dim;
  if (kv_heads != c.heads) c.attention.kv_heads = kv_heads;
  if (v.qkv_bias_only) {
    c.attention.bias = true;
    c.attention.output_bias = false;
  } else {
    c.attention.bias = value_or<bool>(j, "attention_bias", false);
  }
  c.norm = v.gemma ? layers::NormKind::GemmaRmsNorm : layers::NormKind::RmsNorm;
  c.gated_mlp = true;
  c.mlp_bias = value_or<bool>(j, "mlp_bias", false);
  if (v.gemma) c.embedding_scale = std::sqrt(static_cast<double>(c.hidden));
  const int64_t window = v.window ? value_or<int64_t>(j, "sliding_window", 0) : 0;
  if (window < 0) throw Error(fmt::format("config.json: sliding_window {} is negative", window));
  if (value_or<bool>(j, "use_sliding_window", false))
    throw Error("config.json: 'use_sliding_window' = true (Qwen2's per-layer windows) is not supported");
  reject_true(j, "use_bidirectional_attention", "bidirectional Gemma 3");
  json rotary_json = j;
  rotary_json["head_dim"] = head_dim;
  if (v.layer_pattern > 0) {
    const std::vector<bool> sliding = sliding_layers(v, j, c.layers);
    for (bool s : sliding) c.layer_windows.push_back(s ? window : 0);
    const bool nested = j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
                        j["rope_parameters"].contains("full_attention");
    c.rotary = ops::rotary_config_from_huggingface(rotary_json, nested ? "full_attention" : "");
    if (v.qk_norm) {  // Gemma 3: the sliding layers' own base frequency
      if (nested) {
        c.rotary_local = ops::rotary_config_from_huggingface(rotary_json, "sliding_attention");
      } else {
        c.rotary_local = ops::RotaryConfig{};
        c.rotary_local->head_dim = head_dim;
        c.rotary_local->theta = value_or<double>(j, "rope_local_base_freq", 10000.0);
      }
    }
  } else {
    c.attention.window = window;
    c.rotary = ops::rotary_config_from_huggingface(rotary_json);
  }
  if (v.sandwich) c.sublayer_output_norm = true;
  if (v.query_scalar) {
    const double scalar = value_or<double>(j, "query_pre_attn_scalar", static_cast<double>(head_dim));
    if (!(scalar > 0)) throw Error(fmt::format("config.json: query_pre_attn_scalar {} must be positive", scalar));
    c.attention.scale = 1.0 / std::sqrt(scalar);
  }
  if (v.softcaps) {
    c.attention.logit_softcap = value_or<double>(j, "attn_logit_softcapping", 0.0);
    c.final_logit_softcap = value_or<double>(j, "final_logit_softcapping", 0.0);
  } else {
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
      if (value_or<double>(j, key, 0.0) != 0.0)
        throw Error(fmt::format("config.json: '{}' is not supported for {}", key, v.model_type));
  }
  if (v.qk_norm) c.attention.qk_norm = true;
  if (v.fused) c.dropout = value_or<double>(j, "resid_pdrop", 0.0);
  const int64_t pad = value_or<int64_t>(j, "pad_token_id", 0);
  c.pad_token_id = pad >= 0 && pad < c.vocab_size ? pad : 0;
  return c;
}

// The rotation as config.json keys: rope_theta and rope_scaling (null for the plain rotation;
// linear and dynamic as {"type", "factor"}, which transformers 4.38 requires and 5.x reads).
void write_rotary(const ops::RotaryConfig& r, json& j) {
  j["rope_theta"] = r.theta;
  if (r.scaling == ops::RotaryScaling::None) {
    j["rope_scaling"] = nullptr;
    return;
  }
  json s = json::object();
  const std::string type = ops::to_string(r.scaling);
  if (r.scaling == ops::RotaryScaling::Linear || r.scaling == ops::RotaryScaling::Dynamic) {
    j["rope_scaling"] = {{"type", type}, {"factor", r.factor.value_or(1.0)}};
    return;
  }
  s["rope_type"] = type;
  if (r.factor) s["factor"] = *r.factor;
  if (r.original_max_position_embeddings > 0)
    s["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.scaling == ops::RotaryScaling::Llama3) {
    s["low_freq_factor"] = r.low_freq_factor;
    s["high_freq_factor"] = r.high_freq_factor;
  }
  const std::pair<const char*, const std::optional<double>*> optional[] = {
      {"beta_fast", &r.beta_fast}, {"beta_slow", &r.beta_slow}, {"mscale", &r.mscale},
      {"mscale_all_dim", &r.mscale_all_dim}, {"attention_factor", &r.attention_factor}};
  for (const auto& [key, value] : optional)
    if (*value) s[key] = **value;
  if (r.scaling == ops::RotaryScaling::Yarn && !r.truncate) s["truncate"] = false;
  if (!r.short_factor.empty()) s["short_factor"] = r.short_factor;
  if (!r.long_factor.empty()) s["long_factor"] = r.long_factor;
  j["rope_scaling"] = s;
}

json llama_config_to_json(const TransformerConfig& c, const HeadsConfig& h) {
  const LlamaVariant& v = variant_of(c);
  const auto& a = c.attention;
  const int64_t head_dim = a.key_size > 0 ? a.key_size : c.hidden / c.heads;
  require_expressible(c.norm_first && c.final_layer_norm && !c.embedding_layer_norm && !c.pooler &&
                          c.type_vocab_size == 0 && a.causal && !c.share_layers && c.gated_mlp &&
                          c.positions == layers::PositionEncoding::None && c.rotary &&
                          a.value_size == a.key_size,
                      c, "the switches differ from the Llama family's (pre-RMSNorm, gated MLP, "
                         "rotary positions, causal)");
  require_expressible(c.sublayer_output_norm == v.sandwich && a.qk_norm == v.qk_norm &&
                          (v.softcaps || (a.logit_softcap == 0 && c.final_logit_softcap == 0)) &&
                          (v.query_scalar || a.scale == 0) && (v.qk_norm || !c.rotary_local) &&
                          (v.layer_pattern > 0 || c.layer_windows.empty()),
                      c, "the family's Gemma switches (sub-layer output norms, q/k norms, soft-caps, "
                         "query scalar, layer types) differ");
  require_expressible(c.norm == (v.gemma ? layers::NormKind::GemmaRmsNorm : layers::NormKind::RmsNorm),
                      c, "the norm kind differs from the family's");
  require_expressible(v.qkv_bias_only ? (a.bias && !a.output_bias) : a.output_bias || !a.bias, c,
                      "the attention biases differ from the family's");
  require_expressible(v.window || a.window == 0, c, "a sliding window needs the mistral family");
  // rotary_dim 0 and rotary_dim = head_dim both rotate the whole head (a config read from HF has
  // 0; one written by attnkit's own format, e.g. a `train --init` checkpoint, may name it).
  const bool partial_rotary = c.rotary->dim() != head_dim;
  require_expressible(c.rotary->head_dim == head_dim && (v.fused || !partial_rotary), c,
                      "the rotation must cover the whole head");
  const std::string architecture = std::string(v.architecture) +
                                   (h.sequence_labels > 0 ? "ForSequenceClassification" : "ForCausalLM");
  json j = {{"model_type", v.model_type},
            {"architectures", {architecture}},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden},
            {"intermediate_size", c.intermediate},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", a.kv_heads > 0 ? a.kv_heads : c.heads},
            {"head_dim", head_dim},
            {"max_position_embeddings", c.max_positions},
            {"rms_norm_eps", c.layer_norm_eps},
            {v.activation_key, layers::activation_name(c.activation)},
            {"tie_word_embeddings", h.tie_lm},
            {"attention_dropout", c.attention_dropout},
            {"initializer_range", 0.02},
            {"pad_token_id", c.pad_token_id}};
  if (std::string(v.activation_key) != "hidden_act") j["hidden_act"] = j[v.activation_key];
  if (!v.qkv_bias_only) j["attention_bias"] = a.bias;
  if (v.model_type == std::string("llama")) j["mlp_bias"] = c.mlp_bias;
  else require_expressible(!c.mlp_bias, c, "MLP biases need the llama family");
  if (v.layer_pattern > 0) {
    int64_t window = 0;
    json types = json::array();
    for (int64_t w : c.layer_windows) {
      require_expressible(w == 0 || window == 0 || w == window, c, "one sliding window for every sliding layer");
      if (w > 0) window = w;
      types.push_back(w > 0 ? "sliding_attention" : "full_attention");
    }
    if (!types.empty()) j["layer_types"] = types;
    j["sliding_window"] = window > 0 ? json(window) : json(nullptr);
  } else if (v.window) {
    j["sliding_window"] = a.window > 0 ? json(a.window) : json(nullptr);
  }
  if (v.query_scalar) j["query_pre_attn_scalar"] = a.scale > 0 ? 1.0 / (a.scale * a.scale) : double(head_dim);
  if (v.softcaps) {
    j["attn_logit_softcapping"] = a.logit_softcap > 0 ? json(a.logit_softcap) : json(nullptr);
    j["final_logit_softcapping"] = c.final_logit_softcap > 0 ? json(c.final_logit_softcap) : json(nullptr);
  }
  if (v.qk_norm && c.rotary_local) j["rope_local_base_freq"] = c.rotary_local->theta;
  if (partial_rotary)
    j["partial_rotary_factor"] = static_cast<double>(c.rotary->rotary_dim) / static_cast<double>(head_dim);
  if (v.fused) {
    j["resid_pdrop"] = c.dropout;
    if (c.rotary->original_max_position_embeddings > 0)
      j["original_max_position_embeddings"] = c.rotary->original_max_position_embeddings;
  }
  if (c.rotary->scaling == ops::RotaryScaling::Dynamic || c.rotary->scaling == ops::RotaryScaling::Longrope)
    j["max_position_embeddings"] = c.rotary->max_position_embeddings > 0 ? c.rotary->max_position_embeddings
                                                                        : c.max_positions;
  write_rotary(*c.rotary, j);
  if (h.sequence_labels > 0) j.update(label_maps(h.sequence_labels));
  return j;
}

std::vector<NameRule> llama_rules(const HuggingFaceConfig& config) {
  const TransformerConfig& c = config.stack;
  const HeadsConfig& h = config.heads;
  const auto body = Stack::Decoder;
  std::vector<NameRule> r;
  r.push_back({"embed_tokens.weight", "embeddings.token.weight", body});
  const std::string layer = "layers.{layer}.", block = "blocks.{layer}.";
  const bool qkv_bias = c.attention.bias, o_bias = c.attention.bias && c.attention.output_bias;
  r.push_back({layer + "input_layernorm.weight", block + "ln_attention.weight", body});
  if (c.family.name() == std::string("phi3")) {  // fused: split at load, joined at save
    require_expressible(!qkv_bias && !c.mlp_bias, c, "Phi-3 has no q/k/v or MLP biases");
    r.push_back({layer + "self_attn.qkv_proj.weight", block + "attention.{part}.weight", body,
                 TensorLayout::RowBlocks, false, {"q", "k", "v"}});
    r.push_back({layer + "mlp.gate_up_proj.weight", block + "ffn.{part}.weight", body,
                 TensorLayout::RowBlocks, false, {"gate", "fc_in"}});
  } else {
    add_dense(r, layer + "self_attn.q_proj", block + "attention.q", body, TensorLayout::Same, qkv_bias);
    add_dense(r, layer + "self_attn.k_proj", block + "attention.k", body, TensorLayout::Same, qkv_bias);
    add_dense(r, layer + "self_attn.v_proj", block + "attention.v", body, TensorLayout::Same, qkv_bias);
    add_dense(r, layer + "mlp.gate_proj", block + "ffn.gate", body, TensorLayout::Same, c.mlp_bias);
    add_dense(r, layer + "mlp.up_proj", block + "ffn.fc_in", body, TensorLayout::Same, c.mlp_bias);
  }
  add_dense(r, layer + "self_attn.o_proj", block + "attention.o", body, TensorLayout::Same, o_bias);
  add_dense(r, layer + "mlp.down_proj", block + "ffn.fc_out", body, TensorLayout::Same, c.mlp_bias);
  if (c.attention.qk_norm) {
    r.push_back({layer + "self_attn.q_norm.weight", block + "attention.q_norm", body});
    r.push_back({layer + "self_attn.k_norm.weight", block + "attention.k_norm", body});
  }
  if (c.sublayer_output_norm) {  // Gemma 2/3: post_attention_layernorm is the attention's output norm
    r.push_back({layer + "post_attention_layernorm.weight", block + "ln_attention_out.weight", body});
    r.push_back({layer + "pre_feedforward_layernorm.weight", block + "ln_ffn.weight", body});
    r.push_back({layer + "post_feedforward_layernorm.weight", block + "ln_ffn_out.weight", body});
  } else {
    r.push_back({layer + "post_attention_layernorm.weight", block + "ln_ffn.weight", body});
  }
  r.push_back({"norm.weight", "final_norm.weight", body});
  if (h.causal_lm && !h.tie_lm) r.push_back({"lm_head.weight", "lm_head", Stack::Heads});
  if (h.sequence_labels > 0) add_dense(r, "score", "classifier", Stack::Heads, TensorLayout::Same, false);
  return r;
}

std::vector<TiedAlias> llama_aliases(const HuggingFaceConfig& c) {
  std::vector<TiedAlias> aliases;
  if (c.heads.causal_lm && c.heads.tie_lm) aliases.push_back({"lm_head.weight", "@embed_tokens.weight"});
  return aliases;
}

void llama_detect_heads(const CheckpointContents& contents, const json&, HuggingFaceConfig& c) {
  HeadsConfig& h = c.heads;
  if (contents.has("score.weight")) {
    h.sequence_labels = contents.rows("score.weight");
    h.sequence_pooling = models::Pooling::Last;
    h.sequence_bias = false;
    return;
  }
  // LlamaForCausalLM (a bare LlamaModel reads as one with a tied head, as GPT-2's does): a
  // checkpoint without lm_head.weight ties it (save_pretrained drops the tied copy); with one, it
  // is tied when the config says so and the values agree.
  h.causal_lm = true;
  h.tie_lm = !contents.has("lm_head.weight") ||
             (c.stack.tie_word_embeddings && contents.has(contents.base("embed_tokens.weight")) &&
              contents.same_values("lm_head.weight", contents.base("embed_tokens.weight")));
}

template <const LlamaVariant& V>
const HuggingFaceFamily& llama_like_family() {
  static const HuggingFaceFamily family{
      V.model_type,
      {std::string(V.architecture) + "For"},
      "model.",
      {Stack::Decoder, Stack::Heads},
      HeadPruning::Shrunk,
      [](const json& j) { return HuggingFaceConfig{llama_config_from_json(V, j)}; },
      [](const HuggingFaceConfig& c) { return llama_config_to_json(c.stack, c.heads); },
      llama_rules,
      llama_aliases,
      R"(^layers\.\d+\.self_attn\.rotary_emb\.inv_freq$)",  // older checkpoints' rotary buffers
      llama_detect_heads,
  };
  return family;
}

}  // namespace

const HuggingFaceFamily& llama_family() { return llama_like_family<kLlama>(); }
const HuggingFaceFamily& mistral_family() { return llama_like_family<kMistral>(); }
const HuggingFaceFamily& qwen2_family() { return llama_like_family<kQwen2>(); }
const HuggingFaceFamily& gemma_family() { return llama_like_family<kGemma>(); }
const HuggingFaceFamily& gemma2_family() { return llama_like_family<kGemma2>(); }
const HuggingFaceFamily& gemma3_text_family() { return llama_like_family<kGemma3>(); }
const HuggingFaceFamily& phi3_family() { return llama_like_family<kPhi3>(); }

}  // namespace attnkit::io::detail
