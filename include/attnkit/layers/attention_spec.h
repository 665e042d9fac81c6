#pragma once
// AttentionSpec: the attention variant of a layer as a value (kind, feature map, causality,
// sizes, talking-heads), not as a subclass. MultiHeadAttention dispatches on it to ops/.
// No LibTorch here: configs, the CLI and checkpoints read and write specs as text.
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::layers {

enum class AttentionKind {
  Softmax,                      // dot-product softmax (Vaswani et al.)
  Linear,                       // φ(q)(φ(k)ᵀv), feature map elu / relu / favor
  Cosformer,                    // ReLU features + cos re-weighting (Qin et al. 2022)
  SynthesizerDense,             // per-token MLP -> logits (Tay et al. 2020)
  SynthesizerRandom,            // learned logits independent of the tokens
  SynthesizerFactorizedDense,   // outer product of two narrow projections
  SynthesizerFactorizedRandom,  // low-rank learned logits
  Mixture,                      // softmax-weighted mix of the logits of `mixture` kinds
};

struct AttentionSpec {
  AttentionKind kind = AttentionKind::Softmax;
  // Linear attention's feature map: "elu", "relu", "favor", "favor:M" or "favor:M:SEED".
  std::string feature_map = "elu";
  bool causal = false;
  // Per-head size of q and k, independent of hidden/heads; 0 = hidden / heads.
  int64_t key_size = 0;
  // Per-head size of v (and of each head's context); 0 = hidden / heads.
  int64_t value_size = 0;
  // Talking-heads (Shazeer et al. 2020): learned head mixing before and after the softmax.
  bool talking_heads = false;
  // Synthesizer: longest sequence the random/dense logits cover; hidden width of the dense MLP;
  // rank of the factorized random logits.
  int64_t max_length = 512;
  int64_t synthesizer_hidden = 64;
  int64_t factor_rank = 8;
  // Components of a Mixture (logit producers only: Softmax and the Synthesizer kinds).
  std::vector<AttentionKind> mixture;
  // Biases on the q/k/v/o projections.
  bool bias = true;

  // Kinds that produce an explicit [L, S] logit matrix (so masks of any shape apply).
  bool uses_logits() const;

  // Text form, e.g. "softmax", "linear:elu", "linear:favor:64:7", "cosformer",
  // "synthesizer-dense", "synthesizer-random", "synthesizer-factorized-dense",
  // "synthesizer-factorized-random", "mixture:synthesizer-random+softmax". parse() accepts
  // what to_string() writes and throws attnkit::Error listing the known kinds otherwise.
  static AttentionSpec parse(const std::string& text);
  std::string to_string() const;  // kind and feature map only (the sizes live in the config)
};

const char* attention_kind_name(AttentionKind kind);
AttentionKind parse_attention_kind(const std::string& name);
// Every kind's name, for help texts and errors.
std::vector<std::string> attention_kind_names();

}  // namespace attnkit::layers
