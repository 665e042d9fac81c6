#include "attnkit/layers/multi_head_attention.h"

#include "attnkit/layers/row_linear.h"
#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/head_gates.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/rms_norm.h"
#include "attnkit/ops/rotary.h"
#include "attnkit/ops/softmax_attention.h"
#include "attnkit/ops/synthesizer.h"
#include "attnkit/ops/talking_heads.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnkit::layers {
namespace {

bool uses_keys(const AttentionSpec& spec) {
  switch (spec.kind) {
    case AttentionKind::Softmax:
    case AttentionKind::Linear:
    case AttentionKind::Cosformer:
      return true;
    case AttentionKind::Mixture:
      for (auto kind : spec.mixture)
        if (kind == AttentionKind::Softmax) return true;
      return false;
    default:
      return false;
  }
}

bool uses_kind(const AttentionSpec& spec, AttentionKind kind) {
  if (spec.kind == kind) return true;
  if (spec.kind != AttentionKind::Mixture) return false;
  for (auto component : spec.mixture)
    if (component == kind) return true;
  return false;
}

bool uses_queries(const AttentionSpec& spec) {
  return uses_keys(spec) || uses_kind(spec, AttentionKind::SynthesizerDense) ||
         uses_kind(spec, AttentionKind::SynthesizerFactorizedDense);
}

// [B, n, H·d] -> [B, H, n, d]
at::Tensor split_heads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, -1}).transpose(1, 2);
}

// Keys valid under the optional padding, as a [B, 1, 1, S] mask combined with `mask`. An
// additive mask gets −inf on padded keys (combine_masks takes bool masks only).
c10::optional<at::Tensor> merged_mask(const c10::optional<at::Tensor>& mask,
                                      const c10::optional<at::Tensor>& key_padding) {
  if (!key_padding) return mask;
  at::Tensor padding = ops::padding_mask(*key_padding);
  if (!mask) return padding;
  if (at::isFloatingType(mask->scalar_type()))
    return at::where(padding, *mask, -std::numeric_limits<double>::infinity());
  return ops::combine_masks(*mask, padding);
}

}  // namespace

MultiHeadAttentionImpl::MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options)
    : options_(options) {
  if (options_.spec().kind == AttentionKind::TalkingHeads) {  // as AttentionSpec::parse writes it
    AttentionSpec normal = options_.spec();
    normal.kind = AttentionKind::Softmax;
    normal.talking_heads = true;
    options_.spec(normal);
  }
  const auto& spec = options_.spec();
  const int64_t hidden = options_.hidden(), heads = options_.heads();
  if (hidden <= 0 || heads <= 0)
    throw Error(fmt::format("attention: hidden ({}) and heads ({}) must be positive", hidden, heads));
  if ((spec.key_size == 0 || spec.value_size == 0) && hidden % heads != 0)
    throw Error(fmt::format("attention: hidden {} is not divisible by heads {}; set key_size and "
                            "value_size explicitly",
                            hidden, heads));
  original_heads_ = query_heads_ = heads;
  kv_heads_ = spec.kv_heads > 0 ? spec.kv_heads : heads;
  grouped_ = kv_heads_ != heads;
  if (spec.kv_heads < 0 || heads % kv_heads_ != 0)
    throw Error(fmt::format("attention: kv_heads {} must divide heads {}", spec.kv_heads, heads));
  if (grouped_)
    for (int64_t h = 0; h < heads; ++h) kv_of_head_.push_back(h / (heads / kv_heads_));
  const bool plain_softmax = spec.kind == AttentionKind::Softmax && !spec.talking_heads;
  if (grouped_ && !plain_softmax && spec.kind != AttentionKind::Linear &&
      spec.kind != AttentionKind::Cosformer)
    throw Error(fmt::format("attention: grouped key/value heads (kv_heads {}) need softmax, "
                            "linear or cosformer attention, not '{}'", kv_heads_, spec.to_string()));
  if ((spec.window != 0 || spec.logit_softcap != 0 || spec.scale != 0) && !plain_softmax)
    throw Error(fmt::format("attention: window, logit_softcap and scale are softmax settings; "
                            "'{}' has none", spec.to_string()));
  if (spec.window < 0 || (spec.window > 0 && !spec.causal))
    throw Error(fmt::format("attention: a sliding window ({}) must be positive and causal", spec.window));
  if (!(spec.logit_softcap >= 0) || !std::isfinite(spec.logit_softcap) || !(spec.scale >= 0) ||
      !std::isfinite(spec.scale))
    throw Error(fmt::format("attention: logit_softcap ({}) and scale ({}) must be finite and >= 0",
                            spec.logit_softcap, spec.scale));
  key_size_ = spec.key_size > 0 ? spec.key_size : hidden / heads;
  value_size_ = spec.value_size > 0 ? spec.value_size : hidden / heads;
  const int64_t memory_hidden = options_.memory_hidden() > 0 ? options_.memory_hidden() : hidden;
  if (spec.talking_heads && !spec.uses_logits())
    throw Error(fmt::format("attention: talking-heads needs explicit logits; '{}' has none",
                            spec.to_string()));
  const bool bias = spec.bias;
  if (uses_queries(spec))
    q = register_module("q", torch::nn::Linear(
                                 torch::nn::LinearOptions(hidden, heads * key_size_).bias(bias)));
  if (uses_keys(spec))
    k = register_module("k", torch::nn::Linear(torch::nn::LinearOptions(memory_hidden,
                                                                        kv_heads_ * key_size_)
                                                   .bias(bias)));
  v = register_module("v", torch::nn::Linear(torch::nn::LinearOptions(memory_hidden,
                                                                      kv_heads_ * value_size_)
                                                 .bias(bias)));
  o = register_module("o", torch::nn::Linear(torch::nn::LinearOptions(heads * value_size_, hidden)
                                                 .bias(bias && spec.output_bias)));
  if (spec.qk_norm) {
    if (!q || !k) throw Error(fmt::format("attention: qk_norm needs q and k; '{}' has none", spec.to_string()));
    if (options_.norm() == NormKind::LayerNorm)
      throw Error("attention: qk_norm is an RMS norm (norm rms_norm or gemma_rms_norm)");
    const double unit = options_.norm() == NormKind::GemmaRmsNorm ? 0.0 : 1.0;
    q_norm = register_parameter("q_norm", torch::full({key_size_}, unit));
    k_norm = register_parameter("k_norm", torch::full({key_size_}, unit));
  }

  if (spec.kind == AttentionKind::Linear && is_learned(spec.feature_map.kind)) {
    auto [weight, bias] = ops::FeatureMap::initial_weights(spec.feature_map, heads, key_size_);
    feature_weight_ = register_parameter("feature_map_weight", weight);
    feature_bias_ = register_parameter("feature_map_bias", bias);
  } else if (spec.kind == AttentionKind::Linear) {
    feature_map_ = std::make_shared<ops::FeatureMap>(ops::FeatureMap::from_spec(spec.feature_map, key_size_));
  }
  if (spec.talking_heads) {
    pre_mix_ = register_parameter("pre_mix", torch::eye(heads));
    post_mix_ = register_parameter("post_mix", torch::eye(heads));
  }
  const int64_t n = spec.max_length;
  if (uses_kind(spec, AttentionKind::SynthesizerDense) ||
      uses_kind(spec, AttentionKind::SynthesizerFactorizedDense) ||
      uses_kind(spec, AttentionKind::SynthesizerRandom) ||
      uses_kind(spec, AttentionKind::SynthesizerRandomFixed) ||
      uses_kind(spec, AttentionKind::SynthesizerFactorizedRandom)) {
    if (n <= 0) throw Error(fmt::format("attention: max_length must be positive (got {})", n));
  }
  const double init_std = 0.02;
  if (uses_kind(spec, AttentionKind::SynthesizerDense)) {
    const int64_t width = spec.synthesizer_hidden;
    dense_w1_ = register_parameter("dense_w1", torch::randn({heads, key_size_, width}) *
                                                   (1.0 / std::sqrt(double(key_size_))));
    dense_b1_ = register_parameter("dense_b1", torch::zeros({heads, width}));
    dense_w2_ = register_parameter("dense_w2", torch::randn({heads, width, n}) *
                                                   (1.0 / std::sqrt(double(width))));
    dense_b2_ = register_parameter("dense_b2", torch::zeros({heads, n}));
  }
  if (uses_kind(spec, AttentionKind::SynthesizerRandom))
    random_logits_ = register_parameter("random_logits", torch::randn({heads, n, n}) * init_std);
  // Fixed random alignment (Tay et al.'s fixed Random Synthesizer): a buffer, so no optimiser
  // moves it, drawn from the default generator (seeded like every other initial value) and saved
  // with the model. Unit-variance logits: at the trained kind's 0.02 the alignment would stay
  // uniform forever.
  if (uses_kind(spec, AttentionKind::SynthesizerRandomFixed))
    fixed_random_logits_ = register_buffer("fixed_random_logits", torch::randn({heads, n, n}));
  if (uses_kind(spec, AttentionKind::SynthesizerFactorizedDense)) {
    const auto a = static_cast<int64_t>(std::ceil(std::sqrt(double(n))));
    const int64_t b = (n + a - 1) / a;
    factor_a_ = register_parameter("factor_a", torch::randn({heads, key_size_, a}) *
                                                   (1.0 / std::sqrt(double(key_size_))));
    factor_b_ = register_parameter("factor_b", torch::randn({heads, key_size_, b}) *
                                                   (1.0 / std::sqrt(double(key_size_))));
  }
  if (uses_kind(spec, AttentionKind::SynthesizerFactorizedRandom)) {
    random_r1_ = register_parameter("random_r1", torch::randn({heads, n, spec.factor_rank}) * 0.1);
    random_r2_ = register_parameter("random_r2", torch::randn({heads, n, spec.factor_rank}) * 0.1);
  }
  if (spec.kind == AttentionKind::Mixture)
    mixing_ = register_parameter("mixing", torch::zeros({int64_t(spec.mixture.size())}));
}

void MultiHeadAttentionImpl::reset_norms() {
  if (!q_norm.defined()) return;
  torch::NoGradGuard no_grad;
  const double unit = options_.norm() == NormKind::GemmaRmsNorm ? 0.0 : 1.0;
  q_norm.fill_(unit);
  k_norm.fill_(unit);
}

bool MultiHeadAttentionImpl::uniform_groups() const {
  if (!grouped_ || kv_heads_ == 0 || heads() % kv_heads_ != 0) return !grouped_;
  const int64_t group = heads() / kv_heads_;
  for (int64_t h = 0; h < heads(); ++h)
    if (kv_of_head_[static_cast<size_t>(h)] != h / group) return false;
  return true;
}

ops::FeatureMap MultiHeadAttentionImpl::feature_map() const {
  if (feature_weight_.defined())
    return ops::FeatureMap::learned(options_.spec().feature_map.kind, feature_weight_, feature_bias_);
  if (!feature_map_)
    throw Error(fmt::format("attention: '{}' has no feature map", options_.spec().to_string()));
  return *feature_map_;
}

at::Tensor MultiHeadAttentionImpl::repeat_kv(const at::Tensor& x) const {
  // x.size(1) == heads(): already one key/value head per query head (uneven groups are expanded
  // right after the projections, so the later calls leave them alone).
  if (!grouped_ || x.size(1) == heads()) return x;
  if (uniform_groups()) return x.repeat_interleave(heads() / kv_heads_, 1);
  return x.index_select(1, at::tensor(kv_of_head_, at::kLong).to(x.device()));
}

void MultiHeadAttentionImpl::position_heads(at::Tensor& qh, at::Tensor& kh,
                                            const ops::RotaryTables& rotary) const {
  if (q_norm.defined()) {
    const auto kind = options_.norm() == NormKind::GemmaRmsNorm ? ops::RmsNormKind::Gemma
                                                                : ops::RmsNormKind::Llama;
    qh = ops::rms_norm(qh, q_norm, options_.norm_eps(), kind);
    kh = ops::rms_norm(kh, k_norm, options_.norm_eps(), kind);
  }
  if (rotary.cos.defined() && options_.spec().uses_logits()) {
    qh = ops::apply_rotary(qh, rotary);
    kh = ops::apply_rotary(kh, rotary);
  }
}

void MultiHeadAttentionImpl::set_transfer_teacher(const c10::optional<AttentionSpec>& teacher) {
  if (teacher) {
    if (teacher->kind != AttentionKind::Softmax || teacher->talking_heads)
      throw Error(fmt::format("attention transfer: the teacher must be plain softmax attention, "
                              "not '{}'",
                              teacher->to_string()));
    if (options_.spec().uses_logits())
      throw Error(fmt::format("attention transfer: '{}' is a logit kind; transfer trains a linear "
                              "or cosFormer layer",
                              options_.spec().to_string()));
  }
  transfer_teacher_ = teacher;
  transfer_loss_ = at::Tensor();
}

void MultiHeadAttentionImpl::set_head_gates(const at::Tensor& gates) {
  if (gates.defined()) {
    const bool ok = (gates.dim() == 1 && gates.size(0) == heads()) ||
                    (gates.dim() == 2 && gates.size(1) == heads());
    if (!ok)
      throw Error(fmt::format("head gates: expected [{}] or [batch, {}], got {}", heads(), heads(),
                              fmt::join(gates.sizes(), "x")));
  }
  head_gates_ = gates;
}

at::Tensor MultiHeadAttentionImpl::logits(const at::Tensor& qh, const at::Tensor& kh,
                                          AttentionKind kind, int64_t L, int64_t S) {
  const auto& spec = options_.spec();
  if (kind != AttentionKind::Softmax && (L > spec.max_length || S > spec.max_length))
    throw Error(fmt::format("attention: {} covers sequences up to max_length {} (got L={}, S={})",
                            attention_kind_name(kind), spec.max_length, L, S));
  switch (kind) {
    case AttentionKind::Softmax:
      return at::matmul(qh, kh.transpose(-2, -1)) * (1.0 / std::sqrt(double(key_size_)));
    case AttentionKind::SynthesizerDense:
      return ops::dense_synthesizer_logits(qh, dense_w1_, dense_b1_, dense_w2_, dense_b2_, S);
    case AttentionKind::SynthesizerRandom:
      return ops::random_synthesizer_logits(random_logits_, L, S);
    case AttentionKind::SynthesizerRandomFixed:
      return ops::random_synthesizer_logits(fixed_random_logits_, L, S);
    case AttentionKind::SynthesizerFactorizedDense:
      return ops::factorized_dense_synthesizer_logits(qh, factor_a_, factor_b_, S);
    case AttentionKind::SynthesizerFactorizedRandom:
      return ops::factorized_random_synthesizer_logits(random_r1_, random_r2_, L, S);
    case AttentionKind::Mixture: {
      std::vector<at::Tensor> parts;
      for (auto component : spec.mixture) parts.push_back(logits(qh, kh, component, L, S));
      return ops::mix_logits(parts, mixing_);
    }
    default:
      throw Error(fmt::format("attention: {} has no logits", attention_kind_name(kind)));
  }
}

// The weights of the feature-map kinds written out [B, H, L, S] (analysis only, O(L·S)).
at::Tensor MultiHeadAttentionImpl::explicit_weights(const at::Tensor& qh, const at::Tensor& kh,
                                                    const c10::optional<at::Tensor>& mask,
                                                    const c10::optional<at::Tensor>& key_padding) {
  const auto& spec = options_.spec();
  const int64_t L = qh.size(2), S = kh.size(2);
  at::Tensor fq, fk;
  double epsilon = 1e-6;
  if (spec.kind == AttentionKind::Linear) {
    const ops::FeatureMap map = feature_map();
    fq = map.apply(qh);
    fk = map.apply(kh);
  } else {  // cosFormer: cos(a−b) weighting through the cos/sin features
    const int64_t M = std::max(L, S);
    fq = ops::cosformer_features(qh, ops::cosformer_angles(L, spec.causal ? S - L : 0, M,
                                                           qh.scalar_type()));
    fk = ops::cosformer_features(kh, ops::cosformer_angles(S, 0, M, kh.scalar_type()));
  }
  at::Tensor scores = at::matmul(fq, fk.transpose(-2, -1));
  auto allowed = merged_mask(mask, key_padding);
  if (spec.causal) {
    at::Tensor causal = ops::causal_mask(L, S).to(scores.device());
    allowed = allowed ? ops::combine_masks(*allowed, causal) : causal;
  }
  if (allowed) scores = scores.masked_fill(allowed->logical_not(), 0.0);
  at::Tensor denominator = scores.sum(-1, /*keepdim=*/true);
  if (spec.kind == AttentionKind::Linear)
    denominator = denominator + epsilon;
  else
    denominator = denominator.clamp_min(epsilon);
  return scores / denominator;
}

AttentionResult MultiHeadAttentionImpl::forward(const at::Tensor& x, const AttentionInputs& in,
                                                const c10::optional<at::Tensor>& memory) {
  const auto& spec = options_.spec();
  if (x.dim() != 3 || x.size(2) != options_.hidden())
    throw Error(fmt::format("attention: x must be [batch, L, {}], got [{}]", options_.hidden(),
                            fmt::join(x.sizes(), ", ")));
  const at::Tensor& source = memory ? *memory : x;
  if (source.dim() != 3 || source.size(0) != x.size(0))
    throw Error(fmt::format("attention: memory must be [{}, S, width], got [{}]", x.size(0),
                            fmt::join(source.sizes(), ", ")));
  const int64_t H = heads(), L = x.size(1), S = source.size(1);
  if (in.key_padding) {
    const auto& kp = *in.key_padding;
    if (kp.dim() != 2 || kp.size(0) != x.size(0) || kp.size(1) != S)
      throw Error(fmt::format("attention: key_padding must be [{}, {}], got [{}]", x.size(0), S,
                              fmt::join(kp.sizes(), ", ")));
  }
  if (H == 0) {  // every head pruned: the output projection's bias alone
    AttentionResult empty;
    empty.output = project(3, x.new_zeros({x.size(0), L, 0}), false);
    if (in.need_weights) empty.weights = x.new_zeros({x.size(0), 0, L, S});
    if (in.need_head_contexts) empty.head_contexts = x.new_zeros({x.size(0), 0, L, value_size_});
    return empty;
  }
  if (in.rotary.cos.defined() && memory)
    throw Error("attention: rotary positions are for self attention (a memory was given)");
  at::Tensor qh = q ? split_heads(project(0, x, false), query_heads_) : at::Tensor();
  at::Tensor kh = k ? split_heads(project(1, source, false), grouped_ ? kv_heads_ : query_heads_) : at::Tensor();
  at::Tensor vh = split_heads(project(2, source, false), grouped_ ? kv_heads_ : H);
  if (qh.defined() && kh.defined()) position_heads(qh, kh, in.rotary);
  if (grouped_ && !uniform_groups()) {  // pruned inside groups: one key/value head per query head
    kh = repeat_kv(kh);
    vh = repeat_kv(vh);
  }

  AttentionResult result;
  at::Tensor context;
  ops::AttentionDropout dropout;
  if (is_training() && options_.dropout() > 0) {
    // A fresh seed per call from the default CPU generator: reproducible under torch::manual_seed
    // and checkpointed with the generator's state.
    dropout.rate = options_.dropout();
    dropout.seed = static_cast<uint64_t>(
        at::randint(std::numeric_limits<int64_t>::max(), {1}, at::kLong).item<int64_t>());
  }
  if (in.prefix_lengths) {
    const auto& pl = *in.prefix_lengths;
    if (memory || L != S || pl.dim() != 1 || pl.size(0) != x.size(0))
      throw Error(fmt::format("attention: prefix_lengths must be [{}] for self attention, got [{}]{}",
                              x.size(0), fmt::join(pl.sizes(), ", "),
                              memory ? " with a memory (cross attention)" : ""));
  }
  // The prefix-LM mask written out, for the kinds that need it explicitly.
  auto explicit_mask = [&]() -> c10::optional<at::Tensor> {
    if (in.mask || !in.prefix_lengths || spec.causal) return in.mask;
    return ops::prefix_lm_mask(*in.prefix_lengths, L).to(x.device());
  };
  if (spec.uses_logits()) {
    const auto mask = merged_mask(explicit_mask(), in.key_padding);
    const ops::SoftmaxExtras extras{spec.window, spec.logit_softcap};
    const c10::optional<double> scale =
        spec.scale > 0 ? c10::optional<double>(spec.scale) : c10::nullopt;
    if (spec.kind == AttentionKind::Softmax && !spec.talking_heads && in.need_weights) {
      at::Tensor weights = ops::softmax_attention_weights(qh, kh, mask, spec.causal, scale, extras);
      if (dropout.rate > 0) weights = ops::apply_attention_dropout(weights, dropout);
      context = at::matmul(weights, repeat_kv(vh));
      result.weights = weights;
    } else if (spec.talking_heads || in.need_weights) {
      at::Tensor scores = logits(qh, kh, spec.kind, L, S);
      // Token-independent logits ([1, H, L, S], random synthesizers) meet a per-batch mask.
      if (scores.size(0) != x.size(0)) scores = scores.expand({x.size(0), -1, -1, -1});
      if (spec.talking_heads) scores = ops::mix_heads(scores, pre_mix_);
      at::Tensor weights = ops::masked_softmax(scores, mask, spec.causal);
      if (spec.talking_heads) weights = ops::mix_heads(weights, post_mix_);
      if (dropout.rate > 0) weights = ops::apply_attention_dropout(weights, dropout);
      context = at::matmul(weights, vh);
      if (in.need_weights) result.weights = weights;
    } else if (spec.kind == AttentionKind::Softmax) {
      context = ops::softmax_attention(qh, kh, vh, mask, spec.causal, scale, dropout, extras);
    } else {
      context = ops::attention_from_logits(logits(qh, kh, spec.kind, L, S), vh, mask, spec.causal,
                                           dropout);
    }
  } else {
    if (in.mask && !in.prefix_lengths)
      throw Error(fmt::format("attention: '{}' takes causality, key padding and prefix lengths "
                              "(prefix LM, UniLM) only, not an arbitrary mask (use a softmax or "
                              "synthesizer kind for XLNet or other masks)",
                              spec.to_string()));
    const bool prefix = in.prefix_lengths && !spec.causal;
    kh = repeat_kv(kh);
    vh = repeat_kv(vh);
    if (in.rotary.cos.defined()) {
      if (prefix || in.key_padding || in.need_weights)
        throw Error(fmt::format("attention: '{}' with rotary positions takes neither key padding, "
                                "prefix lengths nor need_weights", spec.to_string()));
      context = spec.kind == AttentionKind::Linear
                    ? ops::rotary_linear_attention(qh, kh, vh, feature_map(), in.rotary, spec.causal)
                    : ops::rotary_cosformer_attention(qh, kh, vh, in.rotary, spec.causal);
    } else if (spec.kind == AttentionKind::Linear)
      context = prefix ? ops::prefix_linear_attention(qh, kh, vh, feature_map(),
                                                      *in.prefix_lengths, in.key_padding)
                       : ops::linear_attention(qh, kh, vh, feature_map(), spec.causal,
                                               in.key_padding);
    else
      context = prefix ? ops::prefix_cosformer_attention(qh, kh, vh, *in.prefix_lengths,
                                                         in.key_padding)
                       : ops::cosformer_attention(qh, kh, vh, spec.causal, in.key_padding);
    if (in.need_weights)
      result.weights = explicit_weights(
          qh, kh, prefix ? c10::optional<at::Tensor>(ops::prefix_lm_mask(*in.prefix_lengths, L))
                         : c10::nullopt,
          in.key_padding);
  }
  if (transfer_teacher_) {
    // The teacher's softmax on the same q, k, v (kh, vh repeated per query head above).
    const AttentionSpec& t = *transfer_teacher_;
    at::Tensor tq = qh, tk = kh;
    if (in.rotary.cos.defined()) {
      tq = ops::apply_rotary(qh, in.rotary);
      tk = ops::apply_rotary(kh, in.rotary);
    }
    const ops::SoftmaxExtras extras{t.window, t.logit_softcap};
    const c10::optional<double> scale = t.scale > 0 ? c10::optional<double>(t.scale) : c10::nullopt;
    at::Tensor teacher;
    {
      torch::NoGradGuard no_grad;
      teacher = ops::softmax_attention(tq, tk, vh, merged_mask(explicit_mask(), in.key_padding),
                                       t.causal, scale, {}, extras);
    }
    transfer_loss_ = (context - teacher).pow(2).mean();
    context = teacher;
  }
  if (in.need_head_contexts) result.head_contexts = context;
  if (head_gates_.defined()) context = ops::apply_head_gates(context, head_gates_.to(context.dtype()));
  at::Tensor merged = context.transpose(1, 2).reshape({x.size(0), L, H * value_size_});
  result.output = project(3, merged, false);
  return result;
}

// ---- the cached step ------------------------------------------------------------------------
at::Tensor MultiHeadAttentionImpl::step(const at::Tensor& x, const StepInputs& in,
                                        AttentionCache& cache) {
  const int64_t hidden = options_.hidden();
  if (x.dim() != 3 || x.size(2) != hidden)
    throw Error(fmt::format("attention step: x must be [batch, n, {}], got [{}]", hidden,
                            fmt::join(x.sizes(), ", ")));
  for (const auto* t : {&in.valid, &in.positions})
    if (!t->defined() || t->dim() != 2 || t->size(0) != x.size(0) || t->size(1) != x.size(1))
      throw Error(fmt::format("attention step: valid and positions must be [{}, {}], got [{}]",
                              x.size(0), x.size(1),
                              t->defined() ? fmt::format("{}", fmt::join(t->sizes(), ", "))
                                           : std::string("none")));
  if (!q || !k || options_.spec().talking_heads)
    throw Error(fmt::format("attention step: '{}' has no cached form", options_.spec().to_string()));
  const int64_t H = heads(), KV = grouped_ ? kv_heads_ : H;
  auto qkv = linear_rows(x, {dense_layer(*q), dense_layer(*k), dense_layer(*v)});
  for (int i = 0; i < 3; ++i) qkv[i] = with_lora(i, x, qkv[i]);
  at::Tensor qh = split_heads(qkv[0], H), kh = split_heads(qkv[1], KV), vh = split_heads(qkv[2], KV);
  position_heads(qh, kh, in.rotary);
  // The KV cache keeps the grouped heads (the softmax op reads them grouped); the feature states
  // sum per query head.
  if (!options_.spec().uses_logits() || !uniform_groups()) {
    kh = repeat_kv(kh);
    vh = repeat_kv(vh);
  }
  return finish_step(cache.attend(*this, qh, kh, vh, in));
}

at::Tensor MultiHeadAttentionImpl::step(const at::Tensor& x, MemoryCache& cache) {
  if (x.dim() != 3 || x.size(2) != options_.hidden())
    throw Error(fmt::format("attention step: x must be [batch, n, {}], got [{}]", options_.hidden(),
                            fmt::join(x.sizes(), ", ")));
  if (!q || grouped_ || q_norm.defined())
    throw Error(fmt::format("attention step: '{}' has no cached form for cross attention",
                            options_.spec().to_string()));
  return finish_step(cache.attend(*this, project(0, x, true).contiguous()));
}

std::pair<at::Tensor, at::Tensor> MultiHeadAttentionImpl::memory_heads(const at::Tensor& memory) {
  if (!k || grouped_)
    throw Error(fmt::format("attention: '{}' has no memory keys per head", options_.spec().to_string()));
  return {split_heads(project(1, memory, true), heads()), split_heads(project(2, memory, true), heads())};
}

at::Tensor MultiHeadAttentionImpl::finish_step(at::Tensor context) {
  if (head_gates_.defined()) context = ops::apply_head_gates(context, head_gates_.to(context.dtype()));
  const int64_t B = context.size(0), n = context.size(2);
  return project(3, context.transpose(1, 2).reshape({B, n, heads() * value_size_}), true);
}

const torch::nn::Linear& MultiHeadAttentionImpl::projection(int which) const {
  switch (which) {
    case 0: return q;
    case 1: return k;
    case 2: return v;
    default: return o;
  }
}

torch::nn::Linear& MultiHeadAttentionImpl::projection(int which) {
  return const_cast<torch::nn::Linear&>(std::as_const(*this).projection(which));
}

at::Tensor MultiHeadAttentionImpl::with_lora(int which, const at::Tensor& x, at::Tensor y) const {
  const Lora& lora = lora_[which];
  if (!lora.a.defined()) return y;
  // (x·Aᵀ)·Bᵀ: rank-wide in the middle, never the [out, in] product.
  return y + at::linear(at::linear(x, lora.a), lora.b) * lora.scale;
}

at::Tensor MultiHeadAttentionImpl::project(int which, const at::Tensor& x, bool step) {
  const torch::nn::LinearImpl& layer = *projection(which);
  return with_lora(which, x, step ? linear_rows(layer, x) : linear(layer, x));
}

bool MultiHeadAttentionImpl::has_projection(int which) const {
  return which >= 0 && which < 4 && !projection(which).is_empty();
}

void MultiHeadAttentionImpl::add_lora(int which, int64_t rank, double alpha) {
  if (which < 0 || which > 3) throw Error(fmt::format("lora: projection {} is not one of q, k, v, o", which));
  const std::string name = kProjectionNames[which];
  torch::nn::Linear& layer = projection(which);
  if (!layer) throw Error(fmt::format("lora: '{}' has no {} projection", options_.spec().to_string(), name));
  if (rank < 1) throw Error(fmt::format("lora: rank must be at least 1 (got {})", rank));
  if (!(alpha > 0) || !std::isfinite(alpha)) throw Error(fmt::format("lora: alpha must be positive (got {})", alpha));
  if (int8_weight(*layer).defined()) throw Error("lora: the " + name + " projection is int8 (adapters train float layers)");
  if (lora_[which].a.defined()) throw Error("lora: the " + name + " projection has an adapter already");
  const int64_t out = layer->weight.size(0), in = layer->weight.size(1);
  const auto options = layer->weight.options().requires_grad(false);
  const double bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(in, 1)));
  lora_[which].a = register_parameter(name + "_lora_a", at::empty({rank, in}, options).uniform_(-bound, bound));
  lora_[which].b = register_parameter(name + "_lora_b", at::zeros({out, rank}, options));
  // The scale is a parameter that never trains (checkpoints and loaders carry parameters by name).
  lora_[which].scale = register_parameter(name + "_lora_scale", at::full({1}, alpha / static_cast<double>(rank), options),
                                          /*requires_grad=*/false);
}

int64_t MultiHeadAttentionImpl::merge_lora() {
  int64_t merged = 0;
  torch::NoGradGuard no_grad;
  for (int which = 0; which < 4; ++which) {
    Lora& lora = lora_[which];
    if (!lora.a.defined()) continue;
    at::Tensor& weight = projection(which)->weight;
    weight.add_((at::matmul(lora.b.to(at::kDouble), lora.a.to(at::kDouble)) * lora.scale.item<double>())
                    .to(weight.dtype()));
    const std::string name = kProjectionNames[which];
    parameters_.erase(name + "_lora_a");
    parameters_.erase(name + "_lora_b");
    parameters_.erase(name + "_lora_scale");
    lora = Lora{};
    ++merged;
  }
  return merged;
}

bool MultiHeadAttentionImpl::has_lora() const {
  for (const Lora& lora : lora_)
    if (lora.a.defined()) return true;
  return false;
}

namespace {

// Rows [h·size, (h+1)·size) of every kept head h, as one index.
at::Tensor head_rows(const std::vector<int64_t>& keep, int64_t size) {
  std::vector<int64_t> rows;
  rows.reserve(keep.size() * size);
  for (int64_t h : keep)
    for (int64_t j = 0; j < size; ++j) rows.push_back(h * size + j);
  return at::tensor(rows, at::kLong);
}

// Replaces a registered tensor's values in place (the module keeps the same parameter object).
void narrow_to(at::Tensor& tensor, int64_t dim, const at::Tensor& index) {
  if (!tensor.defined()) return;
  tensor.set_data(tensor.detach().index_select(dim, index.to(tensor.device())).clone());
  if (tensor.grad().defined()) tensor.mutable_grad() = at::Tensor();
}

}  // namespace

void MultiHeadAttentionImpl::prune_heads(const std::vector<int64_t>& heads) {
  merge_lora();  // adapters into the weights first: their rows and columns go with the heads
  std::vector<int64_t> remove;
  for (int64_t h : heads) {
    if (h < 0 || h >= original_heads_)
      throw Error(fmt::format("prune heads: head {} outside [0, {})", h, original_heads_));
    if (!std::binary_search(pruned_heads_.begin(), pruned_heads_.end(), h)) remove.push_back(h);
  }
  std::sort(remove.begin(), remove.end());
  remove.erase(std::unique(remove.begin(), remove.end()), remove.end());
  if (remove.empty()) return;
  // Positions (in the current numbering) of the heads that stay.
  std::vector<int64_t> keep;
  int64_t position = 0;
  for (int64_t h = 0; h < original_heads_; ++h) {
    if (std::binary_search(pruned_heads_.begin(), pruned_heads_.end(), h)) continue;
    if (!std::binary_search(remove.begin(), remove.end(), h)) keep.push_back(position);
    ++position;
  }
  torch::NoGradGuard no_grad;
  const at::Tensor kept = at::tensor(keep, at::kLong);
  const int64_t count = static_cast<int64_t>(keep.size());
  const bool talking = options_.spec().talking_heads;
  if (grouped_) {
    // Query heads go with their rows of q and columns of o; a key/value head goes when no query
    // head reads it any more.
    std::vector<int64_t> kept_kv, kv_of_head;
    for (int64_t p : keep) kept_kv.push_back(kv_of_head_[static_cast<size_t>(p)]);
    kept_kv.erase(std::unique(kept_kv.begin(), kept_kv.end()), kept_kv.end());  // sorted: kv_of_head_ is
    for (int64_t p : keep)
      kv_of_head.push_back(std::lower_bound(kept_kv.begin(), kept_kv.end(),
                                            kv_of_head_[static_cast<size_t>(p)]) - kept_kv.begin());
    const at::Tensor q_rows = head_rows(keep, key_size_);
    narrow_to(q->weight, 0, q_rows);
    narrow_to(q->bias, 0, q_rows);
    q->options.out_features(count * key_size_);
    const at::Tensor k_rows = head_rows(kept_kv, key_size_), v_rows = head_rows(kept_kv, value_size_);
    narrow_to(k->weight, 0, k_rows);
    narrow_to(k->bias, 0, k_rows);
    k->options.out_features(static_cast<int64_t>(kept_kv.size()) * key_size_);
    narrow_to(v->weight, 0, v_rows);
    narrow_to(v->bias, 0, v_rows);
    v->options.out_features(static_cast<int64_t>(kept_kv.size()) * value_size_);
    narrow_to(o->weight, 1, head_rows(keep, value_size_));
    o->options.in_features(count * value_size_);
    kv_of_head_ = std::move(kv_of_head);
    kv_heads_ = static_cast<int64_t>(kept_kv.size());
    query_heads_ = count;
  } else if (!talking) {
    const at::Tensor rows = head_rows(keep, key_size_);
    for (auto* linear : {&q, &k}) {
      if (!*linear) continue;
      narrow_to((*linear)->weight, 0, rows);
      narrow_to((*linear)->bias, 0, rows);
      (*linear)->options.out_features(count * key_size_);
    }
    query_heads_ = count;
  }
  if (!grouped_) {
    const at::Tensor value_rows = head_rows(keep, value_size_);
    narrow_to(v->weight, 0, value_rows);
    narrow_to(v->bias, 0, value_rows);
    v->options.out_features(count * value_size_);
    narrow_to(o->weight, 1, value_rows);
    o->options.in_features(count * value_size_);
  }
  if (talking) narrow_to(post_mix_, 1, kept);
  for (at::Tensor* t : {&dense_w1_, &dense_b1_, &dense_w2_, &dense_b2_, &random_logits_,
                        &fixed_random_logits_, &factor_a_, &factor_b_, &random_r1_, &random_r2_,
                        &feature_weight_, &feature_bias_})
    narrow_to(*t, 0, kept);
  if (head_gates_.defined()) head_gates_ = head_gates_.index_select(-1, kept.to(head_gates_.device()));
  options_.heads(count);
  pruned_heads_.insert(pruned_heads_.end(), remove.begin(), remove.end());
  std::sort(pruned_heads_.begin(), pruned_heads_.end());
}

}  // namespace attnkit::layers
