#pragma once
// The attention-kind grammar: one text form for every attention variant, shared by the ops
// catalogue (ops/variants.h), layers::AttentionSpec, model configs and the CLI. No LibTorch.
//
//   softmax | talking-heads | cosformer
//   linear:elu | linear:relu | linear:favor | linear:favor:M | linear:favor:M:SEED
//   linear:t2r | linear:t2r:M | linear:hedgehog | linear:hedgehog:M     (trainable maps)
//   synthesizer-dense | synthesizer-random | synthesizer-random-fixed
//   synthesizer-factorized-dense | synthesizer-factorized-random
//   mixture:A+B[+...]          (components: softmax and the synthesizer kinds, at least two)
//
// Aliases, the `attnkit attention --kind` names of earlier versions: linear = linear:elu,
// linear-relu = linear:relu, favor = linear:favor, synthesizer-mixture =
// mixture:synthesizer-random+softmax. to_string() writes the canonical form, so
// parse_attention_kind(to_string(x)) == x; favor is written `linear:favor` when M and SEED are
// both at their defaults (0) and `linear:favor:M:SEED` otherwise; t2r and hedgehog are written
// without M when it is 0 (the default, M = d).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit {

// φ of feature-map attention. Elu, Relu, Favor, T2r and Hedgehog are linear attention's maps
// (written after `linear:`); CosRelu is cosFormer's position-dependent map, implied by the
// `cosformer` kind and not written on its own. The fused kernels (src/ops/fused_feature_attention.h)
// take this enum. T2r and Hedgehog are trained: their weights are parameters of the attention
// layer, one projection per head (ops/linear_attention.h, FeatureMap::learned).
enum class FeatureMapKind {
  Elu,       // elu(x) + 1
  Relu,      // max(x, 0)
  Favor,     // Performer positive orthogonal random features (M features, SEED)
  CosRelu,   // [relu(x)·cos a_t, relu(x)·sin a_t] (cosFormer)
  T2r,       // relu(W x + b), W [M, d] per head (Kasai et al. 2021, T2R)
  Hedgehog,  // [softmax(W x + b), softmax(−W x − b)], 2M features (Zhang et al. 2024)
};
// The maps whose weights are trained (T2r, Hedgehog).
bool is_learned(FeatureMapKind kind);

struct FeatureMapSpec {
  FeatureMapKind kind = FeatureMapKind::Elu;
  int64_t num_features = 0;  // favor: M, 0 = d·ceil(ln d); t2r, hedgehog: M, 0 = d (input size d)
  uint64_t seed = 0;         // favor: seed of the random projection
};
bool operator==(const FeatureMapSpec& a, const FeatureMapSpec& b);
inline bool operator!=(const FeatureMapSpec& a, const FeatureMapSpec& b) { return !(a == b); }

enum class AttentionKind {
  Softmax,                      // dot-product softmax (Vaswani et al. 2017)
  TalkingHeads,                 // softmax with learned head mixing (Shazeer et al. 2020)
  Linear,                       // φ(q)(φ(k)ᵀv) (Katharopoulos et al. 2020), feature map elu/relu/favor
  Cosformer,                    // ReLU features + cos re-weighting (Qin et al. 2022)
  SynthesizerDense,             // per-token MLP -> logits (Tay et al. 2020)
  SynthesizerRandom,            // trained logits independent of the tokens
  SynthesizerRandomFixed,       // fixed (never trained) random logits
  SynthesizerFactorizedDense,   // outer product of two narrow projections
  SynthesizerFactorizedRandom,  // low-rank trained logits
  Mixture,                      // softmax-weighted mix of the logits of `mixture` kinds
};

// What one kind string says.
struct AttentionVariant {
  AttentionKind kind = AttentionKind::Softmax;
  FeatureMapSpec feature_map;          // Linear only (default elsewhere)
  std::vector<AttentionKind> mixture;  // Mixture only (empty elsewhere)
};
bool operator==(const AttentionVariant& a, const AttentionVariant& b);
inline bool operator!=(const AttentionVariant& a, const AttentionVariant& b) { return !(a == b); }

// Strict: the whole text must be one spelling above (numbers are plain decimal digits); anything
// else throws attnkit::Error with one line listing the accepted spellings.
AttentionVariant parse_attention_kind(std::string_view text);
std::string to_string(const AttentionVariant& variant);

// Linear attention's feature map alone: elu | relu | favor | favor:M | favor:M:SEED | t2r | t2r:M |
// hedgehog | hedgehog:M.
FeatureMapSpec parse_feature_map(std::string_view text);
std::string to_string(const FeatureMapSpec& feature_map);  // CosRelu: "cos-relu" (not parseable)

// The kind's own name: "softmax", "linear", "mixture", "synthesizer-random-fixed", ...
const char* attention_kind_name(AttentionKind kind);
// Kinds that produce an explicit [L, S] logit matrix (so masks of any shape apply and they can
// be mixed): softmax, talking-heads and the synthesizer kinds.
bool produces_logits(AttentionKind kind);
// The accepted spellings as one line, for help texts and errors.
std::string accepted_attention_kinds();

}  // namespace attnkit
