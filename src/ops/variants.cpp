#include "attnkit/ops/variants.h"

#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/recurrent.h"
#include "attnkit/ops/reference.h"
#include "attnkit/ops/softmax_attention.h"
#include "attnkit/ops/synthesizer.h"
#include "attnkit/ops/talking_heads.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>

namespace attnkit::ops {

namespace {

using Inputs = std::vector<at::Tensor>;

at::Tensor f64(const at::Tensor& t) { return t.to(at::kDouble); }

// What a builder gets: the parsed kind, the sizes, and the masks as each kind takes them.
struct Setup {
  AttentionVariant variant;
  VariantShape shape;
  bool causal = false;
  c10::optional<at::Tensor> key_padding;  // [B, S], for the feature-map kinds
  c10::optional<at::Tensor> mask;         // general mask AND key padding, for the logit kinds
  std::function<at::Tensor(at::IntArrayRef, double)> randn;
  at::TensorOptions options;
};

using Builder = void (*)(VariantCase&, const Setup&);

// Trait flags of a table row; a row without flags reads q and k, takes any mask, runs causal
// with L > S, and has no recurrent form.
enum Trait : unsigned {
  kNoQueries = 1u << 0,
  kNoKeys = 1u << 1,
  kNoGeneralMask = 1u << 2,
  kCausalNeedsLeS = 1u << 3,
  kRecurrent = 1u << 4,
};

struct Entry {
  const char* kind;  // canonical spelling
  const char* description;
  unsigned traits;
  const char* fused_kernel;  // autograd node of the fused op, "" = composed
  const char* approximates;  // "" = exact
  Builder build;
};

// ---- builders ------------------------------------------------------------------------------

// The logit kinds: logits, then masked softmax, then · v.
void from_logits(VariantCase& c, const Setup& s, VariantFn op_logits, VariantFn ref_logits) {
  const auto mask = s.mask;
  const bool causal = s.causal;
  c.op = [=](const Inputs& x) { return attention_from_logits(op_logits(x), x[2], mask, causal); };
  c.reference = [=](const Inputs& x) {
    return reference::attention_from_logits(ref_logits(x), x[2], mask, causal);
  };
}

// Token by token through `step`, for a causal case with L = S and no key padding.
template <typename Step>
VariantFn recurrent_form(const Setup& s, Step step) {
  const bool ok = s.causal && s.shape.queries == s.shape.keys && !s.key_padding.has_value();
  const std::string kind = to_string(s.variant);
  return [=](const Inputs& x) {
    if (!ok)
      throw Error(fmt::format("attention kind '{}': the recurrent form runs causal attention with "
                              "L = S and no key padding",
                              kind));
    RecurrentState state;
    std::vector<at::Tensor> outputs;
    for (int64_t t = 0; t < x[0].size(2); ++t)
      outputs.push_back(step(state, x[0].narrow(2, t, 1), x[1].narrow(2, t, 1), x[2].narrow(2, t, 1)));
    return at::cat(outputs, 2);
  };
}

void build_softmax(VariantCase& c, const Setup& s) {
  const auto mask = s.mask;
  const bool causal = s.causal;
  c.op = [=](const Inputs& x) { return softmax_attention(x[0], x[1], x[2], mask, causal); };
  c.reference = [=](const Inputs& x) {
    return reference::softmax_attention(x[0], x[1], x[2], mask, causal);
  };
}

void build_talking_heads(VariantCase& c, const Setup& s) {
  const int64_t H = s.shape.heads;
  c.inputs.push_back(at::eye(H, s.options) + s.randn({H, H}, 0.3));
  c.inputs.push_back(at::eye(H, s.options) + s.randn({H, H}, 0.3));
  const auto mask = s.mask;
  const bool causal = s.causal;
  c.op = [=](const Inputs& x) {
    return talking_heads_attention(x[0], x[1], x[2], x[3], x[4], mask, causal);
  };
  c.reference = [=](const Inputs& x) {
    return reference::talking_heads_attention(x[0], x[1], x[2], x[3], x[4], mask, causal);
  };
}

void build_linear(VariantCase& c, const Setup& s) {
  const auto fm = FeatureMap::from_spec(s.variant.feature_map, s.shape.key_dim);
  if (fm.kind() == FeatureMapKind::Favor) {  // favor approximates exp(q·k/√d): moderate inputs
    c.inputs[0] = c.inputs[0] * 0.5;
    c.inputs[1] = c.inputs[1] * 0.5;
  }
  const auto kp = s.key_padding;
  const bool causal = s.causal;
  c.op = [=](const Inputs& x) { return linear_attention(x[0], x[1], x[2], fm, causal, kp); };
  c.reference = [=](const Inputs& x) {
    return reference::linear_attention(x[0], x[1], x[2], fm, causal, kp);
  };
  c.recurrent = recurrent_form(s, [fm](RecurrentState& state, const at::Tensor& q,
                                       const at::Tensor& k, const at::Tensor& v) {
    return linear_attention_step(state, q, k, v, fm);
  });
}

// The trained maps: their weight [H, M, d] and bias [H, M] are inputs 3 and 4, so the gradient
// checks reach them. M = the kind's M, or d when 0.
void build_learned_linear(VariantCase& c, const Setup& s) {
  const FeatureMapKind kind = s.variant.feature_map.kind;
  const int64_t H = s.shape.heads, d = s.shape.key_dim;
  const int64_t M = s.variant.feature_map.num_features > 0 ? s.variant.feature_map.num_features : d;
  c.inputs.push_back(s.randn({H, M, d}, 1.0 / std::sqrt(static_cast<double>(d))));
  c.inputs.push_back(s.randn({H, M}, 0.3));
  const auto kp = s.key_padding;
  const bool causal = s.causal;
  c.op = [=](const Inputs& x) {
    return linear_attention(x[0], x[1], x[2], FeatureMap::learned(kind, x[3], x[4]), causal, kp);
  };
  c.reference = [=](const Inputs& x) {
    return reference::linear_attention(x[0], x[1], x[2], FeatureMap::learned(kind, x[3], x[4]),
                                       causal, kp);
  };
  c.recurrent = [=](const Inputs& x) {
    const auto step = recurrent_form(s, [&](RecurrentState& state, const at::Tensor& q,
                                            const at::Tensor& k, const at::Tensor& v) {
      return linear_attention_step(state, q, k, v, FeatureMap::learned(kind, x[3], x[4]));
    });
    return step(x);
  };
}

void build_cosformer(VariantCase& c, const Setup& s) {
  const auto kp = s.key_padding;
  const bool causal = s.causal;
  c.op = [=](const Inputs& x) { return cosformer_attention(x[0], x[1], x[2], causal, kp); };
  c.reference = [=](const Inputs& x) {
    return reference::cosformer_attention(x[0], x[1], x[2], causal, kp);
  };
  const int64_t horizon = s.shape.keys;  // the parallel op's M = max(L, S)
  c.recurrent = recurrent_form(s, [horizon](RecurrentState& state, const at::Tensor& q,
                                            const at::Tensor& k, const at::Tensor& v) {
    return cosformer_attention_step(state, q, k, v, horizon);
  });
}

void build_synthesizer_dense(VariantCase& c, const Setup& s) {
  const int64_t H = s.shape.heads, dk = s.shape.key_dim, S = s.shape.keys;
  const int64_t hidden = std::max<int64_t>(dk, 4);
  c.inputs.push_back(s.randn({H, dk, hidden}, 1.0 / std::sqrt(double(dk))));
  c.inputs.push_back(s.randn({H, hidden}, 0.1));
  c.inputs.push_back(s.randn({H, hidden, S}, 1.0 / std::sqrt(double(hidden))));
  c.inputs.push_back(s.randn({H, S}, 0.1));
  from_logits(
      c, s,
      [=](const Inputs& x) { return dense_synthesizer_logits(x[0], x[3], x[4], x[5], x[6], S); },
      [=](const Inputs& x) {
        return reference::dense_synthesizer_logits(x[0], x[3], x[4], x[5], x[6], S);
      });
}

void build_synthesizer_random(VariantCase& c, const Setup& s) {
  const int64_t L = s.shape.queries, S = s.shape.keys;
  c.inputs.push_back(s.randn({s.shape.heads, L, S}, 1.0));
  from_logits(
      c, s, [=](const Inputs& x) { return random_synthesizer_logits(x[3], L, S); },
      [=](const Inputs& x) { return f64(x[3]).unsqueeze(0); });
}

// The same logits as synthesizer-random, but the alignment is a constant of the case, not an
// input: nothing differentiates it.
void build_synthesizer_random_fixed(VariantCase& c, const Setup& s) {
  const int64_t L = s.shape.queries, S = s.shape.keys;
  const at::Tensor r = s.randn({s.shape.heads, L, S}, 1.0);
  from_logits(
      c, s, [=](const Inputs&) { return random_synthesizer_logits(r, L, S); },
      [=](const Inputs&) { return f64(r).unsqueeze(0); });
}

void build_synthesizer_factorized_dense(VariantCase& c, const Setup& s) {
  const int64_t H = s.shape.heads, dk = s.shape.key_dim, S = s.shape.keys;
  const int64_t a = static_cast<int64_t>(std::ceil(std::sqrt(double(S))));
  const int64_t b = (S + a - 1) / a;
  c.inputs.push_back(s.randn({H, dk, a}, 1.0 / std::sqrt(double(dk))));
  c.inputs.push_back(s.randn({H, dk, b}, 1.0 / std::sqrt(double(dk))));
  from_logits(
      c, s, [=](const Inputs& x) { return factorized_dense_synthesizer_logits(x[0], x[3], x[4], S); },
      [=](const Inputs& x) {
        return reference::factorized_dense_synthesizer_logits(x[0], x[3], x[4], S);
      });
}

void build_synthesizer_factorized_random(VariantCase& c, const Setup& s) {
  const int64_t H = s.shape.heads, L = s.shape.queries, S = s.shape.keys;
  const int64_t rank = std::min<int64_t>(8, std::max(L, S));
  c.inputs.push_back(s.randn({H, L, rank}, 0.5));
  c.inputs.push_back(s.randn({H, S, rank}, 0.5));
  from_logits(
      c, s, [=](const Inputs& x) { return factorized_random_synthesizer_logits(x[3], x[4], L, S); },
      [=](const Inputs& x) {
        return reference::factorized_random_synthesizer_logits(x[3], x[4], L, S);
      });
}

void build_mixture_random_softmax(VariantCase& c, const Setup& s) {
  const int64_t L = s.shape.queries, S = s.shape.keys;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.shape.key_dim));
  c.inputs.push_back(s.randn({s.shape.heads, L, S}, 1.0));
  c.inputs.push_back(s.randn({2}, 1.0));
  from_logits(
      c, s,
      [=](const Inputs& x) {
        auto dot = at::matmul(x[0], x[1].transpose(-2, -1)) * scale;
        return mix_logits({random_synthesizer_logits(x[3], L, S), dot}, x[4]);
      },
      [=](const Inputs& x) {
        auto dot = at::matmul(f64(x[0]), f64(x[1]).transpose(-2, -1)) * scale;
        return reference::mix_logits({f64(x[3]).unsqueeze(0), dot}, x[4]);
      });
}

// ---- the table -----------------------------------------------------------------------------

// One row per variant: registering a variant is adding a row (and its builder above).
const std::vector<Entry>& table() {
  constexpr unsigned kFeatureMapKind = kNoGeneralMask | kCausalNeedsLeS | kRecurrent;
  static const std::vector<Entry> entries = {
      {"softmax", "softmax(q kᵀ/√d) v", 0, "FlashAttention", "", build_softmax},
      {"talking-heads", "softmax with learned head mixing before and after the softmax", 0, "", "",
       build_talking_heads},
      {"linear:elu", "linear attention, φ = elu+1", kFeatureMapKind, "FusedFeatureAttention", "",
       build_linear},
      {"linear:relu", "linear attention, φ = relu", kFeatureMapKind, "FusedFeatureAttention", "",
       build_linear},
      {"linear:favor", "linear attention, Performer positive random features", kFeatureMapKind, "",
       "softmax", build_linear},
      {"linear:t2r", "linear attention, φ = relu(W x + b) trained per head (T2R)",
       kFeatureMapKind, "", "", build_learned_linear},
      {"linear:hedgehog", "linear attention, φ = [softmax(W x + b), softmax(−W x − b)] trained per head (Hedgehog)",
       kFeatureMapKind, "", "", build_learned_linear},
      {"cosformer", "ReLU features with cos re-weighting (cosFormer)", kFeatureMapKind,
       "FusedFeatureAttention", "", build_cosformer},
      {"synthesizer-dense", "Synthesizer: per-token MLP logits", kNoKeys, "", "",
       build_synthesizer_dense},
      {"synthesizer-random", "Synthesizer: trained random logits", kNoQueries | kNoKeys, "", "",
       build_synthesizer_random},
      {"synthesizer-random-fixed", "Synthesizer: fixed (never trained) random logits",
       kNoQueries | kNoKeys, "", "", build_synthesizer_random_fixed},
      {"synthesizer-factorized-dense", "Synthesizer: outer product of two narrow MLPs", kNoKeys, "",
       "", build_synthesizer_factorized_dense},
      {"synthesizer-factorized-random", "Synthesizer: low-rank random logits R1·R2ᵀ",
       kNoQueries | kNoKeys, "", "", build_synthesizer_factorized_random},
      {"mixture:synthesizer-random+softmax", "mixture of random-Synthesizer and dot-product logits",
       0, "", "", build_mixture_random_softmax},
  };
  return entries;
}

// Same table row: the same kind, and for linear attention the same feature map (its M and SEED
// are the case's), for a mixture the same components.
bool same_row(const AttentionVariant& a, const AttentionVariant& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == AttentionKind::Linear) return a.feature_map.kind == b.feature_map.kind;
  if (a.kind == AttentionKind::Mixture) return a.mixture == b.mixture;
  return true;
}

size_t row_index(const std::string& kind, const AttentionVariant& variant) {
  const auto& rows = table();
  for (size_t i = 0; i < rows.size(); ++i)
    if (same_row(parse_attention_kind(rows[i].kind), variant)) return i;
  std::string names;
  for (const auto& row : rows) names += (names.empty() ? "" : ", ") + std::string(row.kind);
  throw Error(fmt::format("attention kind '{}' is not in the catalogue of runnable variants ({})",
                          kind, names));
}

}  // namespace

const std::vector<VariantInfo>& attention_variants() {
  static const std::vector<VariantInfo> variants = [] {
    std::vector<VariantInfo> out;
    for (const auto& row : table()) {
      VariantInfo info;
      info.kind = row.kind;
      info.description = row.description;
      info.reads_queries = !(row.traits & kNoQueries);
      info.reads_keys = !(row.traits & kNoKeys);
      info.general_mask = !(row.traits & kNoGeneralMask);
      info.causal_more_queries = !(row.traits & kCausalNeedsLeS);
      info.recurrent_step = (row.traits & kRecurrent) != 0;
      info.fused_kernel = row.fused_kernel;
      info.approximates = row.approximates;
      out.push_back(std::move(info));
    }
    return out;
  }();
  return variants;
}

const VariantInfo& variant_info(const std::string& kind) {
  return attention_variants()[row_index(kind, parse_attention_kind(kind))];
}

at::Tensor VariantCase::run_recurrent() const {
  if (!recurrent)
    throw Error(fmt::format("attention kind '{}' has no recurrent (token-by-token) form", kind));
  return recurrent(inputs);
}

VariantCase make_variant_case(const std::string& kind, const VariantShape& shape, bool causal,
                              uint64_t seed, at::ScalarType dtype,
                              const c10::optional<at::Tensor>& key_padding,
                              const c10::optional<at::Tensor>& mask) {
  const AttentionVariant variant = parse_attention_kind(kind);
  const size_t index = row_index(kind, variant);
  const Entry& row = table()[index];
  const int64_t B = shape.batch, H = shape.heads, L = shape.queries, S = shape.keys;
  const int64_t dk = shape.key_dim, dv = shape.value_dim;
  if (B < 1 || H < 1 || L < 1 || S < 1 || dk < 1 || dv < 1)
    throw Error(fmt::format("batch ({}), heads ({}), L ({}), S ({}), dk ({}) and dv ({}) must all "
                            "be >= 1",
                            B, H, L, S, dk, dv));
  if (mask.has_value() && (row.traits & kNoGeneralMask))
    throw Error(fmt::format("attention kind '{}' takes causality and key padding only, not a "
                            "general mask",
                            row.kind));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Setup s;
  s.variant = variant;
  s.shape = shape;
  s.causal = causal;
  s.key_padding = key_padding;
  s.options = at::TensorOptions().dtype(dtype);
  s.randn = [gen, options = s.options](at::IntArrayRef sizes, double scale) mutable {
    return at::randn(sizes, gen, options) * scale;
  };
  if (key_padding.has_value())
    s.mask = mask.has_value() ? combine_masks(*mask, padding_mask(*key_padding))
                              : padding_mask(*key_padding);
  else
    s.mask = mask;
  VariantCase c;
  c.kind = to_string(variant);
  c.causal = causal;
  c.inputs = {s.randn({B, H, L, dk}, 1.0), s.randn({B, H, S, dk}, 1.0), s.randn({B, H, S, dv}, 1.0)};
  row.build(c, s);
  return c;
}

}  // namespace attnkit::ops
