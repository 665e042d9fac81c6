#pragma once
// Encoder-decoder Transformer (Vaswani et al. 2017): an encoder stack and a decoder stack whose
// blocks add cross attention over the encoder output, plus an LM head over the target vocabulary.
// Self and cross attention take any AttentionSpec (softmax, linear, cosFormer, ...), so e.g. a
// cosFormer decoder with cosFormer cross attention (L != S) is one config away.
#include "attnkit/models/model.h"
#include "attnkit/models/transformer_model.h"

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <nlohmann/json_fwd.hpp>

namespace attnkit::models {

struct EncoderDecoderConfig {
  TransformerConfig encoder;
  TransformerConfig decoder;  // cross_attention = true, causal self attention
  bool share_embeddings = false;  // one token embedding for source and target (same vocab)
  bool tie_output = true;         // LM head = decoder token embedding
  // A fixed bias [1, target_vocab] added to the logits (Marian's and BART's final_logits_bias; a
  // buffer, not trained).
  bool final_logits_bias = false;
  // The token the decoder starts from in generation; -1: the decoder's pad_token_id.
  int64_t decoder_start_token_id = -1;

  // Throws attnkit::Error naming the first inconsistency (e.g. decoder without cross attention).
  void validate() const;
  // The base model of "Attention is all you need" scaled by the arguments: post-LN, ReLU,
  // sinusoidal positions, no token types, no pooler; `self_attention` for both stacks (the
  // decoder's made causal), `cross_attention` for the decoder's cross attention.
  static EncoderDecoderConfig transformer(int64_t source_vocab, int64_t target_vocab,
                                          int64_t hidden, int64_t layers, int64_t heads,
                                          int64_t intermediate,
                                          const layers::AttentionSpec& self_attention = {},
                                          const layers::AttentionSpec& cross_attention = {});
};
void to_json(nlohmann::json& j, const EncoderDecoderConfig& config);
void from_json(const nlohmann::json& j, EncoderDecoderConfig& config);

// A models::Model with three attention sites: "encoder.self", "decoder.self", "decoder.cross".
class EncoderDecoderModelImpl : public torch::nn::Module, public Model {
 public:
  explicit EncoderDecoderModelImpl(const EncoderDecoderConfig& config);

  // models::Model
  ModelShape shape() const override { return ModelShape::EncoderDecoder; }
  torch::nn::Module& module() override { return *this; }
  const torch::nn::Module& module() const override { return *this; }
  std::vector<AttentionSiteRef> attention_sites() const override;
  void prune_heads(const std::string& site, const HeadIndices& heads) override;
  nlohmann::json config_description() const override;
  DecodingTraits decoding_traits() const override;
  Decoding decoding(const DecodingRequest& request, const CacheFactory& caches) override;

  // Encoder output [batch, S, hidden]; source_mask [batch, S] (nonzero = real token).
  at::Tensor encode(const at::Tensor& source_ids,
                    const c10::optional<at::Tensor>& source_mask = c10::nullopt);
  // Target logits [batch, L, target_vocab] given the encoder output (teacher forcing).
  at::Tensor decode(const at::Tensor& target_ids, const at::Tensor& memory,
                    const c10::optional<at::Tensor>& source_mask = c10::nullopt,
                    const c10::optional<at::Tensor>& target_mask = c10::nullopt,
                    int64_t position_offset = 0);
  at::Tensor forward(const at::Tensor& source_ids, const at::Tensor& target_ids,
                     const c10::optional<at::Tensor>& source_mask = c10::nullopt,
                     const c10::optional<at::Tensor>& target_mask = c10::nullopt);

  // forward with every attention site's per-head contexts (analysis/heads.h): the logits and,
  // in attention_sites() order (encoder self layers, decoder self layers, decoder cross layers),
  // one [batch, heads, n, value_size] tensor per layer.
  struct HeadContextsOutput {
    at::Tensor logits;
    std::vector<at::Tensor> head_contexts;
  };
  HeadContextsOutput forward_with_head_contexts(
      const at::Tensor& source_ids, const at::Tensor& target_ids,
      const c10::optional<at::Tensor>& source_mask = c10::nullopt,
      const c10::optional<at::Tensor>& target_mask = c10::nullopt);

  // Logits [..., target_vocab] of decoder hidden states [..., hidden]: the LM head (+ the final
  // logits bias when the config has one).
  at::Tensor logits(const at::Tensor& hidden) const;
  // The start token of generation: decoder_start_token_id, else the decoder's pad id.
  int64_t decoder_start_token() const;

  const EncoderDecoderConfig& config() const { return config_; }
  // Physical head pruning of the encoder's self attention, the decoder's self attention and
  // the decoder's cross attention ({layer: [heads]}, unpruned numbering; TransformerModel::
  // prune_heads); config() records them.
  void prune_heads(const HeadIndices& encoder_self, const HeadIndices& decoder_self,
                   const HeadIndices& decoder_cross = {});

  TransformerModel encoder{nullptr}, decoder{nullptr};
  at::Tensor lm_head;  // [target_vocab, hidden] when not tied
  at::Tensor final_logits_bias;  // buffer [1, target_vocab] when config().final_logits_bias

 private:
  EncoderDecoderConfig config_;
};
TORCH_MODULE(EncoderDecoderModel);

}  // namespace attnkit::models
