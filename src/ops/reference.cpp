#include "attnkit/ops/reference.h"

#include "attnkit/ops/linear_attention.h"

#include <ATen/ATen.h>

#include <cmath>

namespace attnkit::reference {

namespace {

at::Tensor f64(const at::Tensor& t) { return t.to(at::kDouble); }

c10::optional<at::Tensor> bool_part(const c10::optional<at::Tensor>& mask) {
  if (mask.has_value() && mask->defined() && mask->scalar_type() == at::kBool) return mask;
  return c10::nullopt;
}

// w v / denominator(row sums), with an explicit weight matrix.
at::Tensor weighted_average(const at::Tensor& w, const at::Tensor& v, bool clamp) {
  auto den = w.sum(-1, /*keepdim=*/true);
  den = clamp ? den.clamp_min(1e-6) : den + 1e-6;
  return at::matmul(w, f64(v)) / den;
}

}  // namespace

at::Tensor allowed_matrix(int64_t B, int64_t H, int64_t L, int64_t S,
                          const c10::optional<at::Tensor>& bool_mask, bool causal,
                          const c10::optional<at::Tensor>& key_padding_mask) {
  auto allowed = at::ones({B, H, L, S}, at::TensorOptions().dtype(at::kBool));
  if (bool_mask.has_value() && bool_mask->defined())
    allowed = allowed.logical_and(bool_mask->expand({B, H, L, S}));
  if (causal) {
    auto a = allowed.accessor<bool, 4>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < S; ++j)
            if (j > i + (S - L)) a[b][h][i][j] = false;
  }
  if (key_padding_mask.has_value() && key_padding_mask->defined()) {
    auto a = allowed.accessor<bool, 4>();
    auto kp = key_padding_mask->accessor<bool, 2>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < S; ++j)
            if (!kp[b][j]) a[b][h][i][j] = false;
  }
  return allowed;
}

at::Tensor softmax_weights(const at::Tensor& logits, const at::Tensor& allowed) {
  auto x = f64(logits);
  auto ok = allowed.logical_and(x.isfinite());
  auto filled = x.masked_fill(ok.logical_not(), -1e300);
  auto row_max = std::get<0>(filled.max(-1, /*keepdim=*/true));
  auto e = (filled - row_max).exp() * ok.to(at::kDouble);
  auto sum = e.sum(-1, /*keepdim=*/true);
  return at::where(sum.gt(0), e / sum, at::zeros_like(e));
}

at::Tensor softmax_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const c10::optional<at::Tensor>& mask, bool causal,
                             c10::optional<double> scale) {
  const double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return attention_from_logits(at::matmul(f64(q), f64(k).transpose(-2, -1)) * s, v, mask, causal);
}

at::Tensor attention_from_logits(const at::Tensor& logits, const at::Tensor& v,
                                 const c10::optional<at::Tensor>& mask, bool causal) {
  auto x = f64(logits);
  const int64_t B = std::max(x.size(0), v.size(0)), H = std::max(x.size(1), v.size(1));
  const int64_t L = x.size(2), S = x.size(3);
  x = x.expand({B, H, L, S});
  if (mask.has_value() && mask->defined() && mask->scalar_type() != at::kBool) x = x + f64(*mask);
  auto w = softmax_weights(x, allowed_matrix(B, H, L, S, bool_part(mask), causal));
  return at::matmul(w, f64(v));
}

at::Tensor feature_map(const ops::FeatureMap& fm, const at::Tensor& x_in) {
  auto x = f64(x_in);
  switch (fm.kind()) {
    case FeatureMapKind::Elu: return at::where(x.gt(0), x + 1.0, x.exp());
    case FeatureMapKind::Relu: return at::where(x.gt(0), x, at::zeros_like(x));
    case FeatureMapKind::CosRelu: break;  // not a FeatureMap (cosformer_attention)
    case FeatureMapKind::Favor: {
      const auto& w = fm.projection();  // [m, d] float64
      const double d = static_cast<double>(w.size(1)), m = static_cast<double>(w.size(0));
      auto xs = x / std::pow(d, 0.25);
      auto sq = (xs * xs).sum(-1, /*keepdim=*/true);
      return (at::matmul(xs, w.transpose(0, 1)) - sq / 2.0).exp() / std::sqrt(m);
    }
    case FeatureMapKind::T2r:
    case FeatureMapKind::Hedgehog: {
      // z[..., h, l, m] = Σ_d x[..., h, l, d] · W[h, m, d] + b[h, m], as products summed (no matmul)
      const auto w = f64(fm.projection()), b = f64(fm.bias());
      auto z = (x.unsqueeze(-2) * w.unsqueeze(-3)).sum(-1) + b.unsqueeze(-2);
      if (fm.kind() == FeatureMapKind::T2r) return at::where(z.gt(0), z, at::zeros_like(z));
      const auto softmax = [](const at::Tensor& y) {
        auto e = (y - std::get<0>(y.max(-1, /*keepdim=*/true))).exp();
        return e / e.sum(-1, /*keepdim=*/true);
      };
      return at::cat({softmax(z), softmax(-z)}, -1);
    }
  }
  return x;
}

at::Tensor linear_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const ops::FeatureMap& fm, bool causal,
                            const c10::optional<at::Tensor>& key_padding_mask,
                            const c10::optional<at::Tensor>& mask) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
  auto w = at::matmul(feature_map(fm, q), feature_map(fm, k).transpose(-2, -1));
  auto allowed = allowed_matrix(B, H, L, S, bool_part(mask), causal, key_padding_mask);
  return weighted_average(w * allowed.to(at::kDouble), v, /*clamp=*/false);
}

at::Tensor cosformer_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal, const c10::optional<at::Tensor>& key_padding_mask,
                               const c10::optional<at::Tensor>& mask) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
  const double M = static_cast<double>(std::max<int64_t>({L, S, 1}));
  auto dot = at::matmul(at::relu(f64(q)), at::relu(f64(k)).transpose(-2, -1));
  auto cosw = at::empty({L, S}, at::TensorOptions().dtype(at::kDouble));
  auto c = cosw.accessor<double, 2>();
  for (int64_t i = 0; i < L; ++i) {
    const double pi_pos = static_cast<double>(i + 1 + (causal ? S - L : 0));
    for (int64_t j = 0; j < S; ++j)
      c[i][j] = std::cos(M_PI / 2.0 * (pi_pos - static_cast<double>(j + 1)) / M);
  }
  auto allowed = allowed_matrix(B, H, L, S, bool_part(mask), causal, key_padding_mask);
  return weighted_average(dot * cosw * allowed.to(at::kDouble), v, /*clamp=*/true);
}

at::Tensor dense_synthesizer_logits(const at::Tensor& x_in, const at::Tensor& w1,
                                    const at::Tensor& b1, const at::Tensor& w2,
                                    const at::Tensor& b2, int64_t S) {
  auto x = f64(x_in);
  const int64_t B = x.size(0), H = x.size(1), L = x.size(2);
  auto out = at::empty({B, H, L, S}, x.options());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        auto hidden = at::relu(at::mv(f64(w1[h]).t(), x[b][h][i]) + f64(b1[h]));
        out[b][h][i] = (at::mv(f64(w2[h]).t(), hidden) + f64(b2[h])).narrow(0, 0, S);
      }
  return out;
}

at::Tensor factorized_dense_synthesizer_logits(const at::Tensor& x_in, const at::Tensor& wa,
                                               const at::Tensor& wb, int64_t S) {
  auto x = f64(x_in);
  const int64_t B = x.size(0), H = x.size(1), L = x.size(2), nb = wb.size(2);
  auto out = at::empty({B, H, L, S}, x.options());
  auto o = out.accessor<double, 4>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        auto A = at::relu(at::mv(f64(wa[h]).t(), x[b][h][i]));
        auto Bv = at::relu(at::mv(f64(wb[h]).t(), x[b][h][i]));
        auto a_acc = A.accessor<double, 1>();
        auto b_acc = Bv.accessor<double, 1>();
        for (int64_t t = 0; t < S; ++t) o[b][h][i][t] = a_acc[t / nb] * b_acc[t % nb];
      }
  return out;
}

at::Tensor factorized_random_synthesizer_logits(const at::Tensor& r1, const at::Tensor& r2,
                                                int64_t L, int64_t S) {
  const int64_t H = r1.size(0), kdim = r1.size(2);
  auto out = at::zeros({1, H, L, S}, at::TensorOptions().dtype(at::kDouble));
  auto o = out.accessor<double, 4>();
  auto a = f64(r1).contiguous();
  auto b = f64(r2).contiguous();
  auto aa = a.accessor<double, 3>();
  auto ba = b.accessor<double, 3>();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j)
        for (int64_t t = 0; t < kdim; ++t) o[0][h][i][j] += aa[h][i][t] * ba[h][j][t];
  return out;
}

at::Tensor mix_logits(const std::vector<at::Tensor>& logits, const at::Tensor& mixing) {
  auto m = f64(mixing);
  auto e = (m - m.max()).exp();
  auto alpha = e / e.sum();
  at::Tensor out = f64(logits[0]) * alpha[0].item<double>();
  for (size_t i = 1; i < logits.size(); ++i)
    out = out + f64(logits[i]) * alpha[static_cast<int64_t>(i)].item<double>();
  return out;
}

at::Tensor talking_heads_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& pre_mix, const at::Tensor& post_mix,
                                   const c10::optional<at::Tensor>& mask, bool causal,
                                   c10::optional<double> scale) {
  const int64_t B = q.size(0), Hk = q.size(1), L = q.size(2), S = k.size(2);
  const int64_t Hm = pre_mix.size(1), Hv = v.size(1);
  const double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  auto dots = at::matmul(f64(q), f64(k).transpose(-2, -1)) * s;  // [B, Hk, L, S]
  auto pre = f64(pre_mix), post = f64(post_mix);
  auto logits = at::zeros({B, Hm, L, S}, dots.options());
  for (int64_t h = 0; h < Hm; ++h)
    for (int64_t g = 0; g < Hk; ++g) logits.select(1, h).add_(dots.select(1, g) * pre[g][h]);
  if (mask.has_value() && mask->defined() && mask->scalar_type() != at::kBool)
    logits = logits + f64(*mask);
  auto w = softmax_weights(logits, allowed_matrix(B, Hm, L, S, bool_part(mask), causal));
  auto out = at::zeros({B, Hv, L, v.size(3)}, dots.options());
  for (int64_t o = 0; o < Hv; ++o) {
    auto mixed = at::zeros({B, L, S}, dots.options());
    for (int64_t h = 0; h < Hm; ++h) mixed.add_(w.select(1, h) * post[h][o]);
    out.select(1, o).copy_(at::matmul(mixed, f64(v).select(1, o)));
  }
  return out;
}

}  // namespace attnkit::reference
