#include "attnkit/ops/rotary.h"

#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "checks.h"
#include "feature_attention.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

namespace attnkit::ops {

namespace {

// ---- config.json ----

[[noreturn]] void rotary_json_fail(const std::string& key, const std::string& message) {
  throw Error(one_line(fmt::format("config.json: {}: {}", key, message)));
}

std::string rotary_json_value(const nlohmann::json& value) {
  auto text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

const nlohmann::json* rotary_json_find(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

double rotary_json_number(const nlohmann::json& value, const std::string& key) {
  if (!value.is_number())
    rotary_json_fail(key, fmt::format("must be a number, got {}", rotary_json_value(value)));
  const double x = value.get<double>();
  if (!std::isfinite(x)) rotary_json_fail(key, "must be finite");
  return x;
}

int64_t rotary_json_integer(const nlohmann::json& value, const std::string& key) {
  // An integral float (4096.0) is accepted; anything else is not.
  const double x = rotary_json_number(value, key);
  if (x != std::floor(x) || std::fabs(x) > 9.0e15)
    rotary_json_fail(key, fmt::format("must be an integer, got {}", rotary_json_value(value)));
  return static_cast<int64_t>(x);
}

std::optional<double> rotary_json_optional_number(const nlohmann::json& object, const char* key,
                                                  const std::string& where) {
  if (const auto* value = rotary_json_find(object, key))
    return rotary_json_number(*value, where + "." + key);
  return std::nullopt;
}

std::vector<double> rotary_json_numbers(const nlohmann::json& object, const char* key,
                                        const std::string& where) {
  const auto* value = rotary_json_find(object, key);
  const std::string name = where + "." + key;
  if (!value) rotary_json_fail(name, "is required for this rope_type");
  if (!value->is_array())
    rotary_json_fail(name, fmt::format("must be a list of numbers, got {}", rotary_json_value(*value)));
  std::vector<double> out;
  for (size_t i = 0; i < value->size(); ++i)
    out.push_back(rotary_json_number((*value)[i], fmt::format("{}[{}]", name, i)));
  return out;
}

// ---- frequencies, op for op as transformers.modeling_rope_utils (float32 tensors) ----

// torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
at::Tensor rotary_exponents(int64_t dim) {
  return at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) / dim;
}

// 1.0 / (base ** exponents) with a Python-float base (`1.0 / t` is t.reciprocal() * 1.0).
at::Tensor rotary_default_inv_freq(double base, int64_t dim) {
  return at::reciprocal(at::pow(base, rotary_exponents(dim)));
}

double rotary_yarn_mscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double rotary_longrope_factor(const RotaryConfig& c) {
  if (c.factor) return *c.factor;
  return static_cast<double>(c.max_position_embeddings) /
         static_cast<double>(c.original_max_position_embeddings);
}

RotaryFrequencies rotary_llama3(const RotaryConfig& c) {
  const int64_t dim = c.dim();
  auto inv_freq = rotary_default_inv_freq(c.theta, dim);
  const double factor = *c.factor;
  const double old_context_len = static_cast<double>(c.original_max_position_embeddings);
  const double low_freq_wavelen = old_context_len / c.low_freq_factor;
  const double high_freq_wavelen = old_context_len / c.high_freq_factor;
  auto wavelen = at::reciprocal(inv_freq) * (2 * M_PI);  // 2 * math.pi / inv_freq
  auto inv_freq_llama = at::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  auto smooth_factor = (at::reciprocal(wavelen) * old_context_len - c.low_freq_factor) /
                       (c.high_freq_factor - c.low_freq_factor);
  auto smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
  auto is_medium = at::logical_not(wavelen < high_freq_wavelen) *
                   at::logical_not(wavelen > low_freq_wavelen);
  return {at::where(is_medium, smoothed, inv_freq_llama), 1.0};
}

RotaryFrequencies rotary_yarn(const RotaryConfig& c) {
  const int64_t dim = c.dim();
  const double base = c.theta, factor = *c.factor;
  double attention_factor;
  if (c.attention_factor) {
    attention_factor = *c.attention_factor;
  } else if (c.mscale.value_or(0.0) != 0.0 && c.mscale_all_dim.value_or(0.0) != 0.0) {
    attention_factor = rotary_yarn_mscale(factor, *c.mscale) /
                       rotary_yarn_mscale(factor, *c.mscale_all_dim);
  } else {
    attention_factor = rotary_yarn_mscale(factor, 1.0);
  }
  // `get("beta_fast") or 32`: a zero counts as absent.
  const double beta_fast = c.beta_fast.value_or(0.0) != 0.0 ? *c.beta_fast : 32.0;
  const double beta_slow = c.beta_slow.value_or(0.0) != 0.0 ? *c.beta_slow : 1.0;
  const double max_pos = static_cast<double>(c.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(max_pos / (rotations * 2 * M_PI))) /
           (2 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers: prevent singularity

  auto pos_freqs = at::pow(base, rotary_exponents(dim));
  auto extrapolation = at::reciprocal(pos_freqs);
  auto interpolation = at::reciprocal(pos_freqs * factor);
  auto ramp = ((at::arange(dim / 2, at::TensorOptions().dtype(at::kFloat)) - low) / (high - low))
                  .clamp(0, 1);
  auto extrapolation_factor = 1 - ramp;
  auto inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  return {inv_freq, attention_factor};
}

RotaryFrequencies rotary_longrope(const RotaryConfig& c, std::optional<int64_t> seq_len) {
  const int64_t dim = c.dim();
  const double factor = rotary_longrope_factor(c);
  double attention_factor;
  if (c.attention_factor) {
    attention_factor = *c.attention_factor;
  } else if (factor <= 1.0) {
    attention_factor = 1.0;
  } else {
    attention_factor = std::sqrt(
        1 + std::log(factor) / std::log(static_cast<double>(c.original_max_position_embeddings)));
  }
  const bool long_context = seq_len && *seq_len > c.original_max_position_embeddings;
  const auto& factors = long_context ? c.long_factor : c.short_factor;
  auto ext_factors = at::tensor(factors, at::TensorOptions().dtype(at::kDouble)).to(at::kFloat);
  auto inv_freq = at::reciprocal(ext_factors * at::pow(c.theta, rotary_exponents(dim)));
  return {inv_freq, attention_factor};
}

RotaryFrequencies rotary_dynamic(const RotaryConfig& c, std::optional<int64_t> seq_len) {
  const int64_t dim = c.dim();
  const double factor = *c.factor;
  const int64_t max_pos = c.max_position_embeddings;
  const double exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
  if (!seq_len) {
    // seq_len = max_position_embeddings, a Python int: the base in double precision.
    const double L = static_cast<double>(max_pos);
    const double base = c.theta * std::pow(factor * L / L - (factor - 1), exponent);
    return {rotary_default_inv_freq(base, dim), 1.0};
  }
  // At run time transformers passes seq_len as an int64 tensor: the base becomes a float32 tensor.
  auto s = at::maximum(at::scalar_tensor(*seq_len, at::TensorOptions().dtype(at::kLong)),
                       at::scalar_tensor(max_pos, at::TensorOptions().dtype(at::kLong)));
  auto base = ((s * factor) / max_pos - (factor - 1)).pow(exponent) * c.theta;
  return {at::reciprocal(at::pow(base, rotary_exponents(dim))), 1.0};
}

// ---- argument checks ----

at::Tensor rotary_checked_positions(const char* op, const at::Tensor& positions) {
  detail::check_defined(op, "positions", positions);
  if (positions.dim() != 1 && positions.dim() != 2)
    detail::fail(op, fmt::format("positions must be [batch, n] (or [n]) but has shape {}",
                                 detail::shape_str(positions)));
  if (!at::isIntegralType(positions.scalar_type(), /*includeBool=*/false))
    detail::fail(op, fmt::format("positions must be an integer tensor but has dtype {}",
                                 c10::toString(positions.scalar_type())));
  auto p = positions.dim() == 1 ? positions.unsqueeze(0) : positions;
  if (p.numel() > 0 && p.min().item<int64_t>() < 0)
    detail::fail(op, fmt::format("positions must be >= 0, got {}", p.min().item<int64_t>()));
  return p.to(at::kLong);
}

void rotary_check_tables(const char* op, const RotaryTables& tables, int64_t batch, int64_t n,
                         int64_t width_limit, const char* what) {
  detail::check_rank(op, "tables.cos", tables.cos, 3, "[batch, n, width]");
  detail::check_rank(op, "tables.sin", tables.sin, 3, "[batch, n, width]");
  if (!tables.cos.sizes().equals(tables.sin.sizes()))
    detail::fail(op, fmt::format("tables.cos has shape {} but tables.sin has shape {}",
                                 detail::shape_str(tables.cos), detail::shape_str(tables.sin)));
  const int64_t tb = tables.cos.size(0), tn = tables.cos.size(1), w = tables.cos.size(2);
  if ((tb != 1 && tb != batch) || tn != n)
    detail::fail(op, fmt::format("tables have shape {} but the input has batch {} and {} tokens",
                                 detail::shape_str(tables.cos), batch, n));
  if (w % 2 != 0 || w > width_limit)
    detail::fail(op, fmt::format("tables are {} wide but must be even and at most {} ({})", w,
                                 width_limit, what));
}

// x [B, H, n, d] rotated on its first w dims (the half-split convention); tables already checked.
at::Tensor rotary_rotate(const at::Tensor& x, const RotaryTables& tables) {
  const int64_t w = tables.cos.size(2), d = x.size(3), half = w / 2;
  auto cos = tables.cos.to(x.scalar_type()).unsqueeze(1);
  auto sin = tables.sin.to(x.scalar_type()).unsqueeze(1);
  auto x_rot = w == d ? x : x.narrow(3, 0, w);
  auto rotated_half = at::cat({-x_rot.narrow(3, half, half), x_rot.narrow(3, 0, half)}, 3);
  auto out = x_rot * cos + rotated_half * sin;
  if (w == d) return out;
  return at::cat({out, x.narrow(3, w, d - w)}, 3);
}

// Y_i = Σ_{j<=i} (q_i·k_j) v_j over [B, H, n, ·] in chunks of rows: within a chunk the masked
// product tril(Q_c K_cᵀ) V_c, across chunks the running sum Σ k_j v_jᵀ. ATen ops only, so autograd
// differentiates it (to any order); memory O(n·chunk + m·dv) per batch and head, no n×n matrix.
// (The unrotated denominator needs only a cumulative sum.)
at::Tensor rotary_causal_numerator(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  constexpr int64_t chunk = 64;
  const int64_t n = q.size(2);
  auto state = at::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, v.options());
  std::vector<at::Tensor> rows;
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    auto qc = q.narrow(2, start, len), kc = k.narrow(2, start, len), vc = v.narrow(2, start, len);
    auto scores = at::matmul(qc, kc.transpose(-2, -1)).tril();
    rows.push_back(at::matmul(scores, vc) + at::matmul(qc, state));
    state = state + at::matmul(kc.transpose(-2, -1), vc);
  }
  if (rows.empty()) return at::zeros({q.size(0), q.size(1), 0, v.size(3)}, v.options());
  return at::cat(rows, 2);
}

void rotary_check_self_attention(const char* op, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v) {
  detail::check_qkv(op, q, k, v);
  if (q.size(2) != k.size(2))
    detail::fail(op, fmt::format("self attention only: q has shape {} but k has shape {}",
                                 detail::shape_str(q), detail::shape_str(k)));
}

// Numerator from rotated features, denominator from unrotated ones; den rule as the plain op.
at::Tensor rotary_feature_attention(const at::Tensor& rq, const at::Tensor& rk,
                                    const at::Tensor& phi_q, const at::Tensor& phi_k,
                                    const at::Tensor& v, bool causal,
                                    detail::Denominator rule) {
  at::Tensor num, den;
  if (causal) {
    num = rotary_causal_numerator(rq, rk, v);
    den = (phi_q * phi_k.cumsum(2)).sum(-1, /*keepdim=*/true);
  } else {
    num = at::matmul(rq, at::matmul(rk.transpose(-2, -1), v));
    den = at::matmul(phi_q, phi_k.sum(2).unsqueeze(-1));
  }
  den = rule == detail::Denominator::AddEpsilon ? den + detail::kFeatureAttentionEpsilon
                                                : den.clamp_min(detail::kFeatureAttentionEpsilon);
  return num / den;
}

// cosFormer's features of already non-negative a (ReLU applied by the caller): [a·cos, a·sin].
at::Tensor rotary_cosformer_features(const at::Tensor& a, const at::Tensor& angles) {
  auto t = angles.view({1, 1, -1, 1});
  return at::cat({a * t.cos(), a * t.sin()}, -1);
}

void rotary_check_step(const char* op, const RotaryLinearState& state, const at::Tensor& q,
                       const at::Tensor& k, const at::Tensor& v, int64_t m) {
  detail::check_qkv(op, q, k, v);
  if (q.size(2) != 1 || k.size(2) != 1)
    detail::fail(op, fmt::format("a step takes one token: q has shape {} and k has shape {}",
                                 detail::shape_str(q), detail::shape_str(k)));
  if (state.numerator.defined() &&
      !state.numerator.sizes().equals({q.size(0), q.size(1), m, v.size(3)}))
    detail::fail(op, fmt::format("state has shape {} which does not fit q {} and v {}",
                                 detail::shape_str(state.numerator), detail::shape_str(q),
                                 detail::shape_str(v)));
}

at::Tensor rotary_step(RotaryLinearState& state, const at::Tensor& rq, const at::Tensor& rk,
                       const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& v,
                       detail::Denominator rule) {
  auto num_update = at::matmul(rk.transpose(-2, -1), v);  // [B, H, m, dv]
  auto den_update = phi_k.squeeze(2);                      // [B, H, m]
  state.numerator = state.numerator.defined() ? state.numerator + num_update : num_update;
  state.denominator = state.denominator.defined() ? state.denominator + den_update : den_update;
  state.position += 1;
  auto num = at::matmul(rq, state.numerator);                          // [B, H, 1, dv]
  auto den = at::matmul(phi_q, state.denominator.unsqueeze(-1));       // [B, H, 1, 1]
  den = rule == detail::Denominator::AddEpsilon ? den + detail::kFeatureAttentionEpsilon
                                                : den.clamp_min(detail::kFeatureAttentionEpsilon);
  return num / den;
}

RotaryFrequencies rotary_frequencies_unchecked(const RotaryConfig& config,
                                               std::optional<int64_t> seq_len);

}  // namespace

std::string to_string(RotaryScaling scaling) {
  switch (scaling) {
    case RotaryScaling::None: return "default";
    case RotaryScaling::Linear: return "linear";
    case RotaryScaling::Dynamic: return "dynamic";
    case RotaryScaling::Llama3: return "llama3";
    case RotaryScaling::Yarn: return "yarn";
    case RotaryScaling::Longrope: return "longrope";
  }
  return "default";
}

RotaryScaling parse_rotary_scaling(const std::string& rope_type) {
  for (auto kind : {RotaryScaling::None, RotaryScaling::Linear, RotaryScaling::Dynamic,
                    RotaryScaling::Llama3, RotaryScaling::Yarn, RotaryScaling::Longrope})
    if (rope_type == to_string(kind)) return kind;
  throw Error(one_line(fmt::format("unsupported rope_type \"{}\" (supported: default, linear, "
                                   "dynamic, llama3, yarn, longrope)",
                                   rope_type)));
}

void check_rotary_config(const RotaryConfig& c) {
  const char* op = "RotaryConfig";
  const std::string kind = to_string(c.scaling);
  if (c.head_dim < 1) detail::fail(op, fmt::format("head_dim must be >= 1, got {}", c.head_dim));
  if (c.rotary_dim < 0)
    detail::fail(op, fmt::format("rotary_dim must be >= 0, got {}", c.rotary_dim));
  if (c.rotated_width() > c.head_dim)
    detail::fail(op, fmt::format("rotary_dim {} rotates {} dims, more than head_dim {}", c.dim(),
                                 c.rotated_width(), c.head_dim));
  if (!std::isfinite(c.theta) || c.theta <= 0)
    detail::fail(op, fmt::format("rope_theta must be finite and > 0, got {}", c.theta));
  const bool needs_factor = c.scaling == RotaryScaling::Linear ||
                            c.scaling == RotaryScaling::Dynamic ||
                            c.scaling == RotaryScaling::Llama3 || c.scaling == RotaryScaling::Yarn;
  if (needs_factor && !c.factor)
    detail::fail(op, fmt::format("rope_type {} needs factor", kind));
  if (c.factor && (!std::isfinite(*c.factor) || *c.factor <= 0))
    detail::fail(op, fmt::format("factor must be finite and > 0, got {}", *c.factor));
  const bool needs_original = c.scaling == RotaryScaling::Llama3 ||
                              c.scaling == RotaryScaling::Yarn ||
                              c.scaling == RotaryScaling::Longrope;
  if (needs_original && c.original_max_position_embeddings < 1)
    detail::fail(op, fmt::format("rope_type {} needs original_max_position_embeddings >= 1, got {}",
                                 kind, c.original_max_position_embeddings));
  switch (c.scaling) {
    case RotaryScaling::None:
    case RotaryScaling::Linear: break;
    case RotaryScaling::Dynamic:
      if (c.max_position_embeddings < 1)
        detail::fail(op, "rope_type dynamic needs max_position_embeddings >= 1");
      if (c.dim() <= 2)
        detail::fail(op, fmt::format("rope_type dynamic needs a rotary dimension > 2 (its base "
                                     "exponent is dim / (dim - 2)), got {}",
                                     c.dim()));
      break;
    case RotaryScaling::Llama3:
      if (!std::isfinite(c.low_freq_factor) || !std::isfinite(c.high_freq_factor) ||
          c.low_freq_factor <= 0 || c.high_freq_factor <= c.low_freq_factor)
        detail::fail(op, fmt::format("llama3 needs 0 < low_freq_factor < high_freq_factor, got {} "
                                     "and {}",
                                     c.low_freq_factor, c.high_freq_factor));
      break;
    case RotaryScaling::Yarn:
      if (c.dim() % 2 != 0)
        detail::fail(op, fmt::format("yarn needs an even rotary dimension, got {}", c.dim()));
      if (c.theta <= 1)  // its correction range divides by ln(rope_theta)
        detail::fail(op, fmt::format("yarn needs rope_theta > 1, got {}", c.theta));
      if (c.attention_factor && (!std::isfinite(*c.attention_factor) || *c.attention_factor < 0))
        detail::fail(op, fmt::format("attention_factor must be >= 0, got {}", *c.attention_factor));
      if (c.beta_fast && (!std::isfinite(*c.beta_fast) || *c.beta_fast < 0))
        detail::fail(op, fmt::format("beta_fast must be >= 0, got {}", *c.beta_fast));
      if (c.beta_slow && (!std::isfinite(*c.beta_slow) || *c.beta_slow < 0))
        detail::fail(op, fmt::format("beta_slow must be >= 0, got {}", *c.beta_slow));
      break;
    case RotaryScaling::Longrope: {
      const auto count = static_cast<size_t>(c.num_frequencies());
      if (c.short_factor.size() != count || c.long_factor.size() != count)
        detail::fail(op, fmt::format("longrope needs short_factor and long_factor of {} values "
                                     "(rotary dim {} / 2), got {} and {}",
                                     count, c.dim(), c.short_factor.size(), c.long_factor.size()));
      for (const auto* list : {&c.short_factor, &c.long_factor})
        for (double x : *list)
          if (!std::isfinite(x) || x <= 0)
            detail::fail(op, fmt::format("longrope factors must be finite and > 0, got {}", x));
      if (!c.factor && c.max_position_embeddings < 1)
        detail::fail(op, "longrope without factor needs max_position_embeddings (factor = "
                         "max_position_embeddings / original_max_position_embeddings)");
      if (c.attention_factor && (!std::isfinite(*c.attention_factor) || *c.attention_factor < 0))
        detail::fail(op, fmt::format("attention_factor must be >= 0, got {}", *c.attention_factor));
      break;
    }
  }
}

RotaryConfig rotary_config_from_huggingface(const nlohmann::json& config,
                                            const std::string& layer_type, double default_theta) {
  if (!config.is_object()) throw Error("config.json: must be a JSON object");
  RotaryConfig c;
  // head_dim, or hidden_size / num_attention_heads.
  if (const auto* head_dim = rotary_json_find(config, "head_dim")) {
    c.head_dim = rotary_json_integer(*head_dim, "head_dim");
    if (c.head_dim < 1) rotary_json_fail("head_dim", fmt::format("must be >= 1, got {}", c.head_dim));
  } else {
    const auto* hidden = rotary_json_find(config, "hidden_size");
    const auto* heads = rotary_json_find(config, "num_attention_heads");
    if (!hidden || !heads)
      rotary_json_fail("head_dim", "missing, and hidden_size / num_attention_heads not given");
    const int64_t h = rotary_json_integer(*hidden, "hidden_size");
    const int64_t n = rotary_json_integer(*heads, "num_attention_heads");
    if (h < 1 || n < 1)
      rotary_json_fail("num_attention_heads", fmt::format("hidden_size ({}) and num_attention_heads "
                                                          "({}) must be >= 1", h, n));
    c.head_dim = h / n;
    if (c.head_dim < 1)
      rotary_json_fail("head_dim", fmt::format("hidden_size {} / num_attention_heads {} is 0", h, n));
  }
  if (const auto* max_pos = rotary_json_find(config, "max_position_embeddings"))
    c.max_position_embeddings = rotary_json_integer(*max_pos, "max_position_embeddings");

  // rope_scaling wins over rope_parameters (transformers: `rope_scaling or rope_parameters`).
  std::string where = "rope_scaling";
  const nlohmann::json* params = rotary_json_find(config, "rope_scaling");
  if (params && params->is_object() && params->empty()) params = nullptr;
  if (!params) {
    where = "rope_parameters";
    params = rotary_json_find(config, "rope_parameters");
  }
  static const nlohmann::json empty_object = nlohmann::json::object();
  if (!params) params = &empty_object;
  if (!params->is_object())
    rotary_json_fail(where, fmt::format("must be an object, got {}", rotary_json_value(*params)));
  // Nested by layer type (keys that are entries of layer_types).
  bool nested = false;
  if (const auto* layer_types = rotary_json_find(config, "layer_types");
      layer_types && layer_types->is_array()) {
    std::vector<std::string> keys;
    for (const auto& t : *layer_types)
      if (t.is_string() && params->contains(t.get<std::string>())) keys.push_back(t.get<std::string>());
    if (!keys.empty()) {
      nested = true;
      if (layer_type.empty())
        rotary_json_fail(where, fmt::format("is given per layer type ({}); name the layer type",
                                            fmt::join(keys, ", ")));
      const auto* inner = rotary_json_find(*params, layer_type.c_str());
      if (!inner)
        rotary_json_fail(where, fmt::format("has no entry for layer type \"{}\"", layer_type));
      where += "." + layer_type;
      if (!inner->is_object())
        rotary_json_fail(where, fmt::format("must be an object, got {}", rotary_json_value(*inner)));
      params = inner;
    }
  }
  const auto& p = *params;

  std::string rope_type = "default";
  if (const auto* type = rotary_json_find(p, "rope_type"); type || rotary_json_find(p, "type")) {
    const auto& t = type ? *type : p.at("type");
    const std::string key = where + (type ? ".rope_type" : ".type");
    if (!t.is_string()) rotary_json_fail(key, fmt::format("must be a string, got {}", rotary_json_value(t)));
    rope_type = t.get<std::string>();
    try {
      c.scaling = parse_rotary_scaling(rope_type);
    } catch (const Error& e) {
      rotary_json_fail(key, e.what());
    }
  }

  c.theta = default_theta;
  if (const auto* theta = rotary_json_find(p, "rope_theta"))
    c.theta = rotary_json_number(*theta, where + ".rope_theta");
  else if (const auto* top = rotary_json_find(config, "rope_theta"))
    c.theta = rotary_json_number(*top, "rope_theta");
  if (c.theta <= 0) rotary_json_fail("rope_theta", fmt::format("must be > 0, got {}", c.theta));

  double partial = 1.0;
  if (const auto* f = rotary_json_find(p, "partial_rotary_factor"))
    partial = rotary_json_number(*f, where + ".partial_rotary_factor");
  else if (const auto* top = rotary_json_find(config, "partial_rotary_factor"))
    partial = rotary_json_number(*top, "partial_rotary_factor");
  if (!(partial > 0 && partial <= 1))
    rotary_json_fail("partial_rotary_factor", fmt::format("must be in (0, 1], got {}", partial));
  // Python's int(head_dim * partial_rotary_factor): truncation of the double product.
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  if (c.rotary_dim < 1)
    rotary_json_fail("partial_rotary_factor", fmt::format("head_dim {} × {} rotates no dimension",
                                                          c.head_dim, partial));

  c.factor = rotary_json_optional_number(p, "factor", where);
  c.attention_factor = rotary_json_optional_number(p, "attention_factor", where);
  c.beta_fast = rotary_json_optional_number(p, "beta_fast", where);
  c.beta_slow = rotary_json_optional_number(p, "beta_slow", where);
  c.mscale = rotary_json_optional_number(p, "mscale", where);
  c.mscale_all_dim = rotary_json_optional_number(p, "mscale_all_dim", where);
  if (const auto* t = rotary_json_find(p, "truncate")) {
    if (!t->is_boolean())
      rotary_json_fail(where + ".truncate", fmt::format("must be true or false, got {}", rotary_json_value(*t)));
    c.truncate = t->get<bool>();
  }
  const bool needs_factor = c.scaling == RotaryScaling::Linear ||
                            c.scaling == RotaryScaling::Dynamic ||
                            c.scaling == RotaryScaling::Llama3 || c.scaling == RotaryScaling::Yarn;
  if (needs_factor && !c.factor)
    rotary_json_fail(where + ".factor", fmt::format("is required for rope_type {}", rope_type));
  if (c.factor && *c.factor <= 0)
    rotary_json_fail(where + ".factor", fmt::format("must be > 0, got {}", *c.factor));

  if (c.scaling == RotaryScaling::Llama3 || c.scaling == RotaryScaling::Yarn ||
      c.scaling == RotaryScaling::Longrope) {
    // A top-level original_max_position_embeddings (Phi-3) wins over the one inside (flat only).
    const auto* top = nested ? nullptr : rotary_json_find(config, "original_max_position_embeddings");
    if (top) {
      c.original_max_position_embeddings =
          rotary_json_integer(*top, "original_max_position_embeddings");
    } else if (const auto* inner = rotary_json_find(p, "original_max_position_embeddings")) {
      c.original_max_position_embeddings =
          rotary_json_integer(*inner, where + ".original_max_position_embeddings");
    } else if (c.max_position_embeddings > 0) {
      c.original_max_position_embeddings = c.max_position_embeddings;
    } else {
      rotary_json_fail(where + ".original_max_position_embeddings",
                       fmt::format("is required for rope_type {} (no max_position_embeddings either)",
                                   rope_type));
    }
    if (c.original_max_position_embeddings < 1)
      rotary_json_fail("original_max_position_embeddings",
                       fmt::format("must be >= 1, got {}", c.original_max_position_embeddings));
  }
  if (c.scaling == RotaryScaling::Llama3) {
    for (const char* key : {"low_freq_factor", "high_freq_factor"})
      if (!rotary_json_find(p, key))
        rotary_json_fail(where + "." + key, "is required for rope_type llama3");
    c.low_freq_factor = rotary_json_number(p.at("low_freq_factor"), where + ".low_freq_factor");
    c.high_freq_factor = rotary_json_number(p.at("high_freq_factor"), where + ".high_freq_factor");
  }
  if (c.scaling == RotaryScaling::Longrope) {
    c.short_factor = rotary_json_numbers(p, "short_factor", where);
    c.long_factor = rotary_json_numbers(p, "long_factor", where);
  }
  if (c.scaling == RotaryScaling::Dynamic && c.max_position_embeddings < 1)
    rotary_json_fail("max_position_embeddings", "is required for rope_type dynamic");
  try {
    check_rotary_config(c);
  } catch (const Error& e) {
    rotary_json_fail(where, e.what());
  }
  return c;
}

RotaryFrequencies rotary_frequencies(const RotaryConfig& config, std::optional<int64_t> seq_len) {
  check_rotary_config(config);
  auto out = rotary_frequencies_unchecked(config, seq_len);
  // Parameters far out of range (a factor beyond float32) give inf or NaN; say so instead.
  if (!at::isfinite(out.inv_freq).all().item<bool>() ||
      !std::isfinite(static_cast<float>(out.attention_scaling)))
    detail::fail("rotary_frequencies",
                 fmt::format("rope_type {} with these parameters gives non-finite frequencies or "
                             "attention scaling ({}); check factor, rope_theta and mscale",
                             to_string(config.scaling), out.attention_scaling));
  return out;
}

namespace {

RotaryFrequencies rotary_frequencies_unchecked(const RotaryConfig& config,
                                               std::optional<int64_t> seq_len) {
  switch (config.scaling) {
    case RotaryScaling::None: return {rotary_default_inv_freq(config.theta, config.dim()), 1.0};
    case RotaryScaling::Linear: {
      auto inv_freq = rotary_default_inv_freq(config.theta, config.dim());
      inv_freq.div_(*config.factor);
      return {inv_freq, 1.0};
    }
    case RotaryScaling::Dynamic: return rotary_dynamic(config, seq_len);
    case RotaryScaling::Llama3: return rotary_llama3(config);
    case RotaryScaling::Yarn: return rotary_yarn(config);
    case RotaryScaling::Longrope: return rotary_longrope(config, seq_len);
  }
  return {};
}

}  // namespace

RotaryTables rotary_tables(const RotaryFrequencies& frequencies, const at::Tensor& positions) {
  constexpr const char* op = "rotary_tables";
  auto p = rotary_checked_positions(op, positions);
  detail::check_rank(op, "inv_freq", frequencies.inv_freq, 1, "[num_frequencies]");
  // position_ids[..., None].float() * inv_freq.float(); cat(freqs, freqs); cos/sin × scaling.
  auto freqs = p.unsqueeze(-1).to(at::kFloat) * frequencies.inv_freq.to(at::kFloat);
  auto emb = at::cat({freqs, freqs}, -1);
  return {emb.cos() * frequencies.attention_scaling, emb.sin() * frequencies.attention_scaling};
}

RotaryEmbedding::RotaryEmbedding(RotaryConfig config) : config_(std::move(config)) {
  original_ = rotary_frequencies(config_);
  current_ = {original_.inv_freq.clone(), original_.attention_scaling};
  max_seq_len_cached_ = config_.max_position_embeddings;
}

RotaryTables RotaryEmbedding::tables(const at::Tensor& positions) {
  auto p = rotary_checked_positions("RotaryEmbedding::tables", positions);
  if (p.numel() > 0) {
    const int64_t seq_len = p.max().item<int64_t>() + 1;
    const int64_t original_max_seq_len = config_.max_position_embeddings;
    if (config_.scaling == RotaryScaling::Dynamic) {
      if (seq_len > max_seq_len_cached_) {  // growth
        current_ = rotary_frequencies(config_, seq_len);
        max_seq_len_cached_ = seq_len;
      }
      if (seq_len < original_max_seq_len && max_seq_len_cached_ > original_max_seq_len) {  // reset
        current_.inv_freq = original_.inv_freq.clone();
        max_seq_len_cached_ = original_max_seq_len;
      }
    } else if (config_.scaling == RotaryScaling::Longrope) {
      if (!long_inv_freq_.defined())
        long_inv_freq_ =
            rotary_frequencies(config_, config_.original_max_position_embeddings + 1).inv_freq;
      current_.inv_freq = seq_len > config_.original_max_position_embeddings
                              ? long_inv_freq_.clone()
                              : original_.inv_freq.clone();
    }
  }
  return rotary_tables(current_, p);
}

at::Tensor apply_rotary(const at::Tensor& x, const RotaryTables& tables) {
  constexpr const char* op = "apply_rotary";
  detail::check_rank(op, "x", x, 4, "[batch, heads, n, d]");
  detail::check_floating(op, "x", x);
  rotary_check_tables(op, tables, x.size(0), x.size(2), x.size(3), "the head dimension d");
  return rotary_rotate(x, tables);
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& positions,
                        const RotaryConfig& config) {
  detail::check_rank("apply_rotary", "x", x, 4, "[batch, heads, n, d]");
  if (x.size(3) != config.head_dim)
    detail::fail("apply_rotary", fmt::format("x has shape {} but the rotary config's head_dim is {}",
                                             detail::shape_str(x), config.head_dim));
  RotaryEmbedding embedding(config);
  return apply_rotary(x, embedding.tables(positions));
}

at::Tensor rotary_linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const FeatureMap& feature_map, const RotaryTables& tables,
                                   bool causal) {
  constexpr const char* op = "rotary_linear_attention";
  rotary_check_self_attention(op, q, k, v);
  const int64_t m = feature_map.output_dim(q.size(3));
  rotary_check_tables(op, tables, q.size(0), q.size(2), m, "the feature map's width");
  auto phi_q = feature_map.apply(q), phi_k = feature_map.apply(k);
  return rotary_feature_attention(rotary_rotate(phi_q, tables), rotary_rotate(phi_k, tables), phi_q,
                                  phi_k, v, causal, detail::Denominator::AddEpsilon);
}

at::Tensor rotary_linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const FeatureMap& feature_map, const at::Tensor& positions,
                                   const RotaryConfig& config, bool causal) {
  RotaryEmbedding embedding(config);
  return rotary_linear_attention(q, k, v, feature_map, embedding.tables(positions), causal);
}

at::Tensor rotary_cosformer_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const RotaryTables& tables, bool causal) {
  constexpr const char* op = "rotary_cosformer_attention";
  rotary_check_self_attention(op, q, k, v);
  rotary_check_tables(op, tables, q.size(0), q.size(2), q.size(3), "the head dimension d");
  const int64_t n = q.size(2);
  const auto angles = cosformer_angles(n, 0, std::max<int64_t>(n, 1), q.scalar_type());
  auto a = at::relu(q), b = at::relu(k);
  return rotary_feature_attention(
      rotary_cosformer_features(rotary_rotate(a, tables), angles),
      rotary_cosformer_features(rotary_rotate(b, tables), angles),
      rotary_cosformer_features(a, angles), rotary_cosformer_features(b, angles), v, causal,
      detail::Denominator::ClampEpsilon);
}

at::Tensor rotary_linear_attention_step(RotaryLinearState& state, const at::Tensor& q,
                                        const at::Tensor& k, const at::Tensor& v,
                                        const FeatureMap& feature_map, const RotaryTables& tables) {
  constexpr const char* op = "rotary_linear_attention_step";
  detail::check_rank(op, "q", q, 4, "[batch, heads, 1, d]");
  const int64_t m = feature_map.output_dim(q.size(3));
  rotary_check_step(op, state, q, k, v, m);
  rotary_check_tables(op, tables, q.size(0), 1, m, "the feature map's width");
  auto phi_q = feature_map.apply(q), phi_k = feature_map.apply(k);
  return rotary_step(state, rotary_rotate(phi_q, tables), rotary_rotate(phi_k, tables), phi_q,
                     phi_k, v, detail::Denominator::AddEpsilon);
}

at::Tensor rotary_cosformer_attention_step(RotaryLinearState& state, const at::Tensor& q,
                                           const at::Tensor& k, const at::Tensor& v,
                                           const RotaryTables& tables, int64_t horizon) {
  constexpr const char* op = "rotary_cosformer_attention_step";
  detail::check_rank(op, "q", q, 4, "[batch, heads, 1, d]");
  rotary_check_step(op, state, q, k, v, 2 * q.size(3));
  rotary_check_tables(op, tables, q.size(0), 1, q.size(3), "the head dimension d");
  if (horizon < 1 || state.position + 1 > horizon)
    detail::fail(op, fmt::format("token {} is beyond the horizon M = {}; choose M >= the final "
                                 "length",
                                 state.position + 1, horizon));
  const auto angle = cosformer_angles(1, state.position, horizon, q.scalar_type());
  auto a = at::relu(q), b = at::relu(k);
  return rotary_step(state, rotary_cosformer_features(rotary_rotate(a, tables), angle),
                     rotary_cosformer_features(rotary_rotate(b, tables), angle),
                     rotary_cosformer_features(a, angle), rotary_cosformer_features(b, angle), v,
                     detail::Denominator::ClampEpsilon);
}

}  // namespace attnkit::ops
