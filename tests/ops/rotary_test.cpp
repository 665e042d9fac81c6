// Rotary positions (ops/rotary.h) against float64 references written out here with plain loops:
// the inverse frequencies of every scaling kind, the cos/sin tables, the half-split rotation, and
// rotary linear attention / cosFormer as explicit L×L sums; gradients by finite differences; the
// config.json parser (both styles, bad values, mutated inputs). transformers itself is the peer of
// tests/python/test_rotary_hf.py.
#include "attnkit/error.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/rms_norm.h"
#include "attnkit/ops/rotary.h"
#include "support/gradcheck.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace attnkit {
namespace rotary_test {

using ops::RotaryConfig;
using ops::RotaryScaling;

// ---- references (float64, loops) ----

// transformers' formulas per kind, in double precision.
std::vector<double> reference_inv_freq(const RotaryConfig& c, int64_t seq_len = -1) {
  const int64_t dim = c.dim(), count = (dim + 1) / 2;
  double base = c.theta;
  if (c.scaling == RotaryScaling::Dynamic && seq_len > 0) {
    const double L = std::max<double>(seq_len, c.max_position_embeddings);
    const double f = *c.factor;
    base = c.theta * std::pow(f * L / c.max_position_embeddings - (f - 1), double(dim) / (dim - 2));
  }
  std::vector<double> out(count);
  for (int64_t i = 0; i < count; ++i) out[i] = 1.0 / std::pow(base, 2.0 * i / dim);
  switch (c.scaling) {
    case RotaryScaling::None:
    case RotaryScaling::Dynamic: break;
    case RotaryScaling::Linear:
      for (auto& x : out) x /= *c.factor;
      break;
    case RotaryScaling::Llama3: {
      const double f = *c.factor, old = c.original_max_position_embeddings;
      for (auto& x : out) {
        const double wavelen = 2 * M_PI / x;
        if (wavelen > old / c.low_freq_factor) {
          x /= f;
        } else if (wavelen >= old / c.high_freq_factor) {
          const double s = (old / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
          x = (1 - s) * x / f + s * x;
        }
      }
      break;
    }
    case RotaryScaling::Yarn: {
      const double f = *c.factor, orig = c.original_max_position_embeddings;
      auto corr = [&](double rot) { return dim * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(c.theta)); };
      double lo = std::floor(corr(c.beta_fast.value_or(32))), hi = std::ceil(corr(c.beta_slow.value_or(1)));
      lo = std::max(lo, 0.0);
      hi = std::min(hi, double(dim - 1));
      if (lo == hi) hi += 0.001;
      for (int64_t i = 0; i < count; ++i) {
        const double ramp = std::min(1.0, std::max(0.0, (i - lo) / (hi - lo)));
        const double extrapolation = out[i], interpolation = out[i] / f;
        out[i] = interpolation * ramp + extrapolation * (1 - ramp);
      }
      break;
    }
    case RotaryScaling::Longrope: {
      const auto& ext = seq_len > c.original_max_position_embeddings ? c.long_factor : c.short_factor;
      for (int64_t i = 0; i < count; ++i) out[i] /= ext[i];
      break;
    }
  }
  return out;
}

RotaryConfig config_of(RotaryScaling kind, int64_t head_dim = 16, int64_t rotary_dim = 0) {
  RotaryConfig c;
  c.head_dim = head_dim;
  c.rotary_dim = rotary_dim;
  c.theta = 10000.0;
  c.scaling = kind;
  c.max_position_embeddings = 64;
  switch (kind) {
    case RotaryScaling::None: break;
    case RotaryScaling::Linear: c.factor = 2.5; break;
    case RotaryScaling::Dynamic: c.factor = 3.0; break;
    case RotaryScaling::Llama3:
      c.theta = 500000.0;
      c.factor = 8.0;
      c.low_freq_factor = 1.0;
      c.high_freq_factor = 4.0;
      c.original_max_position_embeddings = 8192;
      break;
    case RotaryScaling::Yarn:
      c.factor = 4.0;
      c.original_max_position_embeddings = 32;
      break;
    case RotaryScaling::Longrope: {
      c.original_max_position_embeddings = 16;
      for (int64_t i = 0; i < c.num_frequencies(); ++i) {
        c.short_factor.push_back(1.0 + 0.05 * i);
        c.long_factor.push_back(1.0 + 0.7 * i);
      }
      break;
    }
  }
  return c;
}

const std::vector<RotaryScaling> kAllKinds = {RotaryScaling::None, RotaryScaling::Linear,
                                              RotaryScaling::Dynamic, RotaryScaling::Llama3,
                                              RotaryScaling::Yarn, RotaryScaling::Longrope};

double reference_attention_scaling(const RotaryConfig& c) {
  if (c.scaling == RotaryScaling::Yarn) return 0.1 * std::log(*c.factor) + 1.0;
  if (c.scaling == RotaryScaling::Longrope) {
    const double f = double(c.max_position_embeddings) / c.original_max_position_embeddings;
    return f <= 1 ? 1.0 : std::sqrt(1 + std::log(f) / std::log(double(c.original_max_position_embeddings)));
  }
  return 1.0;
}

// out = x·cos + rotate_half(x)·sin on the first w dims, loops; x [B, H, n, d] double.
at::Tensor reference_rotate(const at::Tensor& x_in, const ops::RotaryTables& t) {
  auto x = x_in.to(torch::kDouble).contiguous();
  auto cos = t.cos.to(torch::kDouble), sin = t.sin.to(torch::kDouble);
  auto out = x.clone();
  const int64_t B = x.size(0), H = x.size(1), n = x.size(2), w = cos.size(2), half = w / 2;
  auto X = x.accessor<double, 4>();
  auto O = out.accessor<double, 4>();
  auto C = cos.accessor<double, 3>();
  auto S = sin.accessor<double, 3>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t tb = cos.size(0) == 1 ? 0 : b;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < half; ++c) {
          const double x1 = X[b][h][i][c], x2 = X[b][h][i][c + half];
          O[b][h][i][c] = x1 * C[tb][i][c] - x2 * S[tb][i][c];
          O[b][h][i][c + half] = x2 * C[tb][i][c + half] + x1 * S[tb][i][c + half];
        }
  }
  return out;
}

double feature(double x, bool elu) { return elu ? (x > 0 ? x + 1 : std::exp(x)) : std::max(x, 0.0); }

// The L×L matrices of RoFormer §3.4 written out: num_ij = (R_i φq_i)·(R_j φk_j) w_ij,
// den_ij = φq_i·φk_j w_ij, w_ij = 1 (linear) or cos(π/2 (i − j)/n) (cosFormer, φ = ReLU).
at::Tensor reference_rotary_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const ops::RotaryTables& tables, bool causal, int kind /*0 elu, 1 relu, 2 cosformer*/) {
  auto fq = q.to(torch::kDouble).clone(), fk = k.to(torch::kDouble).clone();
  auto vd = v.to(torch::kDouble).contiguous();
  const int64_t B = q.size(0), H = q.size(1), n = q.size(2), d = q.size(3), dv = v.size(3);
  {
    auto Q = fq.accessor<double, 4>(), K = fk.accessor<double, 4>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < d; ++c) {
            Q[b][h][i][c] = feature(Q[b][h][i][c], kind == 0);
            K[b][h][i][c] = feature(K[b][h][i][c], kind == 0);
          }
  }
  auto rq = reference_rotate(fq, tables), rk = reference_rotate(fk, tables);
  auto out = torch::zeros({B, H, n, dv}, torch::kDouble);
  auto Q = fq.accessor<double, 4>(), K = fk.accessor<double, 4>(), RQ = rq.accessor<double, 4>(),
       RK = rk.accessor<double, 4>(), V = vd.accessor<double, 4>(), O = out.accessor<double, 4>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> num(dv, 0.0);
        double den = 0;
        for (int64_t j = 0; j < n; ++j) {
          if (causal && j > i) continue;
          const double w = kind == 2 ? std::cos(M_PI / 2 * double(i - j) / n) : 1.0;
          double s_num = 0, s_den = 0;
          for (int64_t c = 0; c < d; ++c) {
            s_num += RQ[b][h][i][c] * RK[b][h][j][c];
            s_den += Q[b][h][i][c] * K[b][h][j][c];
          }
          for (int64_t e = 0; e < dv; ++e) num[e] += s_num * w * V[b][h][j][e];
          den += s_den * w;
        }
        den = kind == 2 ? std::max(den, 1e-6) : den + 1e-6;
        for (int64_t e = 0; e < dv; ++e) O[b][h][i][e] = num[e] / den;
      }
  return out;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- frequencies and tables ----

TEST(RotaryTables, InverseFrequenciesOfEveryKindMatchTheFormulas) {
  for (auto kind : kAllKinds) {
    for (int64_t rotary_dim : {0, 12, 7}) {
      if (kind == RotaryScaling::Yarn && rotary_dim == 7) continue;  // yarn needs an even dim
      auto c = config_of(kind, 16, rotary_dim);
      SCOPED_TRACE(ops::to_string(kind) + " rotary_dim " + std::to_string(rotary_dim));
      for (int64_t seq_len : {-1, 10, 100}) {
        auto f = seq_len < 0 ? ops::rotary_frequencies(c) : ops::rotary_frequencies(c, seq_len);
        auto want = reference_inv_freq(c, seq_len);
        ASSERT_EQ(f.inv_freq.scalar_type(), torch::kFloat);
        ASSERT_EQ(f.inv_freq.numel(), static_cast<int64_t>(want.size()));
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_NEAR(f.inv_freq[i].item<double>(), want[i], 2e-6 * want[i]) << "i=" << i << " seq " << seq_len;
        EXPECT_NEAR(f.attention_scaling, reference_attention_scaling(c), 1e-15);
      }
    }
  }
}

TEST(RotaryTables, LlamaThreeHasAllThreeBandsAndYarnBothRampEnds) {
  // The test configs must reach every branch of the formulas, or the comparison above proves little.
  auto llama3 = config_of(RotaryScaling::Llama3, 128);
  auto f = ops::rotary_frequencies(llama3).inv_freq;
  auto base = ops::rotary_frequencies(config_of(RotaryScaling::None, 128)).inv_freq;
  (void)base;
  int low = 0, medium = 0, high = 0;
  for (int64_t i = 0; i < f.numel(); ++i) {
    const double plain = 1.0 / std::pow(500000.0, 2.0 * i / 128), got = f[i].item<double>();
    if (std::fabs(got - plain) < 1e-6 * plain) ++high;
    else if (std::fabs(got - plain / 8) < 1e-6 * plain) ++low;
    else ++medium;
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
  EXPECT_GT(high, 0);
  auto yarn = config_of(RotaryScaling::Yarn, 64);
  auto fy = ops::rotary_frequencies(yarn).inv_freq;
  EXPECT_NEAR(fy[0].item<double>(), 1.0, 1e-7);                                   // extrapolated
  const double last = 1.0 / std::pow(10000.0, 62.0 / 64) / 4.0;                   // interpolated
  EXPECT_NEAR(fy[31].item<double>(), last, 1e-6 * last);
}

TEST(RotaryTables, CosSinAreFloat32ProductsOfPositionAndFrequency) {
  for (auto kind : kAllKinds) {
    auto c = config_of(kind, 16, 12);
    SCOPED_TRACE(ops::to_string(kind));
    auto f = ops::rotary_frequencies(c);
    auto positions = torch::tensor({0, 1, 2, 7, 300, 4095, 20, 3}, torch::kLong).view({2, 4});
    auto t = ops::rotary_tables(f, positions);
    ASSERT_EQ(t.cos.sizes(), (at::IntArrayRef{2, 4, 12}));
    ASSERT_EQ(t.cos.scalar_type(), torch::kFloat);
    auto inv = f.inv_freq.contiguous();
    const float* w = inv.data_ptr<float>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t pos = positions[b][i].item<int64_t>();
        for (int64_t col = 0; col < 12; ++col) {
          const float angle_f = static_cast<float>(pos) * w[col % 6];  // float32, as transformers
          const double want_cos = std::cos(double(angle_f)) * f.attention_scaling;
          const double want_sin = std::sin(double(angle_f)) * f.attention_scaling;
          EXPECT_NEAR(t.cos[b][i][col].item<double>(), want_cos, 3e-6) << pos << " " << col;
          EXPECT_NEAR(t.sin[b][i][col].item<double>(), want_sin, 3e-6) << pos << " " << col;
          if (pos <= 20) {  // and the angle in double from the double frequency
            const double angle = pos * reference_inv_freq(c)[col % 6];
            EXPECT_NEAR(t.cos[b][i][col].item<double>(), std::cos(angle) * f.attention_scaling, 2e-5);
          }
        }
      }
  }
}

TEST(RotaryTables, DynamicFollowsTransformersCacheRule) {
  auto c = config_of(RotaryScaling::Dynamic);  // max_position_embeddings 64
  ops::RotaryEmbedding embedding(c);
  auto original = ops::rotary_frequencies(c).inv_freq;
  auto positions = [](int64_t first, int64_t n) { return torch::arange(first, first + n, torch::kLong).view({1, n}); };
  embedding.tables(positions(0, 10));
  EXPECT_TRUE(torch::equal(embedding.frequencies().inv_freq, original));
  embedding.tables(positions(0, 100));  // growth to 100
  auto grown = ops::rotary_frequencies(c, 100).inv_freq;
  EXPECT_TRUE(torch::equal(embedding.frequencies().inv_freq, grown));
  EXPECT_GT(max_abs_diff(grown, original), 1e-4);
  embedding.tables(positions(0, 80));  // 64 < 80 < 100: keeps the grown frequencies
  EXPECT_TRUE(torch::equal(embedding.frequencies().inv_freq, grown));
  embedding.tables(positions(60, 4));  // seq_len 64, not < 64: still grown
  EXPECT_TRUE(torch::equal(embedding.frequencies().inv_freq, grown));
  embedding.tables(positions(0, 20));  // below the original length: reset
  EXPECT_TRUE(torch::equal(embedding.frequencies().inv_freq, original));
  // The tables of a call are built from the frequencies after its update.
  auto t = embedding.tables(positions(0, 120));
  auto want = ops::rotary_tables(ops::rotary_frequencies(c, 120), positions(0, 120));
  EXPECT_TRUE(torch::equal(t.cos, want.cos));
}

TEST(RotaryTables, LongropePicksShortOrLongFactorsPerCall) {
  auto c = config_of(RotaryScaling::Longrope);  // original 16
  ops::RotaryEmbedding embedding(c);
  auto short_f = ops::rotary_frequencies(c).inv_freq, long_f = ops::rotary_frequencies(c, 17).inv_freq;
  EXPECT_GT(max_abs_diff(short_f, long_f), 1e-3);
  embedding.tables(torch::arange(16, torch::kLong).view({1, 16}));
  EXPECT_TRUE(torch::equal(embedding.frequencies().inv_freq, short_f));
  embedding.tables(torch::arange(17, torch::kLong).view({1, 17}));
  EXPECT_TRUE(torch::equal(embedding.frequencies().inv_freq, long_f));
  embedding.tables(torch::arange(3, torch::kLong).view({1, 3}));
  EXPECT_TRUE(torch::equal(embedding.frequencies().inv_freq, short_f));
}

// ---- the rotation ----

TEST(RotaryApply, HalfSplitRotationMatchesLoopsFloat32AndFloat64) {
  torch::manual_seed(11);
  for (auto dtype : {torch::kFloat, torch::kDouble})
    for (int64_t rotary_dim : {0, 4, 5}) {  // full, partial, odd (rotates 6 of 8)
      auto c = config_of(RotaryScaling::Llama3, 8, rotary_dim);
      auto x = torch::randn({2, 3, 5, 8}, dtype);
      auto positions = torch::tensor({3, 4, 5, 6, 7, 0, 1, 2, 9, 1000}, torch::kLong).view({2, 5});
      ops::RotaryEmbedding embedding(c);
      auto tables = embedding.tables(positions);
      auto out = ops::apply_rotary(x, tables);
      ASSERT_EQ(out.scalar_type(), dtype);
      auto want = reference_rotate(x, tables);
      EXPECT_LT(max_abs_diff(out, want), dtype == torch::kDouble ? 1e-12 : 1e-5) << rotary_dim;
      // Dims past the rotated width pass through unchanged.
      const int64_t w = c.rotated_width();
      if (w < 8) {
        EXPECT_TRUE(torch::equal(out.narrow(3, w, 8 - w), x.narrow(3, w, 8 - w)));
      }
      // The config overload builds the same tables.
      EXPECT_TRUE(torch::equal(ops::apply_rotary(x, positions, c), out));
    }
}

TEST(RotaryApply, DotProductsDependOnRelativePositionOnly) {
  torch::manual_seed(12);
  auto c = config_of(RotaryScaling::None, 16);
  auto q = torch::randn({1, 1, 1, 16}, torch::kDouble), k = torch::randn({1, 1, 1, 16}, torch::kDouble);
  auto dot = [&](int64_t m, int64_t n) {
    auto rq = ops::apply_rotary(q, torch::tensor({m}, torch::kLong).view({1, 1}), c);
    auto rk = ops::apply_rotary(k, torch::tensor({n}, torch::kLong).view({1, 1}), c);
    return (rq * rk).sum().item<double>();
  };
  EXPECT_NEAR(dot(3, 1), dot(10, 8), 1e-5);
  EXPECT_NEAR(dot(0, 5), dot(20, 25), 1e-5);
  EXPECT_GT(std::fabs(dot(3, 1) - dot(1, 3)), 1e-3);  // not symmetric: positions matter
  EXPECT_NEAR(dot(4, 4), (q * k).sum().item<double>(), 1e-6);
}

TEST(RotaryApply, GradientsByFiniteDifferences) {
  torch::manual_seed(13);
  auto c = config_of(RotaryScaling::Yarn, 8, 6);
  auto x = torch::randn({2, 2, 4, 8}, torch::kDouble).requires_grad_();
  auto tables = ops::RotaryEmbedding(c).tables(torch::arange(8, torch::kLong).view({2, 4}));
  auto r = testing::gradcheck([&](const std::vector<at::Tensor>& in) { return ops::apply_rotary(in[0], tables); }, {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(RotaryApply, BadInputsAreOneLineErrors) {
  auto c = config_of(RotaryScaling::None, 8);
  auto x = torch::randn({1, 2, 3, 8});
  auto positions = torch::arange(3, torch::kLong).view({1, 3});
  auto tables = ops::RotaryEmbedding(c).tables(positions);
  std::vector<std::string> errors = {
      error_of([&] { ops::apply_rotary(torch::randn({2, 3, 8}), tables); }),
      error_of([&] { ops::apply_rotary(x.to(torch::kLong), tables); }),
      error_of([&] { ops::apply_rotary(torch::randn({1, 2, 4, 8}), tables); }),
      error_of([&] { ops::apply_rotary(torch::randn({1, 2, 3, 6}), tables); }),
      error_of([&] { ops::apply_rotary(torch::randn({3, 2, 3, 8}), ops::rotary_tables(ops::rotary_frequencies(c), torch::zeros({2, 3}, torch::kLong))); }),
      error_of([&] { ops::apply_rotary(x, ops::RotaryTables{}); }),
      error_of([&] { ops::apply_rotary(x, torch::tensor({0, -1, 2}).view({1, 3}), c); }),
      error_of([&] { ops::apply_rotary(x, torch::zeros({1, 3}), c); }),
      error_of([&] { ops::apply_rotary(x, torch::zeros({1, 1, 3}, torch::kLong), c); }),
      error_of([&] { ops::apply_rotary(torch::randn({1, 2, 3, 10}), positions, c); }),
  };
  for (const auto& e : errors) {
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// ---- config.json ----

TEST(RotaryConfig, BothConfigStylesGiveTheSameConfig) {
  auto legacy = nlohmann::json::parse(R"({"hidden_size": 64, "num_attention_heads": 4,
      "max_position_embeddings": 2048, "rope_theta": 500000.0,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  auto v5 = nlohmann::json::parse(R"({"head_dim": 16, "max_position_embeddings": 2048,
      "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192}})");
  for (const auto& j : {legacy, v5}) {
    auto c = ops::rotary_config_from_huggingface(j);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.dim(), 16);
    EXPECT_EQ(c.scaling, RotaryScaling::Llama3);
    EXPECT_EQ(c.theta, 500000.0);
    EXPECT_EQ(*c.factor, 8.0);
    EXPECT_EQ(c.original_max_position_embeddings, 8192);
    EXPECT_EQ(c.high_freq_factor, 4.0);
  }
}

TEST(RotaryConfig, DefaultsPartialRotaryLegacyTypeAndNestedLayerTypes) {
  auto plain = ops::rotary_config_from_huggingface(nlohmann::json::parse(
      R"({"hidden_size": 576, "num_attention_heads": 9, "rope_theta": 100000, "rope_scaling": null})"));
  EXPECT_EQ(plain.scaling, RotaryScaling::None);
  EXPECT_EQ(plain.head_dim, 64);
  EXPECT_EQ(plain.theta, 100000.0);
  auto none = ops::rotary_config_from_huggingface(nlohmann::json::parse(R"({"head_dim": 8})"), "", 1e6);
  EXPECT_EQ(none.theta, 1e6);
  // Phi-3 style: partial rotary, legacy "type", top-level original_max_position_embeddings wins,
  // factor absent (max / original).
  auto phi = ops::rotary_config_from_huggingface(nlohmann::json::parse(R"({"hidden_size": 96,
      "num_attention_heads": 1, "partial_rotary_factor": 0.4, "max_position_embeddings": 131072,
      "original_max_position_embeddings": 4096,
      "rope_scaling": {"type": "longrope", "original_max_position_embeddings": 99,
        "short_factor": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],
        "long_factor": [2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2]}})"));
  EXPECT_EQ(phi.dim(), 38);  // int(96 * 0.4) = int(38.400000000000006)
  EXPECT_EQ(phi.rotated_width(), 38);
  EXPECT_EQ(phi.original_max_position_embeddings, 4096);
  EXPECT_FALSE(phi.factor.has_value());
  EXPECT_NEAR(ops::rotary_frequencies(phi).attention_scaling,
              std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-15);
  // Gemma 3 style: rope_parameters per layer type.
  auto gemma = nlohmann::json::parse(R"({"head_dim": 256, "layer_types": ["sliding_attention", "full_attention"],
      "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                          "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}})");
  auto local = ops::rotary_config_from_huggingface(gemma, "sliding_attention");
  auto global = ops::rotary_config_from_huggingface(gemma, "full_attention");
  EXPECT_EQ(local.scaling, RotaryScaling::None);
  EXPECT_EQ(local.theta, 10000.0);
  EXPECT_EQ(global.scaling, RotaryScaling::Linear);
  EXPECT_EQ(global.theta, 1e6);
  EXPECT_THROW(ops::rotary_config_from_huggingface(gemma), Error);
  EXPECT_THROW(ops::rotary_config_from_huggingface(gemma, "chunked_attention"), Error);
}

TEST(RotaryConfig, BadValuesAreOneLineErrorsNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([1, 2])", "config.json"},
      {R"({"rope_theta": 10000})", "head_dim"},
      {R"({"head_dim": "64"})", "head_dim"},
      {R"({"head_dim": 0})", "head_dim"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "su"}})", "rope_type"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": 3}})", "rope_type"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "linear"}})", "factor"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "linear", "factor": "2"}})", "factor"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "linear", "factor": -2}})", "factor"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "dynamic", "factor": 2}})", "max_position_embeddings"},
      {R"({"head_dim": 64, "max_position_embeddings": 10, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1}})", "high_freq_factor"},
      {R"({"head_dim": 64, "max_position_embeddings": 10, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4}})", "low_freq_factor"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4}})", "original_max_position_embeddings"},
      {R"({"head_dim": 64, "max_position_embeddings": 10, "rope_scaling": {"rope_type": "yarn", "factor": 4, "truncate": 1}})", "truncate"},
      {R"({"head_dim": 8, "max_position_embeddings": 10, "rope_scaling": {"rope_type": "longrope", "factor": 2, "short_factor": [1, 1], "long_factor": [1, 1, 1, 1]}})", "short_factor"},
      {R"({"head_dim": 8, "max_position_embeddings": 10, "rope_scaling": {"rope_type": "longrope", "factor": 2, "short_factor": [1, 1, "x", 1], "long_factor": [1, 1, 1, 1]}})", "short_factor[2]"},
      {R"({"head_dim": 7, "rope_theta": 10000})", "rotates 8 dims"},
      {R"({"head_dim": 64, "partial_rotary_factor": 1.5})", "partial_rotary_factor"},
      {R"({"head_dim": 64, "rope_theta": 0})", "rope_theta"},
      {R"({"head_dim": 64, "rope_parameters": [1]})", "rope_parameters"},
  };
  for (const auto& [text, key] : cases) {
    const auto e = error_of([&] { ops::rotary_config_from_huggingface(nlohmann::json::parse(text)); });
    EXPECT_NE(e.find(key), std::string::npos) << text << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(RotaryConfig, MutatedConfigsParseOrFailWithAnError) {
  // Fuzz-style: every value of valid configs replaced by values of other JSON types; each parse
  // either succeeds with a config check_rotary_config accepts or throws attnkit::Error.
  const std::vector<nlohmann::json> seeds = {
      nlohmann::json::parse(R"({"head_dim": 16, "max_position_embeddings": 64, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000, "factor": 4, "beta_fast": 32, "beta_slow": 1, "mscale": 1, "mscale_all_dim": 1, "truncate": false, "original_max_position_embeddings": 32}})"),
      nlohmann::json::parse(R"({"hidden_size": 32, "num_attention_heads": 2, "max_position_embeddings": 64, "partial_rotary_factor": 0.5, "rope_scaling": {"type": "longrope", "short_factor": [1, 1, 1, 1], "long_factor": [2, 2, 2, 2]}})"),
      nlohmann::json::parse(R"({"head_dim": 16, "max_position_embeddings": 64, "rope_theta": 500000, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 32}})"),
      nlohmann::json::parse(R"({"head_dim": 16, "max_position_embeddings": 64, "rope_scaling": {"rope_type": "dynamic", "factor": 2}})"),
  };
  const std::vector<nlohmann::json> replacements = {
      nullptr, true, -1, 0, 1, 3, 2.5, -0.5, 1e308, "x", "default", nlohmann::json::array(),
      nlohmann::json::array({1, 2}), nlohmann::json::object(), nlohmann::json::object({{"a", 1}})};
  int parsed = 0, rejected = 0;
  for (const auto& seed : seeds) {
    std::vector<nlohmann::json::json_pointer> pointers;
    const auto flat = seed.flatten();
    for (const auto& item : flat.items()) {
      const std::string path = item.key();
      pointers.emplace_back(path);
      // Also the enclosing objects/arrays.
      auto parent = nlohmann::json::json_pointer(path).parent_pointer();
      if (!parent.empty()) pointers.push_back(parent);
    }
    for (const auto& pointer : pointers)
      for (const auto& r : replacements) {
        auto j = seed;
        j[pointer] = r;
        try {
          auto c = ops::rotary_config_from_huggingface(j);
          ops::check_rotary_config(c);
          auto f = ops::rotary_frequencies(c, 100);
          EXPECT_TRUE(torch::isfinite(f.inv_freq).all().item<bool>()) << j.dump();
          ++parsed;
        } catch (const Error& e) {
          EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
          ++rejected;
        }
      }
  }
  EXPECT_GT(parsed, 10);
  EXPECT_GT(rejected, 50);
}

// ---- rotary linear attention ----

TEST(RotaryLinear, MatchesTheExplicitMatrixFullAndCausal) {
  torch::manual_seed(21);
  auto c = config_of(RotaryScaling::None, 8);
  const int64_t B = 2, H = 2, n = 9;
  auto positions = torch::stack({torch::arange(n, torch::kLong), torch::arange(n, torch::kLong) + 5});
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    auto q = torch::randn({B, H, n, 8}, dtype), k = torch::randn({B, H, n, 8}, dtype);
    auto v = torch::randn({B, H, n, 3}, dtype);
    auto tables = ops::RotaryEmbedding(c).tables(positions);
    const double tol = dtype == torch::kDouble ? 1e-10 : 1e-4;
    for (bool causal : {false, true}) {
      for (int kind : {0, 1}) {
        auto fm = kind == 0 ? ops::FeatureMap::elu() : ops::FeatureMap::relu();
        auto out = ops::rotary_linear_attention(q, k, v, fm, tables, causal);
        ASSERT_EQ(out.scalar_type(), dtype);
        auto want = reference_rotary_attention(q, k, v, tables, causal, kind);
        EXPECT_LT(max_abs_diff(out, want), tol * (1 + want.abs().max().item<double>()))
            << fm.name() << " causal " << causal;
        if (kind == 0) {
          EXPECT_TRUE(torch::allclose(ops::rotary_linear_attention(q, k, v, fm, positions, c, causal), out));
        }
      }
      auto out = ops::rotary_cosformer_attention(q, k, v, tables, causal);
      auto want = reference_rotary_attention(q, k, v, tables, causal, 2);
      EXPECT_LT(max_abs_diff(out, want), tol * (1 + want.abs().max().item<double>())) << "cosformer causal " << causal;
    }
  }
}

TEST(RotaryLinear, FavorFeaturesAndTablesSharedAcrossTheBatch) {
  // FAVOR's features are positive, so the ReLU reference applied to φ(q), φ(k) computes the same
  // sums; its 12 features take tables up to 12 wide (here 8: partial). Tables of batch 1 serve a
  // batch of 3.
  torch::manual_seed(25);
  auto fm = ops::FeatureMap::favor(8, 12, 3);
  auto c = config_of(RotaryScaling::None, 12, 8);
  auto q = torch::randn({3, 2, 10, 8}, torch::kDouble), k = torch::randn({3, 2, 10, 8}, torch::kDouble);
  auto v = torch::randn({3, 2, 10, 4}, torch::kDouble);
  auto tables = ops::RotaryEmbedding(c).tables(torch::arange(10, torch::kLong).view({1, 10}) + 2);
  for (bool causal : {false, true}) {
    auto out = ops::rotary_linear_attention(q, k, v, fm, tables, causal);
    auto want = reference_rotary_attention(fm.apply(q), fm.apply(k), v, tables, causal, 1);
    EXPECT_LT(max_abs_diff(out, want), 1e-10 * (1 + want.abs().max().item<double>())) << "causal " << causal;
    auto row = ops::rotary_linear_attention(q.narrow(0, 2, 1), k.narrow(0, 2, 1), v.narrow(0, 2, 1), fm, tables, causal);
    EXPECT_LT(max_abs_diff(out.narrow(0, 2, 1), row), 1e-12);
  }
}

TEST(RotaryLinear, RotationChangesOnlyTheNumerator) {
  // With every token at position 0 the rotation is the identity: plain linear attention.
  torch::manual_seed(22);
  auto c = config_of(RotaryScaling::None, 8);
  auto q = torch::randn({1, 2, 6, 8}, torch::kDouble), k = torch::randn({1, 2, 6, 8}, torch::kDouble);
  auto v = torch::randn({1, 2, 6, 4}, torch::kDouble);
  auto zero = torch::zeros({1, 6}, torch::kLong);
  for (bool causal : {false, true}) {
    auto plain = ops::linear_attention(q, k, v, ops::FeatureMap::elu(), causal);
    EXPECT_LT(max_abs_diff(ops::rotary_linear_attention(q, k, v, ops::FeatureMap::elu(), zero, c, causal), plain), 1e-12);
    // Shifting every position by the same amount changes nothing (relative positions), up to
    // the float32 tables.
    auto p1 = torch::arange(6, torch::kLong).view({1, 6});
    auto a = ops::rotary_linear_attention(q, k, v, ops::FeatureMap::elu(), p1, c, causal);
    auto b = ops::rotary_linear_attention(q, k, v, ops::FeatureMap::elu(), p1 + 11, c, causal);
    EXPECT_LT(max_abs_diff(a, b), 1e-4);
    EXPECT_GT(max_abs_diff(a, plain), 1e-3);
  }
}

TEST(RotaryLinear, StepsEqualTheParallelCausalForm) {
  torch::manual_seed(23);
  auto c = config_of(RotaryScaling::Llama3, 8, 6);
  const int64_t n = 70;  // crosses the causal numerator's 64-row chunk boundary
  auto q = torch::randn({2, 2, n, 8}, torch::kDouble), k = torch::randn({2, 2, n, 8}, torch::kDouble);
  auto v = torch::randn({2, 2, n, 5}, torch::kDouble);
  auto positions = torch::stack({torch::arange(n, torch::kLong), torch::arange(n, torch::kLong) + 3});
  ops::RotaryEmbedding embedding(c);
  auto tables = embedding.tables(positions);
  auto linear = ops::rotary_linear_attention(q, k, v, ops::FeatureMap::elu(), tables, true);
  auto cosformer = ops::rotary_cosformer_attention(q, k, v, tables, true);
  ops::RotaryLinearState s_lin, s_cos;
  for (int64_t t = 0; t < n; ++t) {
    ops::RotaryTables tt{tables.cos.narrow(1, t, 1), tables.sin.narrow(1, t, 1)};
    auto qt = q.narrow(2, t, 1), kt = k.narrow(2, t, 1), vt = v.narrow(2, t, 1);
    auto a = ops::rotary_linear_attention_step(s_lin, qt, kt, vt, ops::FeatureMap::elu(), tt);
    auto b = ops::rotary_cosformer_attention_step(s_cos, qt, kt, vt, tt, n);
    ASSERT_LT(max_abs_diff(a, linear.narrow(2, t, 1)), 1e-10) << "t=" << t;
    ASSERT_LT(max_abs_diff(b, cosformer.narrow(2, t, 1)), 1e-10) << "t=" << t;
  }
  EXPECT_EQ(s_lin.numerator.sizes(), (at::IntArrayRef{2, 2, 8, 5}));
  EXPECT_EQ(s_lin.denominator.sizes(), (at::IntArrayRef{2, 2, 8}));
  EXPECT_EQ(s_cos.numerator.sizes(), (at::IntArrayRef{2, 2, 16, 5}));
  EXPECT_EQ(s_lin.position, n);
  ops::RotaryTables tt{tables.cos.narrow(1, 0, 1), tables.sin.narrow(1, 0, 1)};
  EXPECT_THROW(ops::rotary_cosformer_attention_step(s_cos, q.narrow(2, 0, 1), k.narrow(2, 0, 1), v.narrow(2, 0, 1), tt, n), Error);
}

TEST(RotaryLinear, GradientsByFiniteDifferences) {
  torch::manual_seed(24);
  auto c = config_of(RotaryScaling::None, 4);
  auto q = torch::randn({1, 2, 5, 4}, torch::kDouble).requires_grad_();
  auto k = torch::randn({1, 2, 5, 4}, torch::kDouble).requires_grad_();
  auto v = torch::randn({1, 2, 5, 3}, torch::kDouble).requires_grad_();
  auto tables = ops::RotaryEmbedding(c).tables(torch::arange(5, torch::kLong).view({1, 5}));
  for (bool causal : {false, true}) {
    auto r = testing::gradcheck(
        [&](const std::vector<at::Tensor>& in) {
          return ops::rotary_linear_attention(in[0], in[1], in[2], ops::FeatureMap::elu(), tables, causal);
        },
        {q, k, v});
    EXPECT_TRUE(r.ok) << "linear causal " << causal << ": " << r.message;
    auto rc = testing::gradcheck(
        [&](const std::vector<at::Tensor>& in) {
          return ops::rotary_cosformer_attention(in[0].abs() + 0.1, in[1].abs() + 0.1, in[2], tables, causal);
        },
        {q, k, v});
    EXPECT_TRUE(rc.ok) << "cosformer causal " << causal << ": " << rc.message;
  }
  // Across the causal numerator's 64-row chunks.
  auto ql = torch::randn({1, 1, 67, 2}, torch::kDouble).requires_grad_();
  auto kl = torch::randn({1, 1, 67, 2}, torch::kDouble).requires_grad_();
  auto vl = torch::randn({1, 1, 67, 1}, torch::kDouble).requires_grad_();
  auto long_tables = ops::RotaryEmbedding(config_of(RotaryScaling::None, 2)).tables(torch::arange(67, torch::kLong).view({1, 67}));
  auto r = testing::gradcheck(
      [&](const std::vector<at::Tensor>& in) {
        return ops::rotary_linear_attention(in[0], in[1], in[2], ops::FeatureMap::elu(), long_tables, true);
      },
      {ql, kl, vl});
  EXPECT_TRUE(r.ok) << "linear causal n = 67: " << r.message;
}

TEST(RotaryLinear, BadInputsAreOneLineErrors) {
  auto c = config_of(RotaryScaling::None, 8);
  auto x = torch::randn({1, 2, 3, 8}), v = torch::randn({1, 2, 3, 2});
  auto tables = ops::RotaryEmbedding(c).tables(torch::arange(3, torch::kLong).view({1, 3}));
  auto wide = ops::RotaryEmbedding(config_of(RotaryScaling::None, 16)).tables(torch::arange(3, torch::kLong).view({1, 3}));
  ops::RotaryLinearState state;
  ops::RotaryTables one{tables.cos.narrow(1, 0, 1), tables.sin.narrow(1, 0, 1)};
  std::vector<std::string> errors = {
      error_of([&] { ops::rotary_linear_attention(x, torch::randn({1, 2, 4, 8}), torch::randn({1, 2, 4, 2}), ops::FeatureMap::elu(), tables, false); }),
      error_of([&] { ops::rotary_linear_attention(x, x, v, ops::FeatureMap::elu(), wide, false); }),
      error_of([&] { ops::rotary_cosformer_attention(x, x, v, wide, true); }),
      error_of([&] { ops::rotary_linear_attention_step(state, x, x, v, ops::FeatureMap::elu(), tables); }),
      error_of([&] { ops::rotary_cosformer_attention_step(state, x.narrow(2, 0, 1), x.narrow(2, 0, 1), v.narrow(2, 0, 1), one, 0); }),
  };
  ops::rotary_linear_attention_step(state, x.narrow(2, 0, 1), x.narrow(2, 0, 1), v.narrow(2, 0, 1), ops::FeatureMap::elu(), one);
  errors.push_back(error_of([&] { ops::rotary_linear_attention_step(state, x.narrow(2, 0, 1), x.narrow(2, 0, 1), torch::randn({1, 2, 1, 5}), ops::FeatureMap::elu(), one); }));
  for (const auto& e : errors) {
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// ---- the probe of tests/python/test_rotary_hf.py ----
// Input (JSON): {"rotary": [{"config": <config.json>, "layer_type": "", "calls": [{"positions":
// [[...]], "x": TENSOR}]}], "rms_norm": [{"kind": "llama"|"gemma", "eps": e, "x": TENSOR,
// "weight": TENSOR}]}, TENSOR = {"shape": [...], "data": [...], "dtype": "float32"|"float64"|
// "bfloat16"}. Output: per rotary case the initial frequencies and per call (one RotaryEmbedding
// per case, called in order) the frequencies after the call, cos, sin and apply_rotary(x); per
// RMSNorm case its output (as float64 values).

at::Tensor probe_tensor(const nlohmann::json& j) {
  auto shape = j.at("shape").get<std::vector<int64_t>>();
  auto data = j.at("data").get<std::vector<double>>();
  auto t = torch::tensor(data, torch::kDouble).view(shape);
  const auto dtype = j.at("dtype").get<std::string>();
  if (dtype == "float32") return t.to(torch::kFloat);
  if (dtype == "bfloat16") return t.to(torch::kBFloat16);
  return t;
}

std::vector<double> probe_values(const at::Tensor& t) {
  auto d = t.detach().to(torch::kDouble).contiguous().view({-1});
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

nlohmann::json rotary_probe(const nlohmann::json& input) {
  nlohmann::json out = {{"rotary", nlohmann::json::array()}, {"rms_norm", nlohmann::json::array()}};
  for (const auto& c : input.value("rotary", nlohmann::json::array())) {
    auto config = ops::rotary_config_from_huggingface(c.at("config"), c.value("layer_type", ""));
    auto init = ops::rotary_frequencies(config);
    nlohmann::json result = {{"init_inv_freq", probe_values(init.inv_freq)},
                             {"init_attention_scaling", init.attention_scaling},
                             {"rotated_width", config.rotated_width()},
                             {"calls", nlohmann::json::array()}};
    ops::RotaryEmbedding embedding(config);
    for (const auto& call : c.at("calls")) {
      auto rows = call.at("positions").get<std::vector<std::vector<int64_t>>>();
      std::vector<at::Tensor> stacked;
      for (const auto& r : rows) stacked.push_back(torch::tensor(r, torch::kLong));
      auto tables = embedding.tables(torch::stack(stacked));
      nlohmann::json r = {{"inv_freq", probe_values(embedding.frequencies().inv_freq)},
                          {"attention_scaling", embedding.frequencies().attention_scaling},
                          {"cos", probe_values(tables.cos)}, {"sin", probe_values(tables.sin)}};
      if (call.contains("x")) r["rotated"] = probe_values(ops::apply_rotary(probe_tensor(call.at("x")), tables));
      result["calls"].push_back(r);
    }
    out["rotary"].push_back(result);
  }
  for (const auto& c : input.value("rms_norm", nlohmann::json::array())) {
    const auto kind = c.at("kind").get<std::string>() == "gemma" ? ops::RmsNormKind::Gemma : ops::RmsNormKind::Llama;
    auto y = ops::rms_norm(probe_tensor(c.at("x")), probe_tensor(c.at("weight")), c.at("eps").get<double>(), kind);
    out["rms_norm"].push_back({{"out", probe_values(y)}, {"dtype", std::string(c10::toString(y.scalar_type()))}});
  }
  return out;
}

// With ATTNKIT_ROTARY_PROBE_IN/OUT set (by test_rotary_hf.py): reads the one, writes the other.
// Without: runs a small built-in input and checks the output's shape.
TEST(RotaryHfProbe, WritesOutputsForTheInputFile) {
  const char* in_path = std::getenv("ATTNKIT_ROTARY_PROBE_IN");
  const char* out_path = std::getenv("ATTNKIT_ROTARY_PROBE_OUT");
  if (in_path && out_path) {
    std::ifstream in(in_path);
    ASSERT_TRUE(in) << in_path;
    auto output = rotary_probe(nlohmann::json::parse(in));
    std::ofstream out(out_path);
    out << output.dump();
    ASSERT_TRUE(out.good()) << out_path;
    return;
  }
  auto input = nlohmann::json::parse(R"({"rotary": [{"config": {"head_dim": 4, "rope_theta": 100.0},
      "calls": [{"positions": [[0, 1, 2]], "x": {"shape": [1, 1, 3, 4], "dtype": "float64",
                 "data": [1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]}}]}],
      "rms_norm": [{"kind": "gemma", "eps": 0.0, "x": {"shape": [1, 2], "dtype": "float32", "data": [3, 4]},
                    "weight": {"shape": [2], "dtype": "float32", "data": [0, 1]}}]})");
  auto output = rotary_probe(input);
  const auto& call = output["rotary"][0]["calls"][0];
  ASSERT_EQ(call["cos"].size(), 12u);
  // x = e_0 at positions 0, 1, 2: rotated = (cos p, 0, sin p, 0) with inv_freq[0] = 1.
  const auto rotated = call["rotated"].get<std::vector<double>>();
  for (int p = 0; p < 3; ++p) {
    EXPECT_NEAR(rotated[4 * p], std::cos(double(p)), 1e-6);
    EXPECT_NEAR(rotated[4 * p + 2], std::sin(double(p)), 1e-6);
  }
  // RMS of (3, 4) is sqrt(12.5); Gemma multiplies by (1, 2).
  const auto y = output["rms_norm"][0]["out"].get<std::vector<double>>();
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 8 / std::sqrt(12.5), 1e-6);
}

}  // namespace rotary_test
}  // namespace attnkit
