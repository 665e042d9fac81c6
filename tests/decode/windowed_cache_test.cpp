// The KV cache of grouped heads under a sliding window (issue 42): it keeps only the last `window`
// columns (a ring buffer: bytes() stays O(window)), and cached decoding -- prompt steps of several
// columns, one-column steps, the ring wrapping around, left padding, beam search's select_rows --
// equals the layer's full forward over every column so far.
#include "attnkit/decode/incremental.h"
#include "attnkit/error.h"
#include "attnkit/layers/multi_head_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

using namespace attnkit;

layers::MultiHeadAttention grouped_attention(int64_t kv_heads, int64_t window) {
  layers::AttentionSpec spec;
  spec.kind = AttentionKind::Softmax;
  spec.causal = true;
  spec.kv_heads = kv_heads;
  spec.window = window;
  torch::manual_seed(17);
  layers::MultiHeadAttention attention(layers::MultiHeadAttentionOptions(24, 4).spec(spec));
  attention->to(at::kDouble);
  attention->eval();
  return attention;
}

// The full forward's outputs [B, T, hidden] of x [B, T, hidden] with left padding `valid`.
at::Tensor full_forward(layers::MultiHeadAttention& attention, const at::Tensor& x,
                        const at::Tensor& valid) {
  layers::AttentionInputs in;
  in.key_padding = valid;
  return attention->forward(x, in).output;
}

// Decodes x column block by column block (`blocks` sizes summing to T) and compares each block's
// outputs at its real columns with the full forward. After `select_at` columns (if > 0) the rows
// are reordered by `index` (beams: repeats allowed) and decoding goes on with x's rows reordered.
// B rows, row 1 left padded.
void check_decoding(int64_t kv_heads, int64_t window, const std::vector<int64_t>& blocks,
                    int64_t select_at = 0, const at::Tensor& index = at::Tensor(), int64_t B = 2) {
  torch::NoGradGuard no_grad;
  auto attention = grouped_attention(kv_heads, window);
  int64_t T = 0;
  for (int64_t n : blocks) T += n;
  torch::manual_seed(23);
  at::Tensor x = torch::randn({B, T, 24}, torch::kDouble);
  at::Tensor valid = torch::ones({B, T}, torch::kBool);
  valid[1].narrow(0, 0, 3).fill_(false);  // row 1 left padded by 3 columns
  auto cache = decode::make_state(*attention, T);
  const std::string what = "kv_heads " + std::to_string(kv_heads) + " window " +
                           std::to_string(window) + (select_at > 0 ? " with select_rows" : "");
  int64_t column = 0;
  for (int64_t n : blocks) {
    if (select_at > 0 && column == select_at) {
      cache->select_rows(index);
      x = x.index_select(0, index);
      valid = valid.index_select(0, index);
    }
    layers::StepInputs in;
    in.valid = valid.narrow(1, column, n);
    in.positions = at::zeros({x.size(0), n}, at::kLong);  // no rotary here: unused
    at::Tensor got = attention->step(x.narrow(1, column, n), in, *cache);
    at::Tensor want = full_forward(attention, x, valid).narrow(1, column, n);
    at::Tensor real = in.valid.unsqueeze(-1).expand_as(got);
    EXPECT_TRUE(torch::allclose(got.masked_select(real), want.masked_select(real), 1e-10, 1e-12))
        << what << ": columns " << column << ".." << column + n - 1 << " max err "
        << (got - want).masked_select(real).abs().max().item<double>();
    column += n;
    EXPECT_EQ(cache->length(), column);
  }
}

TEST(WindowedCache, GroupedStepsEqualFullForward) {
  // A prompt of 5 columns, then one column at a time past the window: the ring wraps around.
  for (int64_t kv_heads : {4, 2, 1})
    for (int64_t window : {0, 1, 3, 4, 100})
      check_decoding(kv_heads, window, {5, 1, 1, 1, 1, 1, 1, 1, 1, 1});
}

TEST(WindowedCache, SeveralColumnsPerStepAcrossTheRing) {
  // Blocks of several columns after the prompt (the kept columns put in order before them),
  // blocks longer than the window, and single columns between them.
  for (int64_t window : {2, 3, 5})
    check_decoding(2, window, {4, 2, 1, 7, 1, 3, 1, 1});
  check_decoding(1, 4, {1, 1, 1, 1, 1, 6, 1});
}

TEST(WindowedCache, SelectRowsKeepsTheRing) {
  // Beam search reorders and repeats rows once the ring has wrapped (and before it has).
  const at::Tensor index = torch::tensor({1, 0, 1}, at::kLong);
  check_decoding(2, 3, {4, 1, 1, 1, 1, 1, 1}, 7, index);
  check_decoding(2, 3, {2, 1, 1, 1, 1}, 2, index);
  check_decoding(2, 6, {4, 1, 1, 1, 1, 2, 1}, 8, index);
}

TEST(WindowedCache, BytesStayWithinTheWindow) {
  // The state holds B · Hkv · (key_size + value_size) values a column, for at most `window`
  // columns; without a window, for every column.
  torch::NoGradGuard no_grad;
  const int64_t B = 2, kv_heads = 2, head_size = 6, window = 4, T = 40;
  const int64_t per_column = B * kv_heads * 2 * head_size * int64_t(sizeof(double));
  for (int64_t w : {window, int64_t(0)}) {
    auto attention = grouped_attention(kv_heads, w);
    auto cache = decode::make_state(*attention, T);
    EXPECT_EQ(cache->bytes(), 0);
    torch::manual_seed(1);
    for (int64_t t = 0; t < T; ++t) {
      layers::StepInputs in;
      in.valid = torch::ones({B, 1}, torch::kBool);
      in.positions = torch::full({B, 1}, t, at::kLong);
      attention->step(torch::randn({B, 1, 24}, torch::kDouble), in, *cache);
      const int64_t kept = w > 0 ? std::min(t + 1, w) : t + 1;
      EXPECT_EQ(cache->bytes(), kept * per_column) << "window " << w << " column " << t;
    }
  }
}

TEST(WindowedCache, SelectRowsInPlaceWhenFewRowsMove) {
  // Of 5 rows, two swap or one takes another's columns: the cache moves those rows in place
  // (from copies of their sources), the other rows stay where they are.
  for (int64_t window : {0, 3}) {
    check_decoding(2, window, {4, 1, 1, 1, 1}, 5, torch::tensor({1, 0, 2, 3, 4}, at::kLong), 5);
    check_decoding(2, window, {4, 1, 1, 1, 1}, 5, torch::tensor({0, 1, 1, 3, 4}, at::kLong), 5);
    check_decoding(2, window, {4, 1, 1, 1, 1}, 5, torch::tensor({0, 1, 2, 3, 4}, at::kLong), 5);
  }
}

}  // namespace
