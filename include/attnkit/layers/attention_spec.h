#pragma once
// AttentionSpec: the attention variant of a layer as a value (kind, feature map, causality,
// sizes, talking-heads), not as a subclass. MultiHeadAttention dispatches on it to ops/.
// No LibTorch here: configs, the CLI and checkpoints read and write specs as text, in the one
// attention-kind grammar (attnkit/attention_kind.h).
#include "attnkit/attention_kind.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::layers {

using attnkit::AttentionKind;

struct AttentionSpec {
  // Never TalkingHeads: parse() turns `talking-heads` into Softmax + talking_heads.
  AttentionKind kind = AttentionKind::Softmax;
  // Linear attention's feature map (elu, relu, favor with M and seed).
  FeatureMapSpec feature_map;
  bool causal = false;
  // Per-head size of q and k, independent of hidden/heads; 0 = hidden / heads.
  int64_t key_size = 0;
  // Per-head size of v (and of each head's context); 0 = hidden / heads.
  int64_t value_size = 0;
  // Talking-heads (Shazeer et al. 2020): learned head mixing before and after the softmax; with
  // any kind that has logits (softmax, synthesizers, mixtures).
  bool talking_heads = false;
  // Synthesizer: longest sequence the random/dense logits cover; hidden width of the dense MLP;
  // rank of the factorized random logits.
  int64_t max_length = 512;
  int64_t synthesizer_hidden = 64;
  int64_t factor_rank = 8;
  // Components of a Mixture (logit producers only: Softmax and the Synthesizer kinds).
  std::vector<AttentionKind> mixture;
  // Biases on the q/k/v projections, and on o when output_bias too (Qwen2: q/k/v only).
  bool bias = true;
  bool output_bias = true;
  // Grouped-query attention: key/value heads (dividing the heads; query head h reads key/value
  // head h / (heads / kv_heads)); 0 = one per query head.
  int64_t kv_heads = 0;
  // Softmax: the logits' scale; 0 = 1/sqrt(key_size) (Gemma's query_pre_attn_scalar^-1/2).
  double scale = 0.0;
  // Causal softmax: a sliding window of `window` keys ending at the query (Mistral, Gemma 2/3
  // local layers; ops::SoftmaxExtras); 0 = none.
  int64_t window = 0;
  // Softmax: logits -> cap · tanh(logits / cap) (Gemma 2); 0 = none.
  double logit_softcap = 0.0;
  // RMS normalisation of each head's q and k over key_size before the rotation (Gemma 3's
  // q_norm / k_norm, with their RMSNorm's eps); false = none.
  bool qk_norm = false;

  // Kinds that produce an explicit [L, S] logit matrix (so masks of any shape apply).
  bool uses_logits() const;

  // Kind, feature map and mixture in the grammar's terms (TalkingHeads for softmax with
  // talking_heads).
  AttentionVariant variant() const;
  // parse_attention_kind (attention_kind.h): sets kind, feature map, mixture, and talking_heads
  // for `talking-heads`; the other fields keep their defaults. Throws attnkit::Error listing the
  // accepted spellings.
  static AttentionSpec parse(std::string_view text);
  // to_string(variant()): kind and feature map only (the sizes live in the config), e.g.
  // "softmax", "linear:elu", "linear:favor:64:7", "synthesizer-random-fixed",
  // "mixture:synthesizer-random+softmax".
  std::string to_string() const;
};

}  // namespace attnkit::layers
