// The RNN state of linear attention and cosFormer with rotary positions (RoFormer section 3.4;
// a linearized Llama-family model decodes through it, issue 45): cached decoding -- a long
// prompt (the causal-product kernel's blocks), then blocks and single columns, grouped key/value
// heads, trained feature maps, beam search's select_rows, left padding -- equals the layer's full
// forward over every column so far, and the state keeps its size whatever the length.
#include "attnkit/decode/incremental.h"
#include "attnkit/error.h"
#include "attnkit/layers/attention_spec.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/ops/rotary.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

using namespace attnkit;

constexpr int64_t kHidden = 24, kHeads = 4, kHeadSize = 6;

layers::MultiHeadAttention rotary_linear(const std::string& kind, int64_t kv_heads) {
  layers::AttentionSpec spec = layers::AttentionSpec::parse(kind);
  spec.causal = true;
  spec.kv_heads = kv_heads;
  torch::manual_seed(17);
  layers::MultiHeadAttention attention(layers::MultiHeadAttentionOptions(kHidden, kHeads).spec(spec));
  attention->to(at::kDouble);
  attention->eval();
  torch::NoGradGuard no_grad;
  for (auto& p : attention->named_parameters())  // away from the identity start of hedgehog's map
    if (p.key().find("feature_map") != std::string::npos) p.value().add_(0.3 * torch::randn_like(p.value()));
  return attention;
}

ops::RotaryTables tables(const at::Tensor& positions) {
  ops::RotaryConfig config;
  config.head_dim = kHeadSize;
  config.theta = 100.0;  // fast rotations: positions matter within a few columns
  return ops::rotary_tables(ops::rotary_frequencies(config), positions);
}

// The full causal forward of x [B, T, hidden] (no padding), positions 0..T-1.
at::Tensor full_forward(layers::MultiHeadAttention& attention, const at::Tensor& x) {
  layers::AttentionInputs in;
  in.rotary = tables(torch::arange(x.size(1), at::kLong).unsqueeze(0));
  return attention->forward(x, in).output;
}

// Decodes x block by block (`blocks` summing to T) through the state and compares each block's
// outputs with the full forward; row 1 is left padded by `pad` columns (its real columns are at
// positions 0.., as HF numbers them, and are compared with the forward of its real columns
// alone). After `select_at` columns (if > 0) the rows are reordered by `index`.
void check_decoding(const std::string& kind, int64_t kv_heads, const std::vector<int64_t>& blocks,
                    int64_t pad, int64_t select_at = 0, const at::Tensor& index = at::Tensor()) {
  torch::NoGradGuard no_grad;
  auto attention = rotary_linear(kind, kv_heads);
  int64_t T = 0;
  for (int64_t n : blocks) T += n;
  torch::manual_seed(23);
  at::Tensor x = torch::randn({2, T, kHidden}, torch::kDouble);
  at::Tensor valid = torch::ones({2, T}, torch::kBool);
  valid[1].narrow(0, 0, pad).fill_(false);
  at::Tensor positions = (valid.cumsum(1) - 1).clamp_min(0);
  // Each row's expected outputs: the forward of its real columns, put back at their columns.
  auto expected = [&](const at::Tensor& rows) {
    at::Tensor want = torch::zeros({rows.size(0), T, kHidden}, torch::kDouble);
    for (int64_t b = 0; b < rows.size(0); ++b) {
      const int64_t first = T - valid[b].sum().item<int64_t>();
      want[b].narrow(0, first, T - first).copy_(full_forward(attention, rows[b].narrow(0, first, T - first).unsqueeze(0))[0]);
    }
    return want;
  };
  at::Tensor want = expected(x);
  auto cache = decode::make_state(*attention, T);
  const std::string what = kind + " kv_heads " + std::to_string(kv_heads) + " pad " + std::to_string(pad) +
                           (select_at > 0 ? " with select_rows" : "");
  int64_t column = 0;
  for (int64_t n : blocks) {
    if (select_at > 0 && column == select_at) {
      cache->select_rows(index);
      x = x.index_select(0, index);
      valid = valid.index_select(0, index);
      positions = positions.index_select(0, index);
      want = want.index_select(0, index);
    }
    layers::StepInputs in;
    in.valid = valid.narrow(1, column, n);
    in.positions = positions.narrow(1, column, n);
    in.rotary = tables(in.positions);
    at::Tensor got = attention->step(x.narrow(1, column, n), in, *cache);
    at::Tensor w = want.narrow(1, column, n);
    at::Tensor real = in.valid.unsqueeze(-1).expand_as(got);
    // Sums in another order than the parallel op's; relu features leave some denominators near
    // the 1e-6 epsilon, which magnifies that to ~1e-9 (a wrong rotation or sum is off by O(1)).
    EXPECT_TRUE(torch::allclose(got.masked_select(real), w.masked_select(real), 1e-7, 1e-8))
        << what << ": columns " << column << ".." << column + n - 1 << " max err "
        << (got - w).masked_select(real).abs().max().item<double>();
    column += n;
    EXPECT_EQ(cache->length(), column);
  }
}

TEST(RotaryLinearState, StepsEqualFullForward) {
  // A 70-column prompt, then single columns and a block on top of the sums.
  for (const std::string kind : {"linear:elu", "linear:hedgehog", "linear:t2r"})
    for (int64_t kv_heads : {4, 2}) check_decoding(kind, kv_heads, {70, 1, 1, 3, 1, 1}, 3);
  check_decoding("linear:hedgehog", 1, {1, 1, 1, 1, 1, 1, 1}, 2);
  check_decoding("linear:relu", 2, {5, 130, 1}, 4);
  // cosFormer: M = the horizon = every column here, so the full forward over all of them is the
  // reference for each block (its outputs are causal); no padding (its angles follow columns).
  for (int64_t kv_heads : {4, 2}) check_decoding("cosformer", kv_heads, {70, 1, 1, 3, 1, 1}, 0);
  check_decoding("cosformer", 1, {1, 1, 1, 1, 2, 1}, 0);
}

TEST(RotaryLinearState, SelectRowsReordersTheState) {
  const at::Tensor index = torch::tensor({1, 0, 1}, at::kLong);
  check_decoding("linear:hedgehog", 2, {6, 1, 1, 2, 1}, 2, 7, index);
}

TEST(RotaryLinearState, SizeIsFixed) {
  torch::NoGradGuard no_grad;
  // hedgehog's map and cosFormer's features are 2 · head size wide: numerator [1, 4, 12, 6] +
  // denominator [1, 4, 12], doubles.
  for (const std::string kind : {"linear:hedgehog", "cosformer"}) {
    auto attention = rotary_linear(kind, 2);
    auto cache = decode::make_state(*attention, 100);
    for (int64_t t = 0; t < 100; ++t) {
      layers::StepInputs in;
      in.valid = torch::ones({1, 1}, torch::kBool);
      in.positions = torch::full({1, 1}, t, at::kLong);
      in.rotary = tables(in.positions);
      attention->step(torch::randn({1, 1, kHidden}, torch::kDouble), in, *cache);
      EXPECT_EQ(cache->bytes(), (4 * 12 * 6 + 4 * 12) * int64_t(sizeof(double))) << kind << " column " << t;
    }
  }
}

}  // namespace
