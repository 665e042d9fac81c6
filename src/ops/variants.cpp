#include "attnkit/ops/variants.h"

#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/reference.h"
#include "attnkit/ops/softmax_attention.h"
#include "attnkit/ops/synthesizer.h"
#include "attnkit/ops/talking_heads.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>

namespace attnkit::ops {

const std::vector<VariantInfo>& attention_variants() {
  static const std::vector<VariantInfo> variants = {
      {"softmax", "softmax(q kᵀ/√d) v", true},
      {"linear", "linear attention, φ = elu+1", true},
      {"linear-relu", "linear attention, φ = relu", true},
      {"favor", "linear attention, Performer positive random features", true},
      {"cosformer", "ReLU features with cos re-weighting (cosFormer)", true},
      {"talking-heads", "softmax with learned head mixing before and after the softmax", true},
      {"synthesizer-dense", "Synthesizer: per-token MLP logits", true},
      {"synthesizer-random", "Synthesizer: learned random logits", true},
      {"synthesizer-factorized-dense", "Synthesizer: outer product of two narrow MLPs", true},
      {"synthesizer-factorized-random", "Synthesizer: low-rank random logits R1·R2ᵀ", true},
      {"synthesizer-mixture", "mixture of random-Synthesizer and dot-product logits", true},
  };
  return variants;
}

namespace {

using Inputs = std::vector<at::Tensor>;

at::Tensor f64(const at::Tensor& t) { return t.to(at::kDouble); }

// Logit producers written once, for the op (input dtype) and the oracle (float64 reference).
struct LogitPair {
  VariantFn op;
  VariantFn reference;
};

}  // namespace

VariantCase make_variant_case(const std::string& kind, const VariantShape& shape, bool causal,
                              uint64_t seed, at::ScalarType dtype,
                              const c10::optional<at::Tensor>& key_padding) {
  const auto& all = attention_variants();
  auto it = std::find_if(all.begin(), all.end(), [&](const VariantInfo& v) { return v.kind == kind; });
  if (it == all.end()) {
    std::string names;
    for (const auto& v : all) names += (names.empty() ? "" : ", ") + v.kind;
    throw Error(fmt::format("unknown attention kind '{}'; known kinds: {}", kind, names));
  }
  const int64_t B = shape.batch, H = shape.heads, L = shape.queries, S = shape.keys;
  const int64_t dk = shape.key_dim, dv = shape.value_dim;
  if (B < 1 || H < 1 || L < 1 || S < 1 || dk < 1 || dv < 1)
    throw Error(fmt::format("batch ({}), heads ({}), L ({}), S ({}), dk ({}) and dv ({}) must all "
                            "be >= 1",
                            B, H, L, S, dk, dv));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = at::TensorOptions().dtype(dtype);
  auto randn = [&](at::IntArrayRef sizes, double scale = 1.0) {
    return at::randn(sizes, gen, opts) * scale;
  };
  VariantCase c;
  c.kind = kind;
  c.causal = causal;
  c.inputs = {randn({B, H, L, dk}), randn({B, H, S, dk}), randn({B, H, S, dv})};
  const c10::optional<at::Tensor> kp = key_padding;
  const c10::optional<at::Tensor> mask =
      key_padding.has_value() ? c10::optional<at::Tensor>(padding_mask(*key_padding)) : c10::nullopt;

  if (kind == "linear" || kind == "linear-relu" || kind == "favor") {
    const auto fm = kind == "linear" ? FeatureMap::elu()
                    : kind == "linear-relu" ? FeatureMap::relu()
                                            : FeatureMap::favor(dk, 0, seed);
    if (kind == "favor") {  // favor approximates exp(q·k/√d): keep inputs moderate
      c.inputs[0] = c.inputs[0] * 0.5;
      c.inputs[1] = c.inputs[1] * 0.5;
    }
    c.op = [=](const Inputs& x) { return linear_attention(x[0], x[1], x[2], fm, causal, kp); };
    c.reference = [=](const Inputs& x) {
      return reference::linear_attention(x[0], x[1], x[2], fm, causal, kp);
    };
    return c;
  }
  if (kind == "softmax") {
    c.op = [=](const Inputs& x) { return softmax_attention(x[0], x[1], x[2], mask, causal); };
    c.reference = [=](const Inputs& x) {
      return reference::softmax_attention(x[0], x[1], x[2], mask, causal);
    };
    return c;
  }
  if (kind == "cosformer") {
    c.op = [=](const Inputs& x) { return cosformer_attention(x[0], x[1], x[2], causal, kp); };
    c.reference = [=](const Inputs& x) {
      return reference::cosformer_attention(x[0], x[1], x[2], causal, kp);
    };
    return c;
  }
  if (kind == "talking-heads") {
    c.inputs.push_back(at::eye(H, opts) + randn({H, H}, 0.3));
    c.inputs.push_back(at::eye(H, opts) + randn({H, H}, 0.3));
    c.op = [=](const Inputs& x) {
      return talking_heads_attention(x[0], x[1], x[2], x[3], x[4], mask, causal);
    };
    c.reference = [=](const Inputs& x) {
      return reference::talking_heads_attention(x[0], x[1], x[2], x[3], x[4], mask, causal);
    };
    return c;
  }

  // The rest are "logits, then masked softmax, then · v": pick the logit producer.
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  LogitPair logits;
  if (kind == "synthesizer-dense") {
    const int64_t hidden = std::max<int64_t>(dk, 4);
    c.inputs.push_back(randn({H, dk, hidden}, 1.0 / std::sqrt(double(dk))));
    c.inputs.push_back(randn({H, hidden}, 0.1));
    c.inputs.push_back(randn({H, hidden, S}, 1.0 / std::sqrt(double(hidden))));
    c.inputs.push_back(randn({H, S}, 0.1));
    logits.op = [=](const Inputs& x) {
      return dense_synthesizer_logits(x[0], x[3], x[4], x[5], x[6], S);
    };
    logits.reference = [=](const Inputs& x) {
      return reference::dense_synthesizer_logits(x[0], x[3], x[4], x[5], x[6], S);
    };
  } else if (kind == "synthesizer-random") {
    c.inputs.push_back(randn({H, L, S}));
    logits.op = [=](const Inputs& x) { return random_synthesizer_logits(x[3], L, S); };
    logits.reference = [=](const Inputs& x) { return f64(x[3]).unsqueeze(0); };
  } else if (kind == "synthesizer-factorized-dense") {
    const int64_t a = static_cast<int64_t>(std::ceil(std::sqrt(double(S))));
    const int64_t b = (S + a - 1) / a;
    c.inputs.push_back(randn({H, dk, a}, 1.0 / std::sqrt(double(dk))));
    c.inputs.push_back(randn({H, dk, b}, 1.0 / std::sqrt(double(dk))));
    logits.op = [=](const Inputs& x) {
      return factorized_dense_synthesizer_logits(x[0], x[3], x[4], S);
    };
    logits.reference = [=](const Inputs& x) {
      return reference::factorized_dense_synthesizer_logits(x[0], x[3], x[4], S);
    };
  } else if (kind == "synthesizer-factorized-random") {
    const int64_t rank = std::min<int64_t>(8, std::max(L, S));
    c.inputs.push_back(randn({H, L, rank}, 0.5));
    c.inputs.push_back(randn({H, S, rank}, 0.5));
    logits.op = [=](const Inputs& x) {
      return factorized_random_synthesizer_logits(x[3], x[4], L, S);
    };
    logits.reference = [=](const Inputs& x) {
      return reference::factorized_random_synthesizer_logits(x[3], x[4], L, S);
    };
  } else {  // synthesizer-mixture
    c.inputs.push_back(randn({H, L, S}));
    c.inputs.push_back(randn({2}));
    logits.op = [=](const Inputs& x) {
      auto dot = at::matmul(x[0], x[1].transpose(-2, -1)) * scale;
      return mix_logits({random_synthesizer_logits(x[3], L, S), dot}, x[4]);
    };
    logits.reference = [=](const Inputs& x) {
      auto dot = at::matmul(f64(x[0]), f64(x[1]).transpose(-2, -1)) * scale;
      return reference::mix_logits({f64(x[3]).unsqueeze(0), dot}, x[4]);
    };
  }
  const auto op_logits = logits.op;
  const auto ref_logits = logits.reference;
  c.op = [=](const Inputs& x) { return attention_from_logits(op_logits(x), x[2], mask, causal); };
  c.reference = [=](const Inputs& x) {
    return reference::attention_from_logits(ref_logits(x), x[2], mask, causal);
  };
  return c;
}

}  // namespace attnkit::ops
