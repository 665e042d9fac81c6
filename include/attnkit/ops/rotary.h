#pragma once
// Rotary position embeddings (RoPE, Su et al. 2021) as Hugging Face transformers 5.x computes them
// (transformers.modeling_rope_utils and the Llama/Phi-3 rotary modules), and rotary positions for
// the linear attention kinds (RoFormer section 3.4).
//
// What transformers computes, and what these functions reproduce op for op in float32:
//   inv_freq [F]  = 1 / theta^(2i / dim), i = 0 .. F-1, F = ceil(dim / 2), changed per scaling kind
//                   (rotary_frequencies below; dim = int(head_dim · partial_rotary_factor));
//   freqs [B,n,F] = float32(position) · inv_freq;  emb = cat(freqs, freqs)  ([B, n, 2F]);
//   cos, sin      = cos(emb) · attention_scaling, sin(emb) · attention_scaling  (float32);
//   rotate(x)     = x_r · cos + rotate_half(x_r) · sin on the first 2F dims x_r of x (the
//                   half-split pairs (c, c + F) of Llama/HF, not GPT-J's interleaved pairs), the
//                   remaining dims passed through. Tables are cast to x's dtype, as transformers does.
#include "attnkit/ops/linear_attention.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnkit::ops {

// transformers' rope_type: "default", "linear", "dynamic", "llama3", "yarn", "longrope".
enum class RotaryScaling { None, Linear, Dynamic, Llama3, Yarn, Longrope };

std::string to_string(RotaryScaling scaling);  // the rope_type name ("default" for None)
// Throws attnkit::Error naming the supported kinds for any other name.
RotaryScaling parse_rotary_scaling(const std::string& rope_type);

// The parameters of rope_scaling / rope_parameters under transformers' names. Unused fields of a
// kind are ignored; check_rotary_config says which ones a kind needs.
struct RotaryConfig {
  int64_t head_dim = 0;
  // transformers' `dim`: int(head_dim · partial_rotary_factor); 0 = head_dim. An odd dim rotates
  // dim + 1 dims (transformers rounds the frequency count up), which must fit in head_dim.
  int64_t rotary_dim = 0;
  double theta = 10000.0;  // rope_theta
  RotaryScaling scaling = RotaryScaling::None;
  // linear, dynamic, llama3, yarn: required. longrope: optional, then
  // max_position_embeddings / original_max_position_embeddings.
  std::optional<double> factor;
  int64_t max_position_embeddings = 0;           // dynamic (required); longrope without factor
  int64_t original_max_position_embeddings = 0;  // llama3, yarn, longrope (required)
  double low_freq_factor = 0.0, high_freq_factor = 0.0;  // llama3 (required, high > low)
  // yarn: beta_fast (default 32), beta_slow (default 1), mscale / mscale_all_dim (used when both are
  // non-zero), attention_factor (default from factor), truncate (floor/ceil of the correction range).
  // longrope: attention_factor (default sqrt(1 + ln factor / ln original_max_position_embeddings)).
  std::optional<double> beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor;
  bool truncate = true;
  std::vector<double> short_factor, long_factor;  // longrope: num_frequencies() values each

  int64_t dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  int64_t num_frequencies() const { return (dim() + 1) / 2; }
  int64_t rotated_width() const { return 2 * num_frequencies(); }
};

// Throws attnkit::Error (one line, naming the field) when a field the kind needs is missing or out
// of range: head_dim >= 1, 1 <= rotated_width() <= head_dim, theta > 0, factor > 0, ...
void check_rotary_config(const RotaryConfig& config);

// A Hugging Face config.json object -> RotaryConfig, both styles: `rope_scaling` (+ top-level
// `rope_theta`, `partial_rotary_factor`) and transformers 5's `rope_parameters` (with `rope_theta`
// inside; rope_scaling wins when both are given, as in transformers). `rope_type` or the legacy
// `type`; head_dim from `head_dim` or hidden_size / num_attention_heads; a top-level
// `original_max_position_embeddings` (Phi-3) wins over the one inside, which defaults to
// max_position_embeddings. rope_parameters nested by layer type (Gemma 3: keys from
// `layer_types`) need `layer_type` to pick one. `default_theta` when no rope_theta is given.
// Bad or unknown values throw attnkit::Error "config.json: <key>: ...".
RotaryConfig rotary_config_from_huggingface(const nlohmann::json& config,
                                            const std::string& layer_type = "",
                                            double default_theta = 10000.0);

struct RotaryFrequencies {
  at::Tensor inv_freq;             // [num_frequencies] float32
  double attention_scaling = 1.0;  // multiplies cos and sin (yarn, longrope; 1 otherwise)
};

// ROPE_INIT_FUNCTIONS[rope_type](config, seq_len): seq_len absent is the module's initial call;
// dynamic with seq_len recomputes the base from max(seq_len, max_position_embeddings) (in float32,
// as transformers does with its tensor seq_len); longrope takes long_factor when seq_len >
// original_max_position_embeddings, short_factor otherwise.
RotaryFrequencies rotary_frequencies(const RotaryConfig& config,
                                     std::optional<int64_t> seq_len = std::nullopt);

struct RotaryTables {
  at::Tensor cos, sin;  // [batch or 1, n, rotated_width] float32, attention scaling applied
};

// positions [batch, n] (or [n]) integer, >= 0.
RotaryTables rotary_tables(const RotaryFrequencies& frequencies, const at::Tensor& positions);

// transformers' <Family>RotaryEmbedding with its state: for dynamic, each call with
// seq_len = max(positions) + 1 > the cached length recomputes the frequencies for seq_len, and a
// call with seq_len < max_position_embeddings after growth returns to the original ones
// (dynamic_rope_update; the frequencies in between keep the largest length seen). For longrope,
// each call picks long_factor when seq_len > original_max_position_embeddings, else short_factor.
// Other kinds: fixed frequencies. One object per model (or per layer type), called once per
// forward with that forward's positions, as transformers' model calls its rotary module.
class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(RotaryConfig config);
  RotaryTables tables(const at::Tensor& positions);
  const RotaryConfig& config() const { return config_; }
  const RotaryFrequencies& frequencies() const { return current_; }

 private:
  RotaryConfig config_;
  RotaryFrequencies current_, original_;
  at::Tensor long_inv_freq_;  // longrope
  int64_t max_seq_len_cached_ = 0;
};

// x [batch, heads, n, d]: the rotation above with tables from rotary_tables (width <= d, even;
// batch 1 or x's). Differentiable in x (ATen ops). Any floating dtype; float32 and float64 tested.
at::Tensor apply_rotary(const at::Tensor& x, const RotaryTables& tables);
// The same with the tables of a fresh RotaryEmbedding(config) for these positions.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& positions,
                        const RotaryConfig& config);

// ---- Rotary positions for linear attention (RoFormer, Su et al. 2021, section 3.4) ----
// Self attention over n tokens, q, k [batch, heads, n, d], v [batch, heads, n, dv]:
//   out_i = Σ_j (R_i φ(q_i))·(R_j φ(k_j)) v_j / (φ(q_i)·Σ_j φ(k_j) + 1e-6)
// R_i the rotation above at token i's position (tables [batch or 1, n, w], w <= φ's width), j over
// all tokens or (causal) j <= i. The rotation enters the numerator only; the denominator is linear
// attention's, unrotated, so it stays positive. Differentiable (ATen ops; causal: in chunks of 64
// rows, a masked product within a chunk and a running sum across chunks, no n×n matrix).
at::Tensor rotary_linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const FeatureMap& feature_map, const RotaryTables& tables,
                                   bool causal);
at::Tensor rotary_linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const FeatureMap& feature_map, const at::Tensor& positions,
                                   const RotaryConfig& config, bool causal);

// cosFormer (cosformer_attention.h, M = n, token i at 1-based index i + 1) with the rotation on
// ReLU(x) before the cos/sin re-weighting in the numerator:
//   out_i = Σ_j (R_i a_i)·(R_j b_j) cos(π/2 · (i − j)/M) v_j / max(Σ_j a_i·b_j cos(π/2 · (i − j)/M), 1e-6)
// with a = ReLU(q), b = ReLU(k); tables of width <= d.
at::Tensor rotary_cosformer_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const RotaryTables& tables, bool causal);

// The recurrent (one token per call) form of the causal ops above. State: the rotated numerator
// sums Σ_j (R_j φ(k_j)) v_jᵀ [batch, heads, m, dv] and the unrotated denominator sums Σ_j φ(k_j)
// [batch, heads, m] (m = φ's width; cosFormer: 2d). Stepping through a sequence with the tables
// of each token ([batch or 1, 1, w]) gives the parallel causal op's outputs.
struct RotaryLinearState {
  at::Tensor numerator;    // undefined before the first step
  at::Tensor denominator;
  int64_t position = 0;    // tokens consumed (cosFormer's re-weighting index)
};

// q, k, v [batch, heads, 1, ·] -> [batch, heads, 1, dv].
at::Tensor rotary_linear_attention_step(RotaryLinearState& state, const at::Tensor& q,
                                        const at::Tensor& k, const at::Tensor& v,
                                        const FeatureMap& feature_map, const RotaryTables& tables);
// horizon: cosFormer's M, fixed in advance (>= the final length), as cosformer_attention_step.
at::Tensor rotary_cosformer_attention_step(RotaryLinearState& state, const at::Tensor& q,
                                           const at::Tensor& k, const at::Tensor& v,
                                           const RotaryTables& tables, int64_t horizon);

}  // namespace attnkit::ops
// Kernel: src/ops/rotary.cpp (ATen ops). Tests: tests/ops/rotary_test.cpp (RotaryConfig.*), (RotaryTables.*), (RotaryApply.*), (RotaryLinear.*), and tests/python/test_rotary_hf.py against transformers.
