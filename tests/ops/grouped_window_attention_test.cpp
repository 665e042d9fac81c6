// Grouped-query attention and sliding windows in the fused softmax kernel (issue 42): the kernel
// reads k/v of Hkv < H heads in place and skips the keys outside the window's band. Forward and
// gradients against a float64 oracle that repeats k/v (repeat_interleave) and writes the band out
// as an explicit mask, over groups 1/2/4, windows shorter and longer than the sequence, S > L
// (causal offset), key padding, additive masks and dropout; finite differences; both ways the
// backward splits a group over its threads; the strided layouts the layers pass; Gemma 2's logit
// soft-cap inside the kernel.
#include "attnkit/ops/reference.h"
#include "attnkit/ops/softmax_attention.h"
#include "attnkit/error.h"

#include "support/gradcheck.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

namespace attnkit {
namespace {

// The float64 oracle: k/v repeated to H heads, the causal/window band written out element by
// element, logits soft-capped (cap · tanh(logits / cap)) before the mask, softmax over the allowed
// entries (reference::softmax_weights), dropout as the written keep mask. `mask` bool (true =
// attend) or additive, broadcastable to [B, H, L, S].
at::Tensor oracle(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const c10::optional<at::Tensor>& mask, bool causal, int64_t window,
                  const ops::AttentionDropout& dropout = {}, double softcap = 0.0) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
  const int64_t group = H / k.size(1);
  auto kr = k.repeat_interleave(group, 1), vr = v.repeat_interleave(group, 1);
  auto logits = at::matmul(q, kr.transpose(-2, -1)) / std::sqrt(double(q.size(3)));
  if (softcap > 0) logits = softcap * at::tanh(logits / softcap);
  auto band = torch::ones({L, S}, torch::kBool);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) {
      const int64_t column = i + S - L;
      bool seen = true;
      if (causal && j > column) seen = false;
      if (window > 0 && column - j >= window) seen = false;
      band[i][j] = seen;
    }
  at::Tensor allowed = band.view({1, 1, L, S}).expand({B, H, L, S});
  if (mask) {
    if (mask->scalar_type() == at::kBool)
      allowed = allowed.logical_and(mask->expand({B, H, L, S}));
    else
      logits = logits + mask->expand({B, H, L, S});
  }
  auto w = reference::softmax_weights(logits, allowed);
  if (dropout.rate > 0) {
    auto keep = ops::attention_dropout_keep(B, H, L, S, dropout);
    w = w * keep.to(w.scalar_type()) / (1.0 - dropout.rate);
  }
  return at::matmul(w, vr);
}

struct Case {
  int64_t B, H, Hkv, L, S, window;
  bool causal;
  int variant;  // 0 plain, 1 key padding, 2 additive mask, 3 dropout
  double softcap = 0.0;
};

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) + " Hkv=" +
         std::to_string(c.Hkv) + " L=" + std::to_string(c.L) + " S=" + std::to_string(c.S) +
         " window=" + std::to_string(c.window) + " causal=" + std::to_string(c.causal) +
         " variant=" + std::to_string(c.variant) + " softcap=" + std::to_string(c.softcap);
}

// Forward and gradients of ops::softmax_attention (the fused kernel, float64) against autograd
// through the oracle.
void check_case(const Case& c, int64_t seed) {
  torch::manual_seed(seed);
  const int64_t dk = 12, dv = 7;
  auto q = torch::randn({c.B, c.H, c.L, dk}, torch::kDouble);
  auto k = torch::randn({c.B, c.Hkv, c.S, dk}, torch::kDouble);
  auto v = torch::randn({c.B, c.Hkv, c.S, dv}, torch::kDouble);
  auto g = torch::randn({c.B, c.H, c.L, dv}, torch::kDouble);
  c10::optional<at::Tensor> mask;
  ops::AttentionDropout dropout;
  if (c.variant == 1) {  // key padding [B, 1, 1, S]: row b's first b + 1 keys are padding
    auto valid = torch::ones({c.B, c.S}, torch::kBool);
    for (int64_t b = 0; b < c.B; ++b) valid[b].narrow(0, 0, std::min(b + 1, c.S)).fill_(false);
    mask = valid.view({c.B, 1, 1, c.S});
  } else if (c.variant == 2) {  // additive, per query head
    mask = torch::randn({1, c.H, c.L, c.S}, torch::kDouble);
  } else if (c.variant == 3) {
    dropout = {0.25, static_cast<uint64_t>(seed) + 17};
  }
  auto run = [&](bool fused) {
    auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(),
         vv = v.clone().requires_grad_();
    auto out = fused ? ops::softmax_attention(qq, kk, vv, mask, c.causal, c10::nullopt, dropout,
                                              ops::SoftmaxExtras{c.window, c.softcap})
                     : oracle(qq, kk, vv, mask, c.causal, c.window, dropout, c.softcap);
    (out * g).sum().backward();
    return std::vector<at::Tensor>{out.detach(), qq.grad(), kk.grad(), vv.grad()};
  };
  auto got = run(true), want = run(false);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << describe(c) << " tensor " << i;
    EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-8, 1e-10))
        << describe(c) << " tensor " << i << " max err "
        << (got[i] - want[i]).abs().max().item<double>();
  }
}

TEST(GroupedWindowAttention, ForwardAndGradientsMatchOracle) {
  int64_t seed = 0;
  for (int64_t Hkv : {4, 2, 1})  // groups 1, 2, 4 of 4 query heads
    for (int variant = 0; variant < 4; ++variant) {
      // Windows shorter than the sequence (inside a tile, across tiles), longer than it, none;
      // S > L: the causal diagonal offset; L = 300, S = 333 straddle the forward's and the
      // backward's tiles.
      for (int64_t window : {0, 1, 5, 130, 1000}) {
        check_case({2, 4, Hkv, 300, 333, window, true, variant}, ++seed);
        check_case({1, 4, Hkv, 9, 40, window, true, variant}, ++seed);
      }
      check_case({2, 4, Hkv, 37, 50, 0, false, variant}, ++seed);
      // Soft-capped logits (a cap of 1.5 bends most of them), with and without a window.
      check_case({2, 4, Hkv, 300, 333, 0, true, variant, 1.5}, ++seed);
      check_case({1, 4, Hkv, 40, 70, 9, true, variant, 1.5}, ++seed);
      check_case({2, 4, Hkv, 37, 50, 0, false, variant, 1.5}, ++seed);
    }
}

TEST(GroupedWindowAttention, OneQueryRowAgainstManyKeys) {
  // Decoding's shape: one new column (L = 1) against S keys spanning several key tiles, grouped,
  // windowed: only the last `window` keys count.
  int64_t seed = 100;
  for (int64_t Hkv : {3, 1})
    for (int64_t window : {0, 1, 64, 700, 2000})
      for (int variant : {0, 1}) check_case({2, 6, Hkv, 1, 1100, window, true, variant}, ++seed);
}

TEST(GroupedWindowAttention, FiniteDifferences) {
  // The fused backward of grouped heads under a window, key padding and S > L, against central
  // differences (float64).
  torch::manual_seed(3);
  const int64_t B = 2, H = 4, Hkv = 2, L = 6, S = 9;
  auto valid = torch::ones({B, S}, torch::kBool);
  valid[1][0] = false;
  valid[1][1] = false;
  const at::Tensor mask = valid.view({B, 1, 1, S});
  for (const auto& extras : {ops::SoftmaxExtras{3, 0.0}, ops::SoftmaxExtras{20, 0.0},
                             ops::SoftmaxExtras{3, 1.5}}) {
    const int64_t window = extras.window;
    auto f = [&](const std::vector<at::Tensor>& x) {
      return ops::softmax_attention(x[0], x[1], x[2], mask, true, c10::nullopt, {}, extras);
    };
    auto result = testing::gradcheck(
        f, {torch::randn({B, H, L, 5}, torch::kDouble).requires_grad_(),
            torch::randn({B, Hkv, S, 5}, torch::kDouble).requires_grad_(),
            torch::randn({B, Hkv, S, 3}, torch::kDouble).requires_grad_()});
    EXPECT_TRUE(result.ok) << "window " << window << " softcap " << extras.logit_softcap << ": "
                           << result.message;
  }
}

TEST(GroupedWindowAttention, BothBackwardSplitsOfAGroup) {
  // On two threads a single key/value head (B·Hkv = 1) splits its group into one task per query
  // head with partial dk/dv sums; B·Hkv = 2 gives one task per key/value head. Both against the
  // oracle, and the float32 kernel on both agrees with float64.
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  check_case({1, 4, 1, 200, 260, 0, true, 0}, 7);
  check_case({1, 4, 1, 200, 260, 50, true, 3}, 8);
  check_case({2, 4, 1, 200, 260, 50, true, 1}, 9);
  check_case({1, 6, 3, 200, 260, 0, false, 2}, 10);  // 3 key/value heads, 2 threads: split
  at::set_num_threads(threads);
}

TEST(GroupedWindowAttention, StridedGroupedOperandsFloat) {
  // The layers' layouts: q, k, v as [B, H, n, d] views of [B, n, H, d] projections (position
  // major), float32 (SmolLM2's 9 query / 3 key-value heads, d = 64), against the float64 oracle;
  // dk and dv come back in k's and v's layout with k's grouped shape. The soft-caps bend the
  // logits (float32's vectorised tanh) a little (30) and a lot (2).
  torch::manual_seed(21);
  const int64_t B = 2, H = 9, Hkv = 3, L = 70, S = 70, d = 64;
  auto q = torch::randn({B, L, H, d}).transpose(1, 2).requires_grad_();
  auto ks = torch::randn({B, S, Hkv, d}).requires_grad_();
  auto vs = torch::randn({B, S, Hkv, d}).requires_grad_();
  auto g = torch::randn({B, H, L, d}, torch::kDouble);
  for (const auto& extras : {ops::SoftmaxExtras{0, 0.0}, ops::SoftmaxExtras{16, 0.0},
                             ops::SoftmaxExtras{0, 2.0}, ops::SoftmaxExtras{16, 30.0}}) {
    const int64_t window = extras.window;
    auto out = ops::softmax_attention(q, ks.transpose(1, 2), vs.transpose(1, 2), c10::nullopt,
                                      true, c10::nullopt, {}, extras);
    EXPECT_TRUE(out.transpose(1, 2).is_contiguous());
    (out.to(torch::kDouble) * g).sum().backward();
    auto q64 = q.detach().to(torch::kDouble).requires_grad_();
    auto k64 = ks.detach().to(torch::kDouble).transpose(1, 2).requires_grad_();
    auto v64 = vs.detach().to(torch::kDouble).transpose(1, 2).requires_grad_();
    auto want = oracle(q64, k64, v64, c10::nullopt, true, window, {}, extras.logit_softcap);
    (want * g).sum().backward();
    EXPECT_TRUE(torch::allclose(out.detach().to(torch::kDouble), want.detach(), 1e-4, 1e-5))
        << "window " << window << " softcap " << extras.logit_softcap;
    EXPECT_TRUE(torch::allclose(ks.grad().transpose(1, 2).to(torch::kDouble), k64.grad(), 1e-4,
                                1e-4))
        << "window " << window << " softcap " << extras.logit_softcap;
    EXPECT_TRUE(torch::allclose(vs.grad().transpose(1, 2).to(torch::kDouble), v64.grad(), 1e-4,
                                1e-4))
        << "window " << window << " softcap " << extras.logit_softcap;
    EXPECT_TRUE(torch::allclose(q.grad().to(torch::kDouble), q64.grad(), 1e-4, 1e-4))
        << "window " << window << " softcap " << extras.logit_softcap;
    q.grad().zero_();
    ks.grad().zero_();
    vs.grad().zero_();
  }
}

TEST(GroupedWindowAttention, UnfusedPathAgreesAndBadGroupsFail) {
  // An additive mask that itself requires a gradient takes the unfused path (repeated k/v, the
  // band as a mask, soft-cap in ATen): it equals the kernel, forward and gradients.
  // softmax_attention_weights (unfused) agrees too. Heads that do not divide, k and v with
  // different heads, and a window without causality are one-line errors.
  torch::manual_seed(5);
  auto q = torch::randn({1, 4, 20, 8}, torch::kDouble), k = torch::randn({1, 2, 25, 8}, torch::kDouble);
  auto v = torch::randn({1, 2, 25, 3}, torch::kDouble), g = torch::randn({1, 4, 20, 3}, torch::kDouble);
  const at::Tensor zero = torch::zeros({1, 1, 20, 25}, torch::kDouble);
  for (double softcap : {0.0, 1.5}) {
    const ops::SoftmaxExtras extras{7, softcap};
    auto run = [&](const c10::optional<at::Tensor>& mask) {
      auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(),
           vv = v.clone().requires_grad_();
      auto out = ops::softmax_attention(qq, kk, vv, mask, true, c10::nullopt, {}, extras);
      (out * g).sum().backward();
      return std::vector<at::Tensor>{out.detach(), qq.grad(), kk.grad(), vv.grad()};
    };
    auto fused = run(c10::nullopt), unfused = run(zero.clone().requires_grad_());
    for (int i = 0; i < 4; ++i)
      EXPECT_TRUE(torch::allclose(fused[i], unfused[i], 1e-10, 1e-12))
          << "softcap " << softcap << " tensor " << i;
    EXPECT_TRUE(torch::allclose(fused[0], oracle(q, k, v, c10::nullopt, true, 7, {}, softcap),
                                1e-10, 1e-12));
    auto weights = ops::softmax_attention_weights(q, k, c10::nullopt, true, c10::nullopt, extras);
    EXPECT_TRUE(torch::allclose(at::matmul(weights, v.repeat_interleave(2, 1)), fused[0], 1e-10,
                                1e-12));
  }
  EXPECT_THROW(ops::softmax_attention(q, torch::randn({1, 3, 25, 8}, torch::kDouble),
                                      torch::randn({1, 3, 25, 3}, torch::kDouble)),
               Error);
  EXPECT_THROW(ops::softmax_attention(q, k, torch::randn({1, 1, 25, 3}, torch::kDouble)), Error);
  EXPECT_THROW(ops::softmax_attention(q, k, v, c10::nullopt, false, c10::nullopt, {}, {7, 0.0}),
               Error);
}

}  // namespace
}  // namespace attnkit
