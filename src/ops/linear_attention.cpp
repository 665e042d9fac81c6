#include "attnkit/ops/linear_attention.h"

#include "attnkit/error.h"
#include "checks.h"
#include "feature_attention.h"
#include "fused_feature_attention.h"

#include "attnkit/ops/masks.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>

namespace attnkit::ops {

namespace {

int64_t default_favor_features(int64_t dim) {
  const auto log_d = static_cast<int64_t>(std::ceil(std::log(static_cast<double>(dim))));
  return dim * std::max<int64_t>(1, log_d);
}

}  // namespace

at::Tensor favor_projection(int64_t dim, int64_t num_features, uint64_t seed) {
  if (dim < 1 || num_features < 1)
    detail::fail("favor_projection", fmt::format("dim ({}) and num_features ({}) must be >= 1",
                                                 dim, num_features));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  // Stack blocks of d orthogonal directions (QR of a Gaussian block), each row rescaled to the
  // norm of an independent Gaussian vector so rows are marginally N(0, I).
  std::vector<at::Tensor> blocks;
  int64_t rows = 0;
  while (rows < num_features) {
    auto gaussian = at::randn({dim, dim}, gen, opts);
    auto q = std::get<0>(at::linalg_qr(gaussian));  // columns orthonormal
    blocks.push_back(q.transpose(0, 1));
    rows += dim;
  }
  auto w = at::cat(blocks, 0).narrow(0, 0, num_features);
  auto norms = at::randn({num_features, dim}, gen, opts).norm(2, {1}, /*keepdim=*/true);
  return (w * norms).contiguous();
}

FeatureMap FeatureMap::elu() { return FeatureMap(FeatureMapKind::Elu, at::Tensor(), 0); }
FeatureMap FeatureMap::relu() { return FeatureMap(FeatureMapKind::Relu, at::Tensor(), 0); }

FeatureMap FeatureMap::favor(int64_t dim, int64_t num_features, uint64_t seed) {
  const int64_t m = num_features > 0 ? num_features : default_favor_features(dim);
  return FeatureMap(FeatureMapKind::Favor, favor_projection(dim, m, seed), seed);
}

FeatureMap FeatureMap::learned(FeatureMapKind kind, at::Tensor weight, at::Tensor bias) {
  if (!is_learned(kind))
    detail::fail("FeatureMap::learned",
                 fmt::format("'{}' is not a trained feature map (t2r, hedgehog)",
                             to_string(FeatureMapSpec{kind, 0, 0})));
  if (!weight.defined() || !bias.defined() || weight.dim() != 3 || bias.dim() != 2 ||
      bias.size(0) != weight.size(0) || bias.size(1) != weight.size(1) || weight.numel() == 0)
    detail::fail("FeatureMap::learned",
                 fmt::format("weight must be [heads, M, d] and bias [heads, M] (M, d >= 1), got {} "
                             "and {}",
                             weight.defined() ? detail::shape_str(weight) : "none",
                             bias.defined() ? detail::shape_str(bias) : "none"));
  return FeatureMap(kind, std::move(weight), 0, std::move(bias));
}

std::pair<at::Tensor, at::Tensor> FeatureMap::initial_weights(const FeatureMapSpec& spec,
                                                              int64_t heads, int64_t dim) {
  if (!is_learned(spec.kind))
    detail::fail("FeatureMap::initial_weights",
                 fmt::format("'{}' has no trained weights", to_string(spec)));
  if (heads < 1 || dim < 1 || spec.num_features < 0)
    detail::fail("FeatureMap::initial_weights",
                 fmt::format("heads ({}), d ({}) and M ({}) must be positive", heads, dim,
                             spec.num_features));
  const int64_t m = spec.num_features > 0 ? spec.num_features : dim;
  at::Tensor weight;
  if (spec.kind == FeatureMapKind::Hedgehog && m == dim)
    weight = at::eye(dim, at::kFloat).unsqueeze(0).repeat({heads, 1, 1});
  else
    weight = at::randn({heads, m, dim}, at::kFloat) / std::sqrt(static_cast<double>(dim));
  return {weight, at::zeros({heads, m}, at::kFloat)};
}

FeatureMap FeatureMap::from_spec(const FeatureMapSpec& spec, int64_t dim) {
  switch (spec.kind) {
    case FeatureMapKind::Elu: return elu();
    case FeatureMapKind::Relu: return relu();
    case FeatureMapKind::Favor: return favor(dim, spec.num_features, spec.seed);
    case FeatureMapKind::CosRelu: break;
    case FeatureMapKind::T2r:
    case FeatureMapKind::Hedgehog:
      detail::fail("FeatureMap::from_spec",
                   fmt::format("'{}' is trained: its weights belong to an attention layer "
                               "(FeatureMap::learned)",
                               to_string(spec)));
  }
  detail::fail("FeatureMap::from_spec",
               "cos-relu features depend on token positions; use cosformer_attention");
}

FeatureMap FeatureMap::parse(const std::string& spec, int64_t dim) {
  try {
    return from_spec(parse_feature_map(spec), dim);
  } catch (const Error& e) {
    detail::fail("FeatureMap::parse", e.what());
  }
}

FeatureMapSpec FeatureMap::spec() const {
  FeatureMapSpec out;
  out.kind = kind_;
  if (kind_ == FeatureMapKind::Favor) {
    out.num_features = projection_.size(0);
    out.seed = seed_;
  }
  if (is_learned(kind_)) out.num_features = projection_.size(1);
  return out;
}

std::string FeatureMap::name() const { return to_string(spec()); }

int64_t FeatureMap::output_dim(int64_t input_dim) const {
  switch (kind_) {
    case FeatureMapKind::Favor: return projection_.size(0);
    case FeatureMapKind::T2r: return projection_.size(1);
    case FeatureMapKind::Hedgehog: return 2 * projection_.size(1);
    default: return input_dim;
  }
}

void FeatureMap::redraw(uint64_t seed) {
  if (kind_ != FeatureMapKind::Favor) return;
  projection_ = favor_projection(projection_.size(1), projection_.size(0), seed);
  seed_ = seed;
}

at::Tensor FeatureMap::apply(const at::Tensor& x) const {
  switch (kind_) {
    case FeatureMapKind::Elu: return at::elu(x) + 1;
    case FeatureMapKind::Relu: return at::relu(x);
    case FeatureMapKind::CosRelu: break;  // from_spec refuses it
    case FeatureMapKind::Favor: {
      const int64_t d = projection_.size(1);
      if (x.size(-1) != d)
        detail::fail("FeatureMap::apply",
                     fmt::format("favor feature map was drawn for dimension {} but the input has "
                                 "shape {}",
                                 d, detail::shape_str(x)));
      const double m = static_cast<double>(projection_.size(0));
      auto xs = x * std::pow(static_cast<double>(d), -0.25);
      auto proj = at::matmul(xs, projection_.to(x.scalar_type()).transpose(0, 1));
      auto half_norm = xs.pow(2).sum(-1, /*keepdim=*/true) * 0.5;
      return (proj - half_norm).exp() / std::sqrt(m);
    }
    case FeatureMapKind::T2r:
    case FeatureMapKind::Hedgehog: {
      const int64_t H = projection_.size(0), d = projection_.size(2);
      if (x.dim() < 3 || x.size(-3) != H || x.size(-1) != d)
        detail::fail("FeatureMap::apply",
                     fmt::format("{} feature map has {} heads of dimension {}; the input must be "
                                 "[..., {}, L, {}], got {}",
                                 name(), H, d, H, d, detail::shape_str(x)));
      // [..., H, L, d] · [H, d, M] + [H, 1, M]
      const at::Tensor z = at::matmul(x, projection_.to(x.scalar_type()).transpose(-2, -1)) +
                           bias_.to(x.scalar_type()).unsqueeze(-2);
      if (kind_ == FeatureMapKind::T2r) return at::relu(z);
      return at::cat({at::softmax(z, -1), at::softmax(-z, -1)}, -1);
    }
  }
  return x;
}

at::Tensor linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const FeatureMap& feature_map, bool causal,
                            const c10::optional<at::Tensor>& key_padding_mask) {
  detail::check_feature_attention_inputs("linear_attention", q, k, v, causal, key_padding_mask);
  if (detail::fused_feature_applies(q, k, causal, key_padding_mask, feature_map.kind()))
    return detail::fused_feature_attention(q, k, v, key_padding_mask, feature_map.kind(), 0.0,
                                           /*clamp=*/false, causal);
  auto phi_q = feature_map.apply(q);
  auto phi_k = detail::zero_padded_keys(feature_map.apply(k), key_padding_mask);
  return detail::feature_attention(phi_q, phi_k, v, causal, detail::Denominator::AddEpsilon);
}

at::Tensor prefix_linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const FeatureMap& feature_map, const at::Tensor& prefix_lengths,
                                   const c10::optional<at::Tensor>& key_padding_mask) {
  const char* op = "prefix_linear_attention";
  detail::check_feature_attention_inputs(op, q, k, v, /*causal=*/false, key_padding_mask);
  const auto lengths = detail::check_prefix_lengths(op, q, k, prefix_lengths);
  if (detail::fused_prefix_feature_applies(q, feature_map.kind()))
    return detail::fused_prefix_feature_attention(q, k, v, lengths, key_padding_mask,
                                                  feature_map.kind(), 0.0, /*clamp=*/false);
  auto phi_k = detail::zero_padded_keys(feature_map.apply(k), key_padding_mask);
  return detail::masked_feature_attention(feature_map.apply(q), phi_k, v,
                                          prefix_lm_mask(lengths, q.size(2)).to(q.device()),
                                          detail::Denominator::AddEpsilon);
}

at::Tensor linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::string& feature_map, bool causal,
                            const c10::optional<at::Tensor>& key_padding_mask) {
  detail::check_rank("linear_attention", "q", q, 4, "[batch, heads, L, dk]");
  return linear_attention(q, k, v, FeatureMap::parse(feature_map, q.size(3)), causal,
                          key_padding_mask);
}

}  // namespace attnkit::ops
