#include "attnkit/ops/softmax_attention.h"

#include "attnkit/ops/masks.h"
#include "checks.h"
#include "cpu/flash_attention_kernel.h"
#include "flash_attention.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace attnkit::ops {

namespace {

constexpr const char* kLogitsOp = "masked_softmax";

void check_logits(const char* op, const at::Tensor& logits) {
  detail::check_rank(op, "logits", logits, 4, "[batch, heads, L, S]");
  detail::check_floating(op, "logits", logits);
}

// Masked softmax without checks; logits already validated.
at::Tensor masked_softmax_unchecked(const at::Tensor& logits, const c10::optional<at::Tensor>& mask,
                                    bool causal) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  at::Tensor x = logits;
  if (mask.has_value() && mask->defined()) {
    x = mask->scalar_type() == at::kBool ? x.masked_fill(mask->logical_not(), neg_inf) : x + *mask;
  }
  if (causal) {
    x = x.masked_fill(causal_mask(x.size(2), x.size(3)).logical_not(), neg_inf);
  }
  // Subtract the row max for stability; a row that is entirely -inf uses 0 instead, so that
  // exp() gives zeros and the row sum is 0 (then the weights stay 0 rather than NaN).
  auto row_max = std::get<0>(x.detach().max(-1, /*keepdim=*/true));
  row_max = row_max.masked_fill(row_max.isneginf(), 0.0);
  auto p = (x - row_max).exp();
  auto sum = p.sum(-1, /*keepdim=*/true);
  return p / sum.masked_fill(sum.eq(0), 1.0);
}

}  // namespace

at::Tensor masked_softmax(const at::Tensor& logits, const c10::optional<at::Tensor>& mask,
                          bool causal) {
  check_logits(kLogitsOp, logits);
  if (mask.has_value() && mask->defined())
    detail::check_attention_mask(kLogitsOp, *mask, logits.size(0), logits.size(1), logits.size(2),
                                 logits.size(3), logits);
  return masked_softmax_unchecked(logits, mask, causal);
}

at::Tensor attention_dropout_keep(int64_t batch, int64_t heads, int64_t L, int64_t S,
                                  const AttentionDropout& dropout) {
  auto keep = at::empty({batch, heads, L, S}, at::kBool);
  bool* out = keep.data_ptr<bool>();
  const uint32_t threshold = cpu::dropout_threshold(dropout.rate);
  for (int64_t bh = 0; bh < batch * heads; ++bh)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j)
        *out++ = cpu::dropout_keep(dropout.seed, bh, i, j, L, S, threshold);
  return keep;
}

namespace {

void check_dropout(const char* op, const AttentionDropout& dropout) {
  if (!(dropout.rate >= 0.0 && dropout.rate < 1.0))
    detail::fail(op, fmt::format("dropout rate must be in [0, 1), got {}", dropout.rate));
}

}  // namespace

at::Tensor apply_attention_dropout(const at::Tensor& weights, const AttentionDropout& dropout) {
  check_dropout("apply_attention_dropout", dropout);
  check_logits("apply_attention_dropout", weights);
  if (dropout.rate == 0.0) return weights;
  auto keep = attention_dropout_keep(weights.size(0), weights.size(1), weights.size(2),
                                     weights.size(3), dropout);
  return weights * keep.to(weights.scalar_type()) * (1.0 / (1.0 - dropout.rate));
}

at::Tensor attention_from_logits(const at::Tensor& logits, const at::Tensor& v,
                                 const c10::optional<at::Tensor>& mask, bool causal,
                                 const AttentionDropout& dropout) {
  constexpr const char* op = "attention_from_logits";
  check_logits(op, logits);
  detail::check_rank(op, "v", v, 4, "[batch, heads, S, dv]");
  detail::check_same_dtype(op, "logits", logits, "v", v);
  if (v.size(2) != logits.size(3) ||
      (v.size(0) != logits.size(0) && logits.size(0) != 1) ||
      (v.size(1) != logits.size(1) && logits.size(1) != 1))
    detail::fail(op, fmt::format("v has shape {} but logits have shape {}; v must be "
                                 "[batch, heads, S, dv] matching logits [batch, heads, L, S]",
                                 detail::shape_str(v), detail::shape_str(logits)));
  if (mask.has_value() && mask->defined())
    detail::check_attention_mask(op, *mask, v.size(0), v.size(1), logits.size(2), logits.size(3),
                                 logits);
  check_dropout(op, dropout);
  auto weights = masked_softmax_unchecked(logits, mask, causal);
  if (dropout.rate > 0) weights = apply_attention_dropout(weights.expand({v.size(0), v.size(1), logits.size(2), logits.size(3)}), dropout);
  return at::matmul(weights, v);
}

namespace {

double resolve_scale(const char* op, const at::Tensor& q, c10::optional<double> scale) {
  const double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  if (!std::isfinite(s)) detail::fail(op, fmt::format("scale must be finite, got {}", s));
  return s;
}

at::Tensor scaled_logits(const char* op, const at::Tensor& q, const at::Tensor& k,
                         c10::optional<double> scale) {
  return at::matmul(q, k.transpose(-2, -1)) * resolve_scale(op, q, scale);
}

// k and v may have grouped heads (Hkv dividing q's heads); the mask is over q's heads.
void check_inputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const c10::optional<at::Tensor>& mask) {
  detail::check_qkv(op, q, k, v, /*grouped_kv=*/true);
  if (mask.has_value() && mask->defined())
    detail::check_attention_mask(op, *mask, q.size(0), q.size(1), q.size(2), k.size(2), q);
}

// Grouped key/value heads (checked) repeated to the query heads (transformers' repeat_kv), for
// the unfused path only: the fused kernel reads them in place.
at::Tensor repeat_kv(const at::Tensor& q, const at::Tensor& kv) {
  return kv.size(1) == q.size(1) ? kv : kv.repeat_interleave(q.size(1) / kv.size(1), 1);
}

void check_extras(const char* op, const SoftmaxExtras& extras, bool causal) {
  if (extras.window < 0) detail::fail(op, fmt::format("window must be >= 0, got {}", extras.window));
  if (extras.window > 0 && !causal) detail::fail(op, "a sliding window needs causal attention");
  if (!(extras.logit_softcap >= 0.0) || !std::isfinite(extras.logit_softcap))
    detail::fail(op, fmt::format("logit_softcap must be finite and >= 0, got {}", extras.logit_softcap));
}

// `mask` with the sliding window's band (keys j with 0 <= i + S − L − j < window) added, for the
// unfused path only: the fused kernel skips the keys outside the band.
c10::optional<at::Tensor> with_window(const c10::optional<at::Tensor>& mask, int64_t window,
                                      int64_t L, int64_t S, const at::Tensor& like) {
  if (window <= 0) return mask;
  at::Tensor i = at::arange(L, at::kLong).unsqueeze(1) + (S - L), j = at::arange(S, at::kLong);
  at::Tensor band = (i - j).lt(window).to(like.device());
  if (!mask.has_value() || !mask->defined()) return band;
  if (at::isFloatingType(mask->scalar_type()))
    return at::where(band, *mask, -std::numeric_limits<double>::infinity());
  return combine_masks(*mask, band);
}

at::Tensor capped(at::Tensor logits, double cap) {
  return cap > 0 ? at::tanh(logits / cap) * cap : logits;
}

}  // namespace

at::Tensor softmax_attention(const at::Tensor& q, const at::Tensor& k_in, const at::Tensor& v_in,
                             const c10::optional<at::Tensor>& mask_in, bool causal,
                             c10::optional<double> scale, const AttentionDropout& dropout,
                             const SoftmaxExtras& extras) {
  constexpr const char* op = "softmax_attention";
  check_inputs(op, q, k_in, v_in, mask_in);
  check_dropout(op, dropout);
  check_extras(op, extras, causal);
  // The fused kernel takes grouped k/v, the window and the soft-cap as they are (no repeat, no
  // band mask, no logits).
  if (detail::flash_attention_supports(q, mask_in))
    return detail::flash_attention(q, k_in, v_in, mask_in, causal, resolve_scale(op, q, scale),
                                   dropout, extras.window, extras.logit_softcap);
  const at::Tensor k = repeat_kv(q, k_in), v = repeat_kv(q, v_in);
  const auto mask = with_window(mask_in, extras.window, q.size(2), k.size(2), q);
  auto weights = masked_softmax_unchecked(
      capped(scaled_logits(op, q, k, scale), extras.logit_softcap), mask, causal);
  return at::matmul(apply_attention_dropout(weights, dropout), v);
}

at::Tensor softmax_attention_weights(const at::Tensor& q, const at::Tensor& k_in,
                                     const c10::optional<at::Tensor>& mask_in, bool causal,
                                     c10::optional<double> scale, const SoftmaxExtras& extras) {
  constexpr const char* op = "softmax_attention_weights";
  check_inputs(op, q, k_in, k_in, mask_in);
  const at::Tensor k = repeat_kv(q, k_in);
  check_extras(op, extras, causal);
  const auto mask = with_window(mask_in, extras.window, q.size(2), k.size(2), q);
  return masked_softmax_unchecked(capped(scaled_logits(op, q, k, scale), extras.logit_softcap),
                                  mask, causal);
}

}  // namespace attnkit::ops
