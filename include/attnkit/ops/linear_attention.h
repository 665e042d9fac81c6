#pragma once
// Linear attention (Katharopoulos et al. 2020): V' = φ(Q)(φ(K)ᵀV) / (φ(Q)·Σ_j φ(K_j) + 1e-6).
// Layout: q [batch, heads, L, dk], k [batch, heads, S, dk], v [batch, heads, S, dv].
// causal: prefix sums over keys (the RNN form); query i sees keys j <= i + (S - L), so L <= S.
// key_padding_mask [batch, S] bool (true = real key): padded keys contribute nothing.
// prefix_linear_attention: the prefix-LM / UniLM mask in O(n) (below). Other masks cannot be
// expressed in the linear form; the layers reject them with an error.
#include "attnkit/attention_kind.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <string>
#include <utility>

namespace attnkit::ops {

// φ: [..., d] -> [..., m]. elu: elu(x)+1 (m = d); relu: max(x, 0) (m = d);
// favor: Performer's positive orthogonal random features,
//   φ(x) = exp(W x̃ − |x̃|²/2) / sqrt(m), x̃ = x · d^(-1/4), W [m, d] orthogonal rows with
//   chi-distributed norms, so that φ(q)·φ(k) ≈ exp(q·k / sqrt(d)). Seeded; redraw() draws anew.
// The trained maps, one projection per head h (x [..., H, L, d], head = dimension -3; weight
// [H, M, d], bias [H, M], held by reference: the attention layer's parameters):
//   t2r:      φ(x) = relu(W_h x + b_h), M features (Kasai et al. 2021, "Finetuning Pretrained
//             Transformers into RNNs");
//   hedgehog: φ(x) = [softmax(W_h x + b_h), softmax(−W_h x − b_h)], 2M features, each softmax over
//             the M features (Zhang et al. 2024, "The Hedgehog & the Porcupine").
class FeatureMap {
 public:
  static FeatureMap elu();
  static FeatureMap relu();
  // num_features = 0 picks m = d·ceil(ln d) (at least d), the Θ(d log d) of the Performer paper.
  static FeatureMap favor(int64_t dim, int64_t num_features = 0, uint64_t seed = 0);
  // t2r or hedgehog with these weights (gradients flow to them); one-line error for other kinds
  // or shapes that are not [H, M, d] and [H, M].
  static FeatureMap learned(FeatureMapKind kind, at::Tensor weight, at::Tensor bias);
  // A trained map's initial weights for H heads of input size d (float32): M = spec.num_features
  // or d when 0; bias 0; t2r: W ~ N(0, 1/d); hedgehog: W = I when M = d (softmax(x) at the
  // start), else N(0, 1/d). Draws from the default generator.
  static std::pair<at::Tensor, at::Tensor> initial_weights(const FeatureMapSpec& spec,
                                                           int64_t heads, int64_t dim);
  // The map a FeatureMapSpec (attention_kind.h) names; dim is the input size d (for favor).
  // CosRelu is refused: cosFormer's features depend on positions (cosformer_attention.h); so are
  // the trained maps (their weights belong to a layer: learned()).
  static FeatureMap from_spec(const FeatureMapSpec& spec, int64_t dim);
  // "elu", "relu", "favor", "favor:M" or "favor:M:SEED" (parse_feature_map, attention_kind.h).
  static FeatureMap parse(const std::string& spec, int64_t dim);

  FeatureMapKind kind() const { return kind_; }
  // The spec with favor's M resolved: from_spec(spec(), d) draws the same map.
  FeatureMapSpec spec() const;
  std::string name() const;  // to_string(spec()), e.g. "elu", "favor:24:0"
  int64_t output_dim(int64_t input_dim) const;
  // The favor projection W [m, d] (float64), a trained map's weight [H, M, d]; undefined for
  // elu/relu.
  const at::Tensor& projection() const { return projection_; }
  // A trained map's bias [H, M]; undefined for the others.
  const at::Tensor& bias() const { return bias_; }
  uint64_t seed() const { return seed_; }
  // Draws a new favor projection with the given seed (no-op for elu/relu).
  void redraw(uint64_t seed);

  at::Tensor apply(const at::Tensor& x) const;

 private:
  FeatureMap(FeatureMapKind kind, at::Tensor projection, uint64_t seed, at::Tensor bias = {})
      : kind_(kind), projection_(std::move(projection)), bias_(std::move(bias)), seed_(seed) {}
  FeatureMapKind kind_;
  at::Tensor projection_;
  at::Tensor bias_;
  uint64_t seed_ = 0;
};

// The favor projection W [num_features, dim] (float64) drawn from `seed`.
at::Tensor favor_projection(int64_t dim, int64_t num_features, uint64_t seed);

at::Tensor linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const FeatureMap& feature_map, bool causal = false,
                            const c10::optional<at::Tensor>& key_padding_mask = c10::nullopt);

// Same, with the feature map given by name (FeatureMap::parse with dim = dk).
at::Tensor linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::string& feature_map = "elu", bool causal = false,
                            const c10::optional<at::Tensor>& key_padding_mask = c10::nullopt);

// Prefix-LM linear attention, self attention over n tokens (q, k, v share n): prefix_lengths
// [batch] (integer, each in [0, n]); query i < p_b sees keys j < p_b (bidirectional over the
// prefix), query i >= p_b sees keys j < p_b and p_b..i — the mask ops/masks.h prefix_lm_mask
// writes out, here in O(n·d·e) from the prefix summary Σ_{j<p} φ(k_j) v_jᵀ, Σ_{j<p} φ(k_j) and a
// causal running sum. p_b = 0 is causal attention, p_b = n non-causal. key_padding_mask
// [batch, n] (true = real key) removes padded keys, so UniLM ([CLS] src [SEP] tgt [SEP] + padding;
// ops/masks.h unilm_mask) is prefix_lengths = unilm_prefix_lengths(token types) with the padding
// mask. Elu/relu in float32/float64 run the fused kernels (forward and backward); favor and
// other dtypes go through the explicit n×n mask.
at::Tensor prefix_linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const FeatureMap& feature_map, const at::Tensor& prefix_lengths,
                                   const c10::optional<at::Tensor>& key_padding_mask = c10::nullopt);

}  // namespace attnkit::ops
// Kernel: src/ops/cpu/fused_feature_attention_kernel.cpp for elu/relu (through src/ops/fused_feature_attention.cpp); favor: src/ops/feature_attention.cpp with src/ops/cpu/causal_product_kernel.cpp. Tests: tests/ops/fused_kernels_test.cpp (FusedKernels.*), tests/ops/prefix_feature_attention_test.cpp (PrefixFeatureAttention.*), tests/ops/attention_ops_test.cpp (FeatureMaps.*), tests/ops/variant_oracle_test.cpp (VariantOracle.*).
