#include "attnkit/models/encoder_decoder.h"

#include "attnkit/error.h"
#include "attnkit/models/quantize.h"
#include "strict_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace attnkit::models {

void EncoderDecoderConfig::validate() const {
  encoder.validate();
  decoder.validate();
  if (encoder.cross_attention) throw Error("encoder-decoder config: the encoder must not have cross attention");
  if (!decoder.cross_attention) throw Error("encoder-decoder config: the decoder needs cross_attention = true");
  if (!decoder.attention.causal)
    throw Error("encoder-decoder config: the decoder's self attention must be causal");
  const int64_t memory = decoder.memory_hidden > 0 ? decoder.memory_hidden : decoder.hidden;
  if (memory != encoder.hidden)
    throw Error(fmt::format("encoder-decoder config: decoder memory width {} != encoder hidden {}",
                            memory, encoder.hidden));
  if (share_embeddings && (encoder.vocab_size != decoder.vocab_size ||
                           encoder.effective_embedding_size() != decoder.effective_embedding_size()))
    throw Error("encoder-decoder config: share_embeddings needs equal vocabularies and embedding sizes");
  if (tie_output && decoder.effective_embedding_size() != decoder.hidden)
    throw Error("encoder-decoder config: tie_output needs the decoder's embedding_size == hidden");
  if (decoder_start_token_id >= decoder.vocab_size)
    throw Error(fmt::format("encoder-decoder config: decoder_start_token_id {} outside the decoder's "
                            "vocabulary [0, {})", decoder_start_token_id, decoder.vocab_size));
}

EncoderDecoderConfig EncoderDecoderConfig::transformer(int64_t source_vocab, int64_t target_vocab,
                                                       int64_t hidden, int64_t layers,
                                                       int64_t heads, int64_t intermediate,
                                                       const layers::AttentionSpec& self_attention,
                                                       const layers::AttentionSpec& cross_attention) {
  auto stack = [&](int64_t vocab) {
    TransformerConfig c = TransformerConfig::bert(vocab, hidden, layers, heads, intermediate);
    c.family = ModelFamily::Custom;
    c.positions = layers::PositionEncoding::Sinusoidal;
    c.activation = layers::Activation::Relu;
    c.type_vocab_size = 0;
    c.pooler = false;
    c.embedding_layer_norm = false;
    c.layer_norm_eps = 1e-5;
    c.attention = self_attention;
    c.attention.causal = false;
    return c;
  };
  EncoderDecoderConfig config;
  config.encoder = stack(source_vocab);
  config.decoder = stack(target_vocab);
  config.decoder.attention.causal = true;
  config.decoder.cross_attention = true;
  config.decoder.cross_attention_spec = cross_attention;
  config.decoder.cross_attention_spec.causal = false;
  config.share_embeddings = source_vocab == target_vocab;
  return config;
}

void to_json(nlohmann::json& j, const EncoderDecoderConfig& c) {
  j = nlohmann::json{{"encoder", c.encoder},
                     {"decoder", c.decoder},
                     {"share_embeddings", c.share_embeddings},
                     {"tie_output", c.tie_output}};
  // Written only when set, so the configs of other models read as before.
  if (c.final_logits_bias) j["final_logits_bias"] = true;
  if (c.decoder_start_token_id >= 0) j["decoder_start_token_id"] = c.decoder_start_token_id;
}

void from_json(const nlohmann::json& j, EncoderDecoderConfig& c) {
  detail::StrictReader r(j, "encoder-decoder config");
  r.read("encoder", c.encoder);
  r.read("decoder", c.decoder);
  r.read("share_embeddings", c.share_embeddings);
  r.read("tie_output", c.tie_output);
  r.read("final_logits_bias", c.final_logits_bias);
  r.read("decoder_start_token_id", c.decoder_start_token_id);
  r.reject_unknown();
}

EncoderDecoderModelImpl::EncoderDecoderModelImpl(const EncoderDecoderConfig& config)
    : config_(config) {
  config_.validate();
  encoder = register_module("encoder", TransformerModel(config_.encoder));
  decoder = register_module("decoder", TransformerModel(config_.decoder));
  if (config_.share_embeddings)
    decoder->embeddings->token = decoder->embeddings->replace_module("token", encoder->embeddings->token);
  if (!config_.tie_output)
    lm_head = register_parameter(
        "lm_head", torch::randn({config_.decoder.vocab_size, config_.decoder.hidden}) * 0.02);
  if (config_.final_logits_bias)
    final_logits_bias =
        register_buffer("final_logits_bias", torch::zeros({1, config_.decoder.vocab_size}));
}

at::Tensor EncoderDecoderModelImpl::logits(const at::Tensor& hidden) const {
  at::Tensor out = lm_head_product(hidden, lm_head, *decoder, false);
  return final_logits_bias.defined() ? out + final_logits_bias.to(out.dtype()) : out;
}

int64_t EncoderDecoderModelImpl::decoder_start_token() const {
  return config_.decoder_start_token_id >= 0 ? config_.decoder_start_token_id
                                             : config_.decoder.pad_token_id;
}

void EncoderDecoderModelImpl::prune_heads(const HeadIndices& encoder_self,
                                          const HeadIndices& decoder_self,
                                          const HeadIndices& decoder_cross) {
  encoder->prune_heads(encoder_self, AttentionSite::Self);
  decoder->prune_heads(decoder_self, AttentionSite::Self);
  decoder->prune_heads(decoder_cross, AttentionSite::Cross);
  config_.encoder = encoder->config();
  config_.decoder = decoder->config();
}

at::Tensor EncoderDecoderModelImpl::encode(const at::Tensor& source_ids,
                                          const c10::optional<at::Tensor>& source_mask) {
  ModelInputs in;
  in.input_ids = source_ids;
  in.attention_mask = source_mask;
  return encoder->forward(in).last_hidden_state;
}

at::Tensor EncoderDecoderModelImpl::decode(const at::Tensor& target_ids, const at::Tensor& memory,
                                          const c10::optional<at::Tensor>& source_mask,
                                          const c10::optional<at::Tensor>& target_mask,
                                          int64_t position_offset) {
  ModelInputs in;
  in.input_ids = target_ids;
  in.attention_mask = target_mask;
  in.memory = memory;
  if (source_mask) in.memory_padding = source_mask->to(at::kBool);
  in.position_offset = position_offset;
  return logits(decoder->forward(in).last_hidden_state);
}

at::Tensor EncoderDecoderModelImpl::forward(const at::Tensor& source_ids,
                                           const at::Tensor& target_ids,
                                           const c10::optional<at::Tensor>& source_mask,
                                           const c10::optional<at::Tensor>& target_mask) {
  return decode(target_ids, encode(source_ids, source_mask), source_mask, target_mask);
}

EncoderDecoderModelImpl::HeadContextsOutput EncoderDecoderModelImpl::forward_with_head_contexts(
    const at::Tensor& source_ids, const at::Tensor& target_ids,
    const c10::optional<at::Tensor>& source_mask, const c10::optional<at::Tensor>& target_mask) {
  ModelInputs enc;
  enc.input_ids = source_ids;
  enc.attention_mask = source_mask;
  enc.output_head_contexts = true;
  ModelOutput encoded = encoder->forward(enc);
  ModelInputs dec;
  dec.input_ids = target_ids;
  dec.attention_mask = target_mask;
  dec.memory = encoded.last_hidden_state;
  if (source_mask) dec.memory_padding = source_mask->to(at::kBool);
  dec.output_head_contexts = true;
  ModelOutput decoded = decoder->forward(dec);
  HeadContextsOutput out;
  out.logits = logits(decoded.last_hidden_state);
  for (auto* part : {&encoded.head_contexts, &decoded.head_contexts, &decoded.cross_head_contexts})
    out.head_contexts.insert(out.head_contexts.end(), part->begin(), part->end());
  return out;
}

}  // namespace attnkit::models
