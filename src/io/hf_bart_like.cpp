// Hugging Face Marian (model_type "marian"; MarianMTModel, the Opus-MT checkpoints) and BART
// ("bart"; BartForConditionalGeneration): the families' records. transformers writes Marian's
// modeling code as a copy of BART's, so one set of functions serves both; the differences are
// the positions (Marian: a fixed sinusoid in halves, not stored; BART: a learned table offset by
// 2), BART's LayerNorm after the embeddings, and Marian's optional separate decoder vocabulary.
// The loader and saver are huggingface.cpp's.
#include "hf_family.h"

#include <cmath>

namespace attnkit::io::detail {
namespace {

using models::EncoderDecoderConfig;
using models::TransformerConfig;
using nlohmann::json;

// Configs saved by transformers hold every one of these; one missing is refused by name.
const char* const kSizes[] = {"vocab_size",      "d_model",         "encoder_layers",
                              "decoder_layers",  "encoder_attention_heads",
                              "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
                              "max_position_embeddings", "pad_token_id"};

EncoderDecoderConfig bart_like_config_from_json(const json& j, bool bart) {
  for (const char* key : kSizes) require(j, key);
  reject_true(j, "normalize_before", "pre-LN blocks (mBART)");
  reject_true(j, "add_final_layer_norm", "a final LayerNorm (mBART)");
  reject_true(j, "add_bias_logits", "a bias in the LM head");
  if (bart) reject_true(j, "static_position_embeddings", "sinusoidal BART positions");
  if (!bart) reject_true(j, "normalize_embedding", "a LayerNorm after Marian's embeddings");
  const int64_t hidden = value<int64_t>(j, "d_model");
  const int64_t vocab = value<int64_t>(j, "vocab_size");
  const int64_t pad = value<int64_t>(j, "pad_token_id");
  const bool share = bart || value_or<bool>(j, "share_encoder_decoder_embeddings", true);
  // Unshared, transformers gives the decoder an input table of vocab_size rows, an LM head of
  // decoder_vocab_size rows, and (tied) ties the head to the *encoder's* table: attnkit's model
  // has one decoder vocabulary and ties the head to the decoder's table.
  if (!share && value_or<int64_t>(j, "decoder_vocab_size", vocab) != vocab)
    throw Error(fmt::format("config.json: 'decoder_vocab_size' {} != vocab_size {} with "
                            "share_encoder_decoder_embeddings = false is not supported",
                            value<int64_t>(j, "decoder_vocab_size"), vocab));
  if (!share && value_or<bool>(j, "tie_word_embeddings", true))
    throw Error("config.json: 'tie_word_embeddings' = true with share_encoder_decoder_embeddings = "
                "false (the LM head tied to the encoder's embeddings) is not supported");
  const int64_t target_vocab = vocab;
  auto stack = [&](const char* side, int64_t stack_vocab) {
    const std::string prefix = side;
    TransformerConfig c;
    c.family = models::ModelFamily::Custom;
    c.vocab_size = stack_vocab;
    c.hidden = hidden;
    c.layers = value<int64_t>(j, (prefix + "_layers").c_str());
    c.heads = value<int64_t>(j, (prefix + "_attention_heads").c_str());
    c.intermediate = value<int64_t>(j, (prefix + "_ffn_dim").c_str());
    c.max_positions = value<int64_t>(j, "max_position_embeddings");
    c.type_vocab_size = 0;
    c.positions = bart ? layers::PositionEncoding::Learned : layers::PositionEncoding::SinusoidalHalves;
    c.position_id_offset = bart ? 2 : 0;
    c.activation = activation_or(j, "activation_function", "gelu");
    c.norm_first = false;
    c.layer_norm_eps = 1e-5;  // nn.LayerNorm's default, which both families use
    c.embedding_layer_norm = bart;
    c.final_layer_norm = false;
    c.pooler = false;
    c.dropout = value_or<double>(j, "dropout", 0.1);
    c.attention_dropout = value_or<double>(j, "attention_dropout", 0.0);
    c.pad_token_id = pad;
    c.embedding_scale = value_or<bool>(j, "scale_embedding", false) ? std::sqrt(double(hidden)) : 1.0;
    return c;
  };
  EncoderDecoderConfig config;
  config.encoder = stack("encoder", vocab);
  config.decoder = stack("decoder", target_vocab);
  config.decoder.attention.causal = true;
  config.decoder.cross_attention = true;
  config.share_embeddings = share;
  config.tie_output = value_or<bool>(j, "tie_word_embeddings", true);
  config.final_logits_bias = true;
  config.decoder_start_token_id = value_or<int64_t>(j, "decoder_start_token_id", bart ? 2 : pad);
  for (const auto* c : {&config.encoder, &config.decoder})
    if (c->heads <= 0 || hidden % c->heads != 0)
      throw Error(fmt::format("config.json: d_model {} is not divisible by the attention heads ({})",
                              hidden, c->heads));
  if (config.decoder_start_token_id < 0 || config.decoder_start_token_id >= target_vocab)
    throw Error(fmt::format("config.json: decoder_start_token_id {} is outside the vocabulary [0, {})",
                            config.decoder_start_token_id, target_vocab));
  if (pad < 0 || pad >= std::min(vocab, target_vocab))
    throw Error(fmt::format("config.json: pad_token_id {} is outside the vocabulary [0, {})", pad,
                            std::min(vocab, target_vocab)));
  return config;
}

json bart_like_config_to_json(const EncoderDecoderConfig& config, bool bart) {
  const TransformerConfig& e = config.encoder;
  const TransformerConfig& d = config.decoder;
  const auto positions = bart ? layers::PositionEncoding::Learned : layers::PositionEncoding::SinusoidalHalves;
  bool same = true;
  for (const auto* c : {&e, &d})
    same = same && c->attention.kind == layers::AttentionKind::Softmax && !c->attention.talking_heads &&
           c->attention.key_size == 0 && c->attention.value_size == 0 && !c->norm_first &&
           !c->final_layer_norm && c->type_vocab_size == 0 && !c->pooler && c->condition_size == 0 &&
           c->effective_embedding_size() == c->hidden && c->positions == positions &&
           c->position_id_offset == (bart ? 2 : 0) && c->embedding_layer_norm == bart &&
           c->layer_norm_eps == 1e-5 && c->layer_attention_specs.empty() &&
           c->layer_cross_attention_specs.empty();
  same = same && e.hidden == d.hidden && e.max_positions == d.max_positions &&
         e.activation == d.activation && e.embedding_scale == d.embedding_scale &&
         e.pad_token_id == d.pad_token_id && d.cross_attention_spec.kind == layers::AttentionKind::Softmax &&
         !d.cross_attention_spec.talking_heads && config.final_logits_bias &&
         (bart ? config.share_embeddings : true);
  require_expressible(same, e, bart ? "BART: post-LN softmax stacks of one width with learned positions "
                                      "(offset 2), an embedding LayerNorm and final_logits_bias"
                                    : "Marian: post-LN softmax stacks of one width with sinusoidal "
                                      "positions in halves and final_logits_bias");
  const bool scaled = e.embedding_scale != 1.0;
  require_expressible(!scaled || std::abs(e.embedding_scale - std::sqrt(double(e.hidden))) < 1e-9, e,
                      "scale_embedding is sqrt(d_model) or 1");
  json j = {{"model_type", bart ? "bart" : "marian"},
            {"architectures", {bart ? "BartForConditionalGeneration" : "MarianMTModel"}},
            {"vocab_size", e.vocab_size},
            {"d_model", e.hidden},
            {"encoder_layers", e.layers},
            {"decoder_layers", d.layers},
            {"num_hidden_layers", e.layers},
            {"encoder_attention_heads", e.heads},
            {"decoder_attention_heads", d.heads},
            {"encoder_ffn_dim", e.intermediate},
            {"decoder_ffn_dim", d.intermediate},
            {"max_position_embeddings", e.max_positions},
            {"activation_function", layers::activation_name(e.activation)},
            {"dropout", e.dropout},
            {"attention_dropout", e.attention_dropout},
            {"activation_dropout", 0.0},
            {"scale_embedding", scaled},
            {"pad_token_id", e.pad_token_id},
            {"decoder_start_token_id", config.decoder_start_token_id >= 0 ? config.decoder_start_token_id
                                                                          : d.pad_token_id},
            {"tie_word_embeddings", config.tie_output},
            {"is_encoder_decoder", true},
            {"init_std", 0.02}};
  if (!bart) {
    j["share_encoder_decoder_embeddings"] = config.share_embeddings;
    j["decoder_vocab_size"] = d.vocab_size;
  }
  return j;
}

std::vector<NameRule> bart_like_rules(const EncoderDecoderConfig& c, bool bart) {
  std::vector<NameRule> r;
  if (c.share_embeddings) {
    r.push_back({"shared.weight", "embeddings.token.weight", Stack::Encoder});
  } else {
    r.push_back({"encoder.embed_tokens.weight", "embeddings.token.weight", Stack::Encoder});
    r.push_back({"decoder.embed_tokens.weight", "embeddings.token.weight", Stack::Decoder});
  }
  struct Part {
    const char* hf;
    const char* ours;
    bool decoder_only;
  };
  static constexpr Part kParts[] = {
      {"self_attn.q_proj", "attention.q", false},        {"self_attn.k_proj", "attention.k", false},
      {"self_attn.v_proj", "attention.v", false},        {"self_attn.out_proj", "attention.o", false},
      {"self_attn_layer_norm", "ln_attention", false},   {"encoder_attn.q_proj", "cross_attention.q", true},
      {"encoder_attn.k_proj", "cross_attention.k", true}, {"encoder_attn.v_proj", "cross_attention.v", true},
      {"encoder_attn.out_proj", "cross_attention.o", true}, {"encoder_attn_layer_norm", "ln_cross", true},
      {"fc1", "ffn.fc_in", false},                       {"fc2", "ffn.fc_out", false},
      {"final_layer_norm", "ln_ffn", false}};
  for (const Stack stack : {Stack::Encoder, Stack::Decoder}) {
    const std::string side = stack == Stack::Decoder ? "decoder" : "encoder";
    if (bart) {
      r.push_back({side + ".embed_positions.weight", "embeddings.position.weight", stack});
      add_dense(r, side + ".layernorm_embedding", "embeddings.norm", stack);
    }
    for (const Part& part : kParts)
      if (!part.decoder_only || stack == Stack::Decoder)
        add_dense(r, side + ".layers.{layer}." + part.hf, std::string("blocks.{layer}.") + part.ours, stack);
  }
  if (!c.tie_output) r.push_back({"lm_head.weight", "lm_head", Stack::Heads});
  // transformers itself starts a missing final_logits_bias at zeros.
  if (c.final_logits_bias)
    r.push_back({"final_logits_bias", "final_logits_bias", Stack::Heads, TensorLayout::Same, true});
  return r;
}

std::vector<TiedAlias> bart_like_aliases(const EncoderDecoderConfig& c) {
  // '@' names are relative to the base prefix ("model."), aliases as well as canonical names.
  std::vector<TiedAlias> a;
  if (c.share_embeddings) {
    a.push_back({"@encoder.embed_tokens.weight", "@shared.weight"});
    a.push_back({"@decoder.embed_tokens.weight", "@shared.weight"});
  }
  if (c.tie_output)
    a.push_back({"lm_head.weight", c.share_embeddings ? "@shared.weight" : "@decoder.embed_tokens.weight"});
  return a;
}

template <bool Bart>
const HuggingFaceFamily& bart_like_family() {
  static const HuggingFaceFamily family{
      Bart ? "bart" : "marian",
      {Bart ? "Bart" : "Marian"},
      "model.",
      {Stack::Encoder, Stack::Decoder, Stack::Heads},
      HeadPruning::Zeroed,
      [](const json& j) { return HuggingFaceConfig{{}, {}, bart_like_config_from_json(j, Bart)}; },
      [](const HuggingFaceConfig& c) { return bart_like_config_to_json(c.encoder_decoder, Bart); },
      [](const HuggingFaceConfig& c) { return bart_like_rules(c.encoder_decoder, Bart); },
      [](const HuggingFaceConfig& c) { return bart_like_aliases(c.encoder_decoder); },
      // Marian's sinusoid, which older saves stored (attnkit computes the same table).
      Bart ? "^$" : R"(^(encoder|decoder)\.embed_positions\.weight$)",
      nullptr,
  };
  return family;
}

}  // namespace

const HuggingFaceFamily& marian_family() { return bart_like_family<false>(); }
const HuggingFaceFamily& bart_family() { return bart_like_family<true>(); }

}  // namespace attnkit::io::detail
