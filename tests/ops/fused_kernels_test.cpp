// The fused kernels (flash softmax, fused feature-map attention) at sizes that straddle their tile and
// chunk boundaries, gradients against autograd through the float64 oracle, and long sequences.
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/error.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/reference.h"
#include "attnkit/ops/softmax_attention.h"
#include "attnkit/ops/variants.h"
#include "attnkit/runtime.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <functional>
#include <thread>

namespace attnkit {
namespace {

using AttentionFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&,
                                             const at::Tensor&, bool)>;

struct Kind {
  std::string name;
  AttentionFn op, oracle;
};

// A catalogue variant (ops/variants.h) as a function of q, k, v and causality: its case's
// parameters (if any) with the given q, k, v.
AttentionFn variant_fn(const std::string& kind, bool oracle,
                       const c10::optional<at::Tensor>& key_padding = c10::nullopt) {
  return [=](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
    const ops::VariantShape shape{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
    auto c = ops::make_variant_case(kind, shape, causal, 0, q.scalar_type(), key_padding);
    auto inputs = c.inputs;
    inputs[0] = q;
    inputs[1] = k;
    inputs[2] = v;
    return oracle ? c.reference(inputs) : c.op(inputs);
  };
}

// The catalogue's variants that run through a fused kernel; `fused` picks one kernel.
std::vector<Kind> fused_kinds(const std::string& fused = "",
                              const c10::optional<at::Tensor>& key_padding = c10::nullopt) {
  std::vector<Kind> kinds;
  for (const auto& info : ops::attention_variants())
    if (info.has_fused_kernel() && (fused.empty() || info.fused_kernel == fused))
      kinds.push_back({info.kind, variant_fn(info.kind, false, key_padding),
                       variant_fn(info.kind, true, key_padding)});
  return kinds;
}

std::vector<Kind> kinds() { return fused_kinds(); }

TEST(FusedKernels, CatalogueHasBothFusedKernels) {
  EXPECT_GE(fused_kinds("FlashAttention").size(), 1u);
  EXPECT_GE(fused_kinds("FusedFeatureAttention").size(), 3u);  // elu, relu, cosFormer
}

TEST(FusedKernels, TileAndChunkBoundaries) {
  // chunk 64, query tiles 128 (backward) and 256 (forward), key tiles 256 and 512: one below, at
  // and above each, plus primes.
  for (int64_t n : {63, 64, 65, 127, 128, 129, 255, 256, 257, 311, 511, 512, 513}) {
    torch::manual_seed(n);
    auto q = torch::randn({1, 2, n, 24}), k = torch::randn({1, 2, n, 24}), v = torch::randn({1, 2, n, 8});
    for (const auto& kind : kinds())
      for (bool causal : {false, true}) {
        auto out = kind.op(q, k, v, causal).to(torch::kDouble);
        auto ref = kind.oracle(q, k, v, causal);
        EXPECT_TRUE(torch::allclose(out, ref, 1e-4, 1e-5))
            << kind.name << " n=" << n << " causal=" << causal << " max err "
            << (out - ref).abs().max().item<double>();
      }
  }
}

TEST(FusedKernels, GradientsMatchOracleAutogradAcrossTiles) {
  // Backward of the fused paths vs autograd through the float64 oracle (explicit n×n weights).
  const int64_t L = 300, S = 333;
  torch::manual_seed(9);
  auto q = torch::randn({2, 2, L, 16}, torch::kDouble), k = torch::randn({2, 2, S, 16}, torch::kDouble);
  auto v = torch::randn({2, 2, S, 5}, torch::kDouble);
  auto g = torch::randn({2, 2, L, 5}, torch::kDouble);
  for (const auto& kind : kinds())
    for (bool causal : {false, true}) {
      auto grads = [&](const AttentionFn& f) {
        auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(), vv = v.clone().requires_grad_();
        (f(qq, kk, vv, causal) * g).sum().backward();
        return std::vector<at::Tensor>{qq.grad(), kk.grad(), vv.grad()};
      };
      auto got = grads(kind.op), want = grads(kind.oracle);
      for (int i = 0; i < 3; ++i)
        EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-8, 1e-10))
            << kind.name << " causal=" << causal << " input " << i << " max err "
            << (got[i] - want[i]).abs().max().item<double>();
    }
}

TEST(FusedKernels, OneQueryRowMatchesOracle) {
  // Decoding's shape: one query row per (batch, head) against S keys (the KV cache's step);
  // S = 1100 spans three key tiles. Float64
  // against the oracle to 1e-12, float32 to 1e-5; the query a strided view as the decoders pass
  // it; masks bool (padding), additive and causal (one row at the end sees every key); gradients
  // against autograd through the oracle.
  torch::manual_seed(11);
  const int64_t B = 3, H = 2, dk = 24, dv = 20;
  for (const auto dtype : {torch::kDouble, torch::kFloat}) {
    const double rtol = dtype == torch::kDouble ? 1e-10 : 1e-5, atol = dtype == torch::kDouble ? 1e-12 : 1e-5;
    for (const int64_t S : {1, 70, 1100}) {
      auto q = torch::randn({B, 1, H, dk}, dtype).transpose(1, 2);  // [B, H, 1, dk], strided
      auto k = torch::randn({B, H, S, dk}, dtype), v = torch::randn({B, H, S, dv}, dtype);
      auto valid = torch::rand({B, S}) > 0.3;
      valid.select(1, 0).fill_(true);
      const at::Tensor bool_mask = ops::padding_mask(valid);           // [B, 1, 1, S]
      const at::Tensor additive = torch::randn({B, H, 1, S}, dtype);   // added to the scores
      struct Case {
        const char* name;
        c10::optional<at::Tensor> mask;
        bool causal;
      };
      for (const Case& c : {Case{"none", c10::nullopt, false}, Case{"bool", bool_mask, false},
                            Case{"additive", additive, false}, Case{"causal", c10::nullopt, true}}) {
        auto got = ops::softmax_attention(q, k, v, c.mask, c.causal);
        auto want = reference::softmax_attention(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble),
                                                 c.mask.has_value() && c.mask->is_floating_point()
                                                     ? c10::optional<at::Tensor>(c.mask->to(torch::kDouble))
                                                     : c.mask,
                                                 c.causal);
        EXPECT_TRUE(torch::allclose(got.to(torch::kDouble), want, rtol, atol))
            << c.name << " S=" << S << " " << dtype << " max err "
            << (got.to(torch::kDouble) - want).abs().max().item<double>();
        if (dtype != torch::kDouble) continue;
        auto qg = q.detach().clone().requires_grad_(true), kg = k.detach().clone().requires_grad_(true);
        auto vg = v.detach().clone().requires_grad_(true);
        auto go = torch::randn_like(got);
        auto grads = torch::autograd::grad({ops::softmax_attention(qg, kg, vg, c.mask, c.causal)}, {qg, kg, vg}, {go});
        auto ref = torch::autograd::grad({reference::softmax_attention(qg, kg, vg, c.mask, c.causal)}, {qg, kg, vg}, {go});
        for (size_t i = 0; i < 3; ++i)
          EXPECT_TRUE(torch::allclose(grads[i], ref[i], 1e-10, 1e-12)) << c.name << " S=" << S << " gradient " << i;
      }
    }
  }
}

TEST(FusedKernels, LongSequenceRowsMatchOracle) {
  // n = 8192 through the fused kernels; a few rows checked in float64 against the oracle run on
  // just those queries (causal alignment: queries [i, i+r) over keys [0, i+r)).
  const int64_t n = 8192;
  torch::manual_seed(3);
  auto q = torch::randn({1, 1, n, 32}, torch::kDouble), k = torch::randn({1, 1, n, 32}, torch::kDouble);
  auto v = torch::randn({1, 1, n, 16}, torch::kDouble);
  const auto fm = ops::FeatureMap::elu();
  auto soft = ops::softmax_attention(q, k, v, c10::nullopt, true);
  auto lin = ops::linear_attention(q, k, v, fm, true);
  for (int64_t i : {0, 4095, 8100}) {
    const int64_t r = 4;
    auto qi = q.narrow(2, i, r), ki = k.narrow(2, 0, i + r), vi = v.narrow(2, 0, i + r);
    EXPECT_TRUE(torch::allclose(soft.narrow(2, i, r),
                                reference::softmax_attention(qi, ki, vi, c10::nullopt, true), 1e-10, 1e-12))
        << "softmax row " << i;
    EXPECT_TRUE(torch::allclose(lin.narrow(2, i, r), reference::linear_attention(qi, ki, vi, fm, true),
                                1e-10, 1e-12))
        << "linear row " << i;
  }
  // Non-causal cosFormer rows: the oracle over all keys for a slice of queries needs the query
  // positions of the full sequence, so compare against the explicit formula directly.
  auto cos_out = ops::cosformer_attention(q, k, v, false);
  for (int64_t i : {0, 5000, 8191}) {
    auto w = torch::relu(q[0][0][i]).matmul(torch::relu(k[0][0]).t()) *
             torch::cos(M_PI / 2 * (i - torch::arange(n, torch::kDouble)) / n);
    auto expect = w.matmul(v[0][0]) / w.sum().clamp_min(1e-6);
    EXPECT_TRUE(torch::allclose(cos_out[0][0][i], expect, 1e-10, 1e-12)) << "cosformer row " << i;
  }
}

// Attention dropout: the fused kernel drops exactly the weights attention_dropout_keep writes out,
// in forward and backward, across tiles, with causal and arbitrary masks.
at::Tensor dropout_oracle(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& allowed, const ops::AttentionDropout& dropout) {
  auto logits = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(3)));
  auto w = reference::softmax_weights(logits, allowed.expand(logits.sizes()));
  auto keep = ops::attention_dropout_keep(q.size(0), q.size(1), q.size(2), k.size(2), dropout);
  return at::matmul(w * keep.to(w.scalar_type()) / (1.0 - dropout.rate), v);
}

TEST(FusedKernels, AttentionDropoutMatchesTheWrittenOutMask) {
  const ops::AttentionDropout dropout{0.3, 1234};
  for (int64_t n : {7, 129, 257}) {
    torch::manual_seed(n);
    const int64_t S = n + 3;
    auto q = torch::randn({2, 2, n, 8}, torch::kDouble), k = torch::randn({2, 2, S, 8}, torch::kDouble);
    auto v = torch::randn({2, 2, S, 4}, torch::kDouble), g = torch::randn({2, 2, n, 4}, torch::kDouble);
    auto random_mask = torch::rand({2, 1, n, S}).gt(0.2);
    for (int variant = 0; variant < 3; ++variant) {
      const bool causal = variant == 1;
      c10::optional<at::Tensor> mask;
      at::Tensor allowed = torch::ones({1, 1, n, S}, torch::kBool);
      if (causal) allowed = ops::causal_mask(n, S).view({1, 1, n, S});
      if (variant == 2) {
        mask = random_mask;
        allowed = random_mask;
      }
      auto grads = [&](bool fused) {
        auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(), vv = v.clone().requires_grad_();
        auto out = fused ? ops::softmax_attention(qq, kk, vv, mask, causal, c10::nullopt, dropout)
                         : dropout_oracle(qq, kk, vv, allowed, dropout);
        (out * g).sum().backward();
        return std::vector<at::Tensor>{out.detach(), qq.grad(), kk.grad(), vv.grad()};
      };
      auto got = grads(true), want = grads(false);
      for (int i = 0; i < 4; ++i)
        EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-8, 1e-10))
            << "n=" << n << " variant " << variant << " tensor " << i << " max err "
            << (got[i] - want[i]).abs().max().item<double>();
    }
  }
}

TEST(FusedKernels, AttentionDropoutRateAndSeeds) {
  const ops::AttentionDropout dropout{0.25, 77};
  auto keep = ops::attention_dropout_keep(2, 4, 128, 160, dropout).to(torch::kDouble);
  // 163840 Bernoulli(0.75) draws: the kept fraction is within 5 standard deviations (0.005).
  EXPECT_NEAR(keep.mean().item<double>(), 0.75, 0.005);
  // No structure by position: every head and both halves of the keys keep ~75%.
  for (int64_t h = 0; h < 4; ++h)
    EXPECT_NEAR(keep.select(1, h).mean().item<double>(), 0.75, 0.01);
  EXPECT_NEAR(keep.narrow(3, 0, 80).mean().item<double>(), keep.narrow(3, 80, 80).mean().item<double>(), 0.01);
  // Another seed drops other weights; rate 0 keeps everything; a bad rate is an error.
  auto other = ops::attention_dropout_keep(2, 4, 128, 160, {0.25, 78}).to(torch::kDouble);
  EXPECT_LT((keep - other).abs().mean().item<double>(), 0.5);
  EXPECT_GT((keep - other).abs().mean().item<double>(), 0.2);
  EXPECT_TRUE(ops::attention_dropout_keep(1, 1, 5, 5, {0.0, 3}).all().item<bool>());
  auto q = torch::randn({1, 1, 4, 8});
  EXPECT_THROW(ops::softmax_attention(q, q, q, c10::nullopt, false, c10::nullopt, {1.0, 0}),
               attnkit::Error);
  // float32 fused path agrees with float64 under the same mask.
  auto q64 = torch::randn({1, 2, 300, 16}, torch::kDouble), v64 = torch::randn({1, 2, 300, 16}, torch::kDouble);
  auto out32 = ops::softmax_attention(q64.to(torch::kFloat), q64.to(torch::kFloat), v64.to(torch::kFloat),
                                      c10::nullopt, true, c10::nullopt, dropout);
  auto out64 = ops::softmax_attention(q64, q64, v64, c10::nullopt, true, c10::nullopt, dropout);
  EXPECT_TRUE(torch::allclose(out32.to(torch::kDouble), out64, 1e-4, 1e-5));
}

// Strided operands of the flash kernel: it reads q, k, v, out and dout and writes out, dq, dk, dv
// through their batch, head and row strides, so views are not copied. Each layout holds the same
// values as a contiguous [B, H, n, d] tensor x: `store` makes the storage, `view` the [B, H, n, d]
// view of it (applied to the storage's gradient too, giving the gradient of x).
struct FlashLayout {
  std::string name;
  std::function<at::Tensor(const at::Tensor&)> store, view;
  bool position_major;  // the kernel's outputs are laid out [B, n, H, d] for it
};

std::vector<FlashLayout> flash_layouts() {
  using torch::indexing::Slice;
  return {
      {"contiguous", [](const at::Tensor& x) { return x.clone(); },
       [](const at::Tensor& s) { return s; }, false},
      // Multi-head attention's projections: [B, n, H, d] storage, seen as [B, H, n, d].
      {"transposed", [](const at::Tensor& x) { return x.transpose(1, 2).contiguous(); },
       [](const at::Tensor& s) { return s.transpose(1, 2); }, true},
      // One slot of a fused q|k|v projection [B, n, 3, H, d] (GPT-2's c_attn): not dense.
      {"fused-slice",
       [](const at::Tensor& x) {
         auto s = torch::randn({x.size(0), x.size(2), 3, x.size(1), x.size(3)}, x.options());
         s.select(2, 1).copy_(x.transpose(1, 2));
         return s;
       },
       [](const at::Tensor& s) { return s.select(2, 1).transpose(1, 2); }, true},
      // Rows padded to d + 5 (a narrowed feature dimension): row stride above d.
      {"padded-rows",
       [](const at::Tensor& x) {
         auto s = torch::randn({x.size(0), x.size(1), x.size(2), x.size(3) + 5}, x.options());
         s.narrow(3, 0, x.size(3)).copy_(x);
         return s;
       },
       [](const at::Tensor& s) { return s.narrow(3, 0, s.size(3) - 5); }, false},
      // A strided feature dimension: the one layout the kernel cannot read, copied first.
      {"strided-features", [](const at::Tensor& x) { return x.transpose(2, 3).contiguous(); },
       [](const at::Tensor& s) { return s.transpose(2, 3); }, false},
  };
}

TEST(FusedKernels, FlashStridedOperandsMatchOracle) {
  // Across the tiles (L = 300, S = 333), with a bool mask and causality, with dropout: forward
  // and gradients of every layout against autograd through the float64 oracle (on contiguous
  // copies), and the layout of out and dq (position-major for position-major q).
  const int64_t B = 2, H = 3, L = 300, S = 333, dk = 16, dv = 5;
  torch::manual_seed(31);
  auto q = torch::randn({B, H, L, dk}, torch::kDouble), k = torch::randn({B, H, S, dk}, torch::kDouble);
  auto v = torch::randn({B, H, S, dv}, torch::kDouble), g = torch::randn({B, H, L, dv}, torch::kDouble);
  auto random_mask = torch::rand({B, 1, L, S}).gt(0.2);
  const ops::AttentionDropout dropout{0.2, 99};
  for (int variant = 0; variant < 3; ++variant) {
    const bool causal = variant == 1;
    c10::optional<at::Tensor> mask;
    if (variant == 2) mask = random_mask;
    const auto rate = variant == 2 ? dropout : ops::AttentionDropout{};
    at::Tensor allowed = torch::ones({1, 1, L, S}, torch::kBool);
    if (causal) allowed = ops::causal_mask(L, S).view({1, 1, L, S});
    if (mask) allowed = *mask;
    // The oracle on contiguous inputs.
    auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(), vv = v.clone().requires_grad_();
    auto want_out = rate.rate > 0 ? dropout_oracle(qq, kk, vv, allowed, rate)
                                  : reference::softmax_attention(qq, kk, vv, mask, causal);
    (want_out * g).sum().backward();
    const std::vector<at::Tensor> want{want_out.detach(), qq.grad(), kk.grad(), vv.grad()};
    for (const auto& layout : flash_layouts()) {
      auto qs = layout.store(q).requires_grad_(), ks = layout.store(k).requires_grad_();
      auto vs = layout.store(v).requires_grad_();
      auto qv = layout.view(qs), kv = layout.view(ks), vv2 = layout.view(vs);
      auto gv = layout.view(layout.store(g));  // dout in the same layout
      ASSERT_TRUE(torch::equal(qv, q)) << layout.name;
      at::Tensor dq_seen;
      qv.register_hook([&dq_seen](const at::Tensor& grad) { dq_seen = grad; });
      auto out = ops::softmax_attention(qv, kv, vv2, mask, causal, c10::nullopt, rate);
      (out * gv).sum().backward();
      const std::vector<at::Tensor> got{out.detach(), layout.view(qs.grad()), layout.view(ks.grad()),
                                        layout.view(vs.grad())};
      for (int i = 0; i < 4; ++i)
        EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-8, 1e-10))
            << layout.name << " variant " << variant << " tensor " << i << " max err "
            << (got[i] - want[i]).abs().max().item<double>();
      // Outputs in the layout the next projection reads without a copy.
      const bool pm = layout.position_major;
      EXPECT_TRUE(pm ? out.transpose(1, 2).is_contiguous() : out.is_contiguous()) << layout.name;
      ASSERT_TRUE(dq_seen.defined()) << layout.name;
      EXPECT_TRUE(pm ? dq_seen.transpose(1, 2).is_contiguous() : dq_seen.is_contiguous())
          << layout.name;
    }
  }
}

TEST(FusedKernels, FlashStridedFloatInputsEqualContiguous) {
  // float32, one query row (decoding) and one head: strided and contiguous inputs give the same
  // outputs and gradients up to rounding, and a single query row's arbitrary stride is harmless.
  torch::manual_seed(32);
  for (auto [H, L, S] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4, 1, 77}, {1, 129, 129}, {4, 257, 300}}) {
    auto q = torch::randn({2, H, L, 32}), k = torch::randn({2, H, S, 32}), v = torch::randn({2, H, S, 32});
    auto run = [&](const FlashLayout& layout) {
      auto qs = layout.store(q).requires_grad_(), ks = layout.store(k).requires_grad_();
      auto vs = layout.store(v).requires_grad_();
      auto out = ops::softmax_attention(layout.view(qs), layout.view(ks), layout.view(vs), c10::nullopt,
                                        L > 1);
      out.pow(2).sum().backward();
      return std::vector<at::Tensor>{out.detach(), layout.view(qs.grad()), layout.view(ks.grad()),
                                     layout.view(vs.grad())};
    };
    const auto layouts = flash_layouts();
    auto want = run(layouts[0]);
    for (size_t l = 1; l < layouts.size(); ++l) {
      auto got = run(layouts[l]);
      for (int i = 0; i < 4; ++i)
        EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-5, 1e-6))
            << layouts[l].name << " H=" << H << " L=" << L << " tensor " << i;
    }
  }
}

// The fused feature-attention op (causal with L = S; non-causal with any L, S and key padding):
// elu + 1, relu and cosFormer features applied inside the kernel, forward and backward against
// autograd through the float64 oracle, across chunk boundaries; rows whose cosFormer denominator
// is clamped; strided (view) inputs; float32; and a create_graph backward (taken through the
// composition) that still differentiates.
std::vector<Kind> causal_feature_kinds() { return fused_kinds("FusedFeatureAttention"); }

std::vector<at::Tensor> output_and_grads(const AttentionFn& f, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& g, bool causal = true) {
  auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(), vv = v.clone().requires_grad_();
  auto out = f(qq, kk, vv, causal);
  (out * g).sum().backward();
  return {out.detach(), qq.grad(), kk.grad(), vv.grad()};
}

TEST(FusedKernels, CausalFeatureAttentionMatchesOracleAcrossChunks) {
  for (int64_t n : {1, 63, 64, 65, 128, 131, 200}) {
    torch::manual_seed(100 + n);
    auto q = torch::randn({2, 3, n, 7}, torch::kDouble), k = torch::randn({2, 3, n, 7}, torch::kDouble);
    auto v = torch::randn({2, 3, n, 5}, torch::kDouble), g = torch::randn({2, 3, n, 5}, torch::kDouble);
    // cosFormer: make some query rows all-negative so relu(q) = 0 and the denominator is clamped.
    q.index_put_({0, 0, torch::indexing::Slice(0, n, 3)}, -q.index({0, 0, torch::indexing::Slice(0, n, 3)}).abs());
    for (const auto& kind : causal_feature_kinds())
      for (bool causal : {true, false}) {
        auto got = output_and_grads(kind.op, q, k, v, g, causal);
        auto want = output_and_grads(kind.oracle, q, k, v, g, causal);
        for (int i = 0; i < 4; ++i)
          EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-9, 1e-11))
              << kind.name << " n=" << n << " causal=" << causal << " tensor " << i << " max err "
              << (got[i] - want[i]).abs().max().item<double>();
      }
  }
}

TEST(FusedKernels, CausalFeatureAttentionFloatAndStridedInputs) {
  const int64_t n = 150;
  torch::manual_seed(5);
  // [B, n, H, d] transposed to [B, H, n, d]: the layout multi-head attention hands over.
  auto q = torch::randn({2, n, 4, 16}).transpose(1, 2), k = torch::randn({2, n, 4, 16}).transpose(1, 2);
  auto v = torch::randn({2, n, 4, 8}).transpose(1, 2), g = torch::randn({2, 4, n, 8});
  ASSERT_FALSE(q.is_contiguous());
  for (const auto& kind : causal_feature_kinds()) {
    auto got = output_and_grads(kind.op, q, k, v, g);
    auto want = output_and_grads(kind.oracle, q.to(torch::kDouble), k.to(torch::kDouble),
                                 v.to(torch::kDouble), g.to(torch::kDouble));
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got[i].scalar_type(), torch::kFloat);
      EXPECT_TRUE(torch::allclose(got[i].to(torch::kDouble), want[i], 1e-3, 1e-4))
          << kind.name << " tensor " << i << " max err "
          << (got[i].to(torch::kDouble) - want[i]).abs().max().item<double>();
    }
  }
}

TEST(FusedKernels, CausalFeatureAttentionSecondOrderGradients) {
  const int64_t n = 70;
  torch::manual_seed(8);
  auto q = torch::randn({1, 2, n, 4}, torch::kDouble), k = torch::randn({1, 2, n, 4}, torch::kDouble);
  auto v = torch::randn({1, 2, n, 3}, torch::kDouble), g = torch::randn({1, 2, n, 3}, torch::kDouble);
  for (const auto& kind : causal_feature_kinds()) {
    auto second = [&](const AttentionFn& f) {
      auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(), vv = v.clone().requires_grad_();
      auto grads = torch::autograd::grad({(f(qq, kk, vv, true) * g).sum()}, {qq, kk, vv}, {},
                                         /*retain_graph=*/true, /*create_graph=*/true);
      // A scalar of the first-order gradients, differentiated again.
      (grads[0].pow(2).sum() + (grads[1] * grads[2].sum()).sum()).backward();
      return std::vector<at::Tensor>{qq.grad(), kk.grad(), vv.grad()};
    };
    auto got = second(kind.op), want = second(kind.oracle);
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-8, 1e-10)) << kind.name << " input " << i;
  }
}

TEST(FusedKernels, NonCausalFeatureAttentionCrossLengthsAndKeyPadding) {
  // L != S (cross attention: cosFormer's horizon M = max(L, S)) and padded keys, fused vs oracle.
  for (auto [L, S] : std::vector<std::pair<int64_t, int64_t>>{{70, 131}, {131, 70}, {1, 65}}) {
    torch::manual_seed(L * 1000 + S);
    auto q = torch::randn({2, 3, L, 6}, torch::kDouble), k = torch::randn({2, 3, S, 6}, torch::kDouble);
    auto v = torch::randn({2, 3, S, 4}, torch::kDouble), g = torch::randn({2, 3, L, 4}, torch::kDouble);
    auto keep = torch::rand({2, S}).gt(0.3);
    keep.index_put_({1, torch::indexing::Slice()}, false);  // a sequence with no real key at all
    keep.index_put_({1, 0}, true);
    // Every fused feature-map variant with the padding, fused vs oracle.
    std::vector<std::pair<std::string, std::function<at::Tensor(const at::Tensor&, const at::Tensor&,
                                                                const at::Tensor&, bool)>>>
        ops_and_oracles;
    for (const auto& kind : fused_kinds("FusedFeatureAttention", keep))
      ops_and_oracles.emplace_back(kind.name, [kind](auto& a, auto& b, auto& c, bool fused) {
        return fused ? kind.op(a, b, c, false) : kind.oracle(a, b, c, false);
      });
    ASSERT_GE(ops_and_oracles.size(), 3u);
    for (const auto& entry : ops_and_oracles) {
      // Not a structured binding: lambdas capture those only from C++20 (clang refuses).
      const auto& name = entry.first;
      const auto& f = entry.second;
      auto run = [&](bool fused) {
        auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(), vv = v.clone().requires_grad_();
        auto out = f(qq, kk, vv, fused);
        (out * g).sum().backward();
        return std::vector<at::Tensor>{out.detach(), qq.grad(), kk.grad(), vv.grad()};
      };
      auto got = run(true), want = run(false);
      for (int i = 0; i < 4; ++i)
        EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-9, 1e-11))
            << name << " L=" << L << " S=" << S << " tensor " << i << " max err "
            << (got[i] - want[i]).abs().max().item<double>();
    }
  }
}

TEST(Runtime, SetBlasThreadsReachesOpenBlas) {
  // LibTorch's thread setting does not reach OpenBLAS's own pool; set_blas_threads must.
  auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!get) GTEST_SKIP() << "the BLAS in use is not OpenBLAS";
  auto parallel = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (parallel && parallel() == 2) {
    // OpenMP build (libopenblas0-openmp): its GEMMs run on LibTorch's threads, and its own setter
    // is omp_set_num_threads, so set_blas_threads must leave LibTorch's thread count alone.
    const int threads = at::get_num_threads();
    set_blas_threads(1);
    EXPECT_EQ(at::get_num_threads(), threads);
    return;
  }
  const int before = get();
  if (std::thread::hardware_concurrency() >= 2) {  // OpenBLAS caps the count at the cores
    set_blas_threads(2);
    EXPECT_EQ(get(), 2);
  }
  set_blas_threads(1);
  EXPECT_EQ(get(), 1);
  set_blas_threads(0);  // not a thread count: ignored
  EXPECT_EQ(get(), 1);
  set_blas_threads(before);
}

}  // namespace
}  // namespace attnkit
