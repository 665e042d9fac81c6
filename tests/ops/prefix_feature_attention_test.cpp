// Prefix-LM / UniLM feature attention in O(n) (prefix_linear_attention, prefix_cosformer_attention)
// against the float64 oracles under the explicit masks of ops/masks.h (prefix_lm_mask,
// unilm_mask), with key padding, prefix lengths 0, 1, n and chunk boundaries; gradients against
// the oracle's autograd and by finite differences; create_graph; float32 and strided inputs.
// Each ISA copy of the kernels: scripts/test_isa.sh build PrefixFeatureAttention.
#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/reference.h"
#include "support/gradcheck.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace attnkit {
namespace {

using torch::indexing::Slice;

// op(q, k, v, prefix_lengths, keep) under test and the oracle under an explicit mask.
using PrefixFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                          const at::Tensor&, const c10::optional<at::Tensor>&)>;
using OracleFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                          const at::Tensor&, const c10::optional<at::Tensor>&)>;

struct Kind {
  std::string name;
  PrefixFn op;
  OracleFn oracle;  // (q, k, v, bool mask [B, 1, n, n], keep)
};

std::vector<Kind> prefix_kinds() {
  std::vector<Kind> kinds;
  for (const auto& fm : {ops::FeatureMap::elu(), ops::FeatureMap::relu()})
    kinds.push_back({fm.name(),
                     [fm](auto& q, auto& k, auto& v, auto& p, auto& keep) {
                       return ops::prefix_linear_attention(q, k, v, fm, p, keep);
                     },
                     [fm](auto& q, auto& k, auto& v, auto& mask, auto& keep) {
                       return reference::linear_attention(q, k, v, fm, false, keep, mask);
                     }});
  kinds.push_back({"cosformer",
                   [](auto& q, auto& k, auto& v, auto& p, auto& keep) {
                     return ops::prefix_cosformer_attention(q, k, v, p, keep);
                   },
                   [](auto& q, auto& k, auto& v, auto& mask, auto& keep) {
                     return reference::cosformer_attention(q, k, v, false, keep, mask);
                   }});
  return kinds;
}

// Output and the gradients of <out, g> for q, k, v.
std::vector<at::Tensor> output_and_grads(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& f,
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g) {
  auto qq = q.detach().clone().requires_grad_(), kk = k.detach().clone().requires_grad_(),
       vv = v.detach().clone().requires_grad_();
  auto out = f(qq, kk, vv);
  (out * g.to(out.scalar_type())).sum().backward();
  return {out.detach(), qq.grad(), kk.grad(), vv.grad()};
}

double max_error(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

void expect_matches_oracle(const Kind& kind, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& prefix,
                           const c10::optional<at::Tensor>& keep, const at::Tensor& mask,
                           double rtol, double atol, const std::string& what) {
  auto g = torch::randn_like(v.to(torch::kDouble));
  auto got = output_and_grads([&](auto& a, auto& b, auto& c) { return kind.op(a, b, c, prefix, keep); },
                              q, k, v, g);
  auto want = output_and_grads(
      [&](auto& a, auto& b, auto& c) { return kind.oracle(a, b, c, mask, keep); },
      q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), g);
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(got[i].defined()) << kind.name << " " << what << " " << names[i];
    EXPECT_FALSE(got[i].isnan().any().item<bool>()) << kind.name << " " << what << " " << names[i];
    // atol in units of the tensor's scale: float32 gradients of rows with few keys and a small
    // denominator (causal cosFormer) carry absolute errors of ~1e-4 on values of ~3, the same for
    // the causal op and on every ISA copy.
    const double scale = std::max(1.0, want[i].abs().max().item<double>());
    EXPECT_TRUE(torch::allclose(got[i].to(torch::kDouble), want[i], rtol, atol * scale))
        << kind.name << " " << what << " " << names[i] << " max err " << max_error(got[i], want[i]);
  }
}

TEST(PrefixFeatureAttention, MatchesOracleUnderPrefixLmMaskAcrossChunks) {
  for (int64_t n : {1, 2, 7, 63, 64, 65, 130, 200}) {
    torch::manual_seed(300 + n);
    const int64_t B = 6, H = 2;
    auto q = torch::randn({B, H, n, 5}, torch::kDouble), k = torch::randn({B, H, n, 5}, torch::kDouble);
    auto v = torch::randn({B, H, n, 3}, torch::kDouble);
    // Make some query rows all-negative (relu features 0: cosFormer's clamped denominator).
    q.index_put_({0, 0, Slice(0, n, 3)}, -q.index({0, 0, Slice(0, n, 3)}).abs());
    // Prefix lengths 0, 1, n, and ones that end inside, at and after a chunk boundary.
    auto prefix = torch::tensor({int64_t{0}, std::min<int64_t>(1, n), n, n / 2,
                                 std::min<int64_t>(64, n), std::min<int64_t>(65, n)},
                                torch::kLong);
    auto mask = ops::prefix_lm_mask(prefix, n);
    for (bool padded : {false, true}) {
      c10::optional<at::Tensor> keep;
      if (padded) {
        auto kp = torch::rand({B, n}).gt(0.3);
        kp.index_put_({1}, false);  // a row without any real key
        keep = kp;
      }
      for (const auto& kind : prefix_kinds())
        expect_matches_oracle(kind, q, k, v, prefix, keep, mask, 1e-9, 1e-11,
                              "n=" + std::to_string(n) + " padded=" + std::to_string(padded));
    }
  }
}

// UniLM batches as models::unilm_batch lays them out: [CLS] src [SEP] tgt [SEP], token types
// 0 / 1, trailing padding of type 1 excluded by the key padding mask.
TEST(PrefixFeatureAttention, MatchesOracleUnderUnilmMaskWithPadding) {
  torch::manual_seed(41);
  const int64_t n = 90;
  const std::vector<std::pair<int64_t, int64_t>> rows{{3, 87}, {40, 50}, {70, 5}, {2, 1}, {66, 24}};
  const int64_t B = static_cast<int64_t>(rows.size()), H = 3;
  auto types = torch::ones({B, n}, torch::kLong);
  auto keep = torch::zeros({B, n}, torch::kBool);
  for (int64_t b = 0; b < B; ++b) {
    types.index_put_({b, Slice(0, rows[b].first)}, 0);
    keep.index_put_({b, Slice(0, rows[b].first + rows[b].second)}, true);
  }
  auto prefix = ops::unilm_prefix_lengths(types);
  for (int64_t b = 0; b < B; ++b) EXPECT_EQ(prefix[b].item<int64_t>(), rows[b].first);
  auto mask = ops::unilm_mask(types);
  ASSERT_TRUE(mask.equal(ops::prefix_lm_mask(prefix, n)));
  auto q = torch::randn({B, H, n, 8}, torch::kDouble), k = torch::randn({B, H, n, 8}, torch::kDouble);
  auto v = torch::randn({B, H, n, 6}, torch::kDouble);
  for (const auto& kind : prefix_kinds())
    expect_matches_oracle(kind, q, k, v, prefix, keep, mask, 1e-9, 1e-11, "unilm");
}

TEST(PrefixFeatureAttention, FloatAndStridedInputs) {
  torch::manual_seed(7);
  const int64_t n = 150, B = 3;
  // [B, n, H, d] transposed to [B, H, n, d]: the layout multi-head attention hands over.
  auto q = torch::randn({B, n, 4, 16}).transpose(1, 2), k = torch::randn({B, n, 4, 16}).transpose(1, 2);
  auto v = torch::randn({B, n, 4, 8}).transpose(1, 2);
  ASSERT_FALSE(q.is_contiguous());
  auto prefix = torch::tensor({0, 77, 150}, torch::kInt);  // any integer dtype
  auto keep = torch::ones({B, n}, torch::kBool);
  keep.index_put_({1, Slice(120, n)}, false);
  auto mask = ops::prefix_lm_mask(prefix, n);
  for (const auto& kind : prefix_kinds()) {
    EXPECT_EQ(kind.op(q, k, v, prefix, keep).scalar_type(), torch::kFloat);
    expect_matches_oracle(kind, q, k, v, prefix, keep, mask, 1e-3, 1e-3, "float32");
  }
}

TEST(PrefixFeatureAttention, FiniteDifferenceGradients) {
  torch::manual_seed(12);
  const int64_t n = 70;  // two chunks; prefixes end in either
  auto prefix = torch::tensor({0, 5, 66, 70}, torch::kLong);
  auto keep = torch::ones({4, n}, torch::kBool);
  keep.index_put_({1, Slice(60, n)}, false);
  keep.index_put_({2, 3}, false);
  for (const auto& kind : prefix_kinds()) {
    auto q = torch::randn({4, 1, n, 3}, torch::kDouble).requires_grad_();
    auto k = torch::randn({4, 1, n, 3}, torch::kDouble).requires_grad_();
    auto v = torch::randn({4, 1, n, 2}, torch::kDouble).requires_grad_();
    auto result = testing::gradcheck(
        [&](const std::vector<at::Tensor>& in) { return kind.op(in[0], in[1], in[2], prefix, keep); },
        {q, k, v});
    EXPECT_TRUE(result.ok) << kind.name << ": " << result.message;
  }
}

TEST(PrefixFeatureAttention, SecondOrderGradientsThroughTheExplicitMask) {
  torch::manual_seed(9);
  const int64_t n = 20;
  auto prefix = torch::tensor({0, 7, 20}, torch::kLong);
  auto keep = torch::ones({3, n}, torch::kBool);
  keep.index_put_({1, Slice(15, n)}, false);
  auto mask = ops::prefix_lm_mask(prefix, n);
  auto q = torch::randn({3, 2, n, 4}, torch::kDouble), k = torch::randn({3, 2, n, 4}, torch::kDouble);
  auto v = torch::randn({3, 2, n, 3}, torch::kDouble), g = torch::randn({3, 2, n, 3}, torch::kDouble);
  for (const auto& kind : prefix_kinds()) {
    auto second = [&](const std::function<at::Tensor(const at::Tensor&, const at::Tensor&,
                                                     const at::Tensor&)>& f) {
      auto qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(), vv = v.clone().requires_grad_();
      auto grads = torch::autograd::grad({(f(qq, kk, vv) * g).sum()}, {qq, kk, vv}, {},
                                         /*retain_graph=*/true, /*create_graph=*/true);
      (grads[0].pow(2).sum() + (grads[1] * grads[2].sum()).sum()).backward();
      return std::vector<at::Tensor>{qq.grad(), kk.grad(), vv.grad()};
    };
    auto got = second([&](auto& a, auto& b, auto& c) { return kind.op(a, b, c, prefix, keep); });
    auto want = second([&](auto& a, auto& b, auto& c) { return kind.oracle(a, b, c, mask, keep); });
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-8, 1e-10)) << kind.name << " input " << i;
  }
}

TEST(PrefixFeatureAttention, EndsAreCausalAndNonCausalAttention) {
  torch::manual_seed(3);
  const int64_t n = 100;
  auto q = torch::randn({2, 2, n, 6}), k = torch::randn({2, 2, n, 6}), v = torch::randn({2, 2, n, 4});
  auto zero = torch::zeros({2}, torch::kLong), all = torch::full({2}, n, torch::kLong);
  const auto elu = ops::FeatureMap::elu();
  EXPECT_TRUE(torch::allclose(ops::prefix_linear_attention(q, k, v, elu, zero),
                              ops::linear_attention(q, k, v, elu, true), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(ops::prefix_linear_attention(q, k, v, elu, all),
                              ops::linear_attention(q, k, v, elu, false), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(ops::prefix_cosformer_attention(q, k, v, zero),
                              ops::cosformer_attention(q, k, v, true), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(ops::prefix_cosformer_attention(q, k, v, all),
                              ops::cosformer_attention(q, k, v, false), 1e-5, 1e-6));
}

TEST(PrefixFeatureAttention, FavorGoesThroughTheExplicitMask) {
  torch::manual_seed(4);
  const int64_t n = 30;
  auto fm = ops::FeatureMap::favor(4, 12, 5);
  auto q = torch::randn({2, 2, n, 4}, torch::kDouble), k = torch::randn({2, 2, n, 4}, torch::kDouble);
  auto v = torch::randn({2, 2, n, 3}, torch::kDouble);
  auto prefix = torch::tensor({4, 30}, torch::kLong);
  auto keep = torch::ones({2, n}, torch::kBool);
  keep.index_put_({0, Slice(25, n)}, false);
  auto got = ops::prefix_linear_attention(q, k, v, fm, prefix, keep);
  auto want = reference::linear_attention(q, k, v, fm, false, keep, ops::prefix_lm_mask(prefix, n));
  EXPECT_TRUE(torch::allclose(got, want, 1e-9, 1e-11)) << max_error(got, want);
}

TEST(PrefixFeatureAttention, BadInputsAreOneLineErrors) {
  auto q = torch::randn({2, 1, 5, 3}), v = torch::randn({2, 1, 5, 2});
  const auto elu = ops::FeatureMap::elu();
  auto expect_error = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error (expected one about " << part << ")";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(part), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  expect_error([&] { ops::prefix_linear_attention(q, q, v, elu, torch::tensor({1}, torch::kLong)); },
               "prefix_lengths");
  expect_error([&] { ops::prefix_linear_attention(q, q, v, elu, torch::tensor({1.0, 2.0})); },
               "integer");
  expect_error([&] { ops::prefix_cosformer_attention(q, q, v, torch::tensor({1, 6}, torch::kLong)); },
               "[0, 5]");
  expect_error([&] { ops::prefix_cosformer_attention(q, q, v, torch::tensor({-1, 2}, torch::kLong)); },
               "[0, 5]");
  auto k6 = torch::randn({2, 1, 6, 3}), v6 = torch::randn({2, 1, 6, 2});
  expect_error([&] { ops::prefix_linear_attention(q, k6, v6, elu, torch::tensor({1, 2}, torch::kLong)); },
               "L = S");
  expect_error([&] { ops::unilm_prefix_lengths(torch::tensor({{0, 1, 0}}, torch::kLong)); },
               "0…0 1…1");
  expect_error([&] { ops::unilm_prefix_lengths(torch::tensor({{0, 2, 2}}, torch::kLong)); },
               "0…0 1…1");
}

TEST(PrefixFeatureAttention, UnilmPrefixLengthsOfWholeRows) {
  auto p = ops::unilm_prefix_lengths(torch::tensor({{0, 0, 0}, {1, 1, 1}, {0, 1, 1}}, torch::kLong));
  EXPECT_TRUE(p.equal(torch::tensor({3, 0, 1}, torch::kLong)));
  EXPECT_EQ(ops::unilm_prefix_lengths(torch::zeros({2, 0}, torch::kLong)).numel(), 2);
}

}  // namespace
}  // namespace attnkit
