// Hugging Face GPT-2 (model_type "gpt2"; GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification):
// the family's record. Its Conv1D weights are stored [in, out] (transposed) and c_attn holds
// q|k|v side by side (fused).
#include "hf_family.h"

namespace attnkit::io::detail {
namespace {

using models::HeadsConfig;
using models::TransformerConfig;
using nlohmann::json;

TransformerConfig gpt2_config_from_json(const json& j) {
  const int64_t hidden = value<int64_t>(j, "n_embd");
  TransformerConfig c = TransformerConfig::gpt2(value<int64_t>(j, "vocab_size"), hidden,
                                                value<int64_t>(j, "n_layer"), value<int64_t>(j, "n_head"));
  c.intermediate = value_or<int64_t>(j, "n_inner", 4 * hidden);
  c.activation = activation_or(j, "activation_function", "gelu_new");
  c.max_positions = value_or<int64_t>(j, "n_positions", 1024);
  c.layer_norm_eps = value_or<double>(j, "layer_norm_epsilon", 1e-5);
  c.dropout = value_or<double>(j, "resid_pdrop", 0.1);
  c.attention_dropout = value_or<double>(j, "attn_pdrop", 0.1);
  c.tie_word_embeddings = value_or<bool>(j, "tie_word_embeddings", true);
  if (!value_or<bool>(j, "scale_attn_weights", true))
    throw Error("config.json: 'scale_attn_weights' = false is not supported");
  reject_true(j, "scale_attn_by_inverse_layer_idx", "per-layer attention scaling");
  reject_true(j, "add_cross_attention", "GPT-2 with cross attention");
  return c;
}

json gpt2_config_to_json(const TransformerConfig& c, const HeadsConfig& h) {
  require_expressible(c.norm_first && c.final_layer_norm && !c.embedding_layer_norm && !c.pooler &&
                          c.type_vocab_size == 0 && c.attention.causal && !c.share_layers,
                      c, "the switches differ from GPT-2's (pre-LN, final LN, causal, no pooler)");
  json j = {{"model_type", "gpt2"},
            {"architectures", {h.sequence_labels > 0 ? "GPT2ForSequenceClassification"
                                                     : "GPT2LMHeadModel"}},
            {"vocab_size", c.vocab_size}, {"n_embd", c.hidden}, {"n_layer", c.layers},
            {"n_head", c.heads}, {"n_inner", c.intermediate}, {"n_positions", c.max_positions},
            {"n_ctx", c.max_positions},
            {"activation_function", layers::activation_name(c.activation)},
            {"layer_norm_epsilon", c.layer_norm_eps}, {"resid_pdrop", c.dropout},
            {"embd_pdrop", c.dropout}, {"attn_pdrop", c.attention_dropout},
            {"scale_attn_weights", true}, {"tie_word_embeddings", h.tie_lm},
            {"initializer_range", 0.02}};
  if (h.sequence_labels > 0) j.update(label_maps(h.sequence_labels));
  return j;
}

std::vector<NameRule> gpt2_rules(const HuggingFaceConfig& c) {
  const HeadsConfig& h = c.heads;
  const auto body = Stack::Decoder;
  std::vector<NameRule> r;
  r.push_back({"wte.weight", "embeddings.token.weight", body});
  r.push_back({"wpe.weight", "embeddings.position.weight", body});
  const std::string layer = "h.{layer}.", block = "blocks.{layer}.";
  add_dense(r, layer + "ln_1", block + "ln_attention", body);
  add_dense(r, layer + "attn.c_attn", block + "attention.{qkv}", body, TensorLayout::FusedQkv);
  add_dense(r, layer + "attn.c_proj", block + "attention.o", body, TensorLayout::Transposed);
  add_dense(r, layer + "ln_2", block + "ln_ffn", body);
  add_dense(r, layer + "mlp.c_fc", block + "ffn.fc_in", body, TensorLayout::Transposed);
  add_dense(r, layer + "mlp.c_proj", block + "ffn.fc_out", body, TensorLayout::Transposed);
  add_dense(r, "ln_f", "final_norm", body);
  if (h.causal_lm && !h.tie_lm) r.push_back({"lm_head.weight", "lm_head", Stack::Heads});
  if (h.sequence_labels > 0) add_dense(r, "score", "classifier", Stack::Heads, TensorLayout::Same, h.sequence_bias);
  return r;
}

std::vector<TiedAlias> gpt2_aliases(const HuggingFaceConfig& c) {
  const HeadsConfig& h = c.heads;
  std::vector<TiedAlias> aliases;
  if (h.causal_lm && h.tie_lm) aliases.push_back({"lm_head.weight", "@wte.weight"});
  return aliases;
}

void gpt2_detect_heads(const CheckpointContents& contents, const json&, HuggingFaceConfig& c) {
  HeadsConfig& h = c.heads;
  h.causal_lm = true;
  if (contents.has("lm_head.weight") && contents.has(contents.base("wte.weight")))
    h.tie_lm = contents.same_values("lm_head.weight", contents.base("wte.weight"));
  if (contents.has("score.weight")) {
    h.sequence_labels = contents.rows("score.weight");
    h.sequence_pooling = models::Pooling::Last;
    h.sequence_bias = contents.has("score.bias");
  }
}

}  // namespace

const HuggingFaceFamily& gpt2_family() {
  static const HuggingFaceFamily family{
      "gpt2",
      {"GPT2"},
      "transformer.",
      {Stack::Decoder, Stack::Heads},
      HeadPruning::InConfig,
      [](const json& j) { return HuggingFaceConfig{gpt2_config_from_json(j)}; },
      [](const HuggingFaceConfig& c) { return gpt2_config_to_json(c.stack, c.heads); },
      gpt2_rules,
      gpt2_aliases,
      R"(^h\.\d+\.attn\.(bias|masked_bias)$)",  // the causal mask buffers
      gpt2_detect_heads,
  };
  return family;
}

}  // namespace attnkit::io::detail
