#pragma once
// Attention masks. Every mask is a bool tensor, true = "query i may attend key j", shaped to
// broadcast against attention logits [batch, heads, L, S]. Masks compose with combine_masks (AND).
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnkit::ops {

// [1, 1, L, S]. Bottom-right aligned: query i sits at absolute position i + (S - L), so query i may
// attend key j iff j <= i + S - L. For L == S this is the usual lower-triangular mask; for L < S
// (the last L queries of a longer sequence, as in incremental decoding) it stays correct.
at::Tensor causal_mask(int64_t L, int64_t S);

// key_valid [batch, S] bool (true = real token) -> [batch, 1, 1, S].
at::Tensor padding_mask(const at::Tensor& key_valid);

// lengths [batch] (int64) -> [batch, 1, 1, S]; key j is valid iff j < lengths[b].
at::Tensor padding_mask_from_lengths(const at::Tensor& lengths, int64_t S);

// Prefix LM over n tokens: the first prefix_length tokens attend each other bidirectionally,
// the rest attend the prefix and causally. prefix_lengths [batch] (int64) -> [batch, 1, n, n].
at::Tensor prefix_lm_mask(const at::Tensor& prefix_lengths, int64_t n);
at::Tensor prefix_lm_mask(int64_t prefix_length, int64_t n);  // -> [1, 1, n, n]

// UniLM seq2seq mask from segment ids [batch, n] (0 = source, 1 = target): with c = cumsum(seg),
// i may attend j iff c[j] <= c[i]. Source tokens see the whole source; target tokens see the
// source and the target so far. -> [batch, 1, n, n].
at::Tensor unilm_mask(const at::Tensor& segment_ids);

// The prefix lengths [batch] (int64) of UniLM segment ids [batch, n] of the form 0…0 1…1 (source,
// then target and its padding, as models::unilm_batch writes them): the index of each row's first
// 1 (n when there is none). Then unilm_mask(segment_ids) = prefix_lm_mask(lengths, n), the form
// the linear kinds take in O(n) (prefix_linear_attention). Throws attnkit::Error for a row with a
// 0 after a 1 or a value other than 0 and 1.
at::Tensor unilm_prefix_lengths(const at::Tensor& segment_ids);

// XLNet permutation LM masks. permutation [n] or [batch, n] lists positions in factorisation
// order (permutation[t] is the position predicted at step t). With rank[permutation[t]] = t:
// content stream: i may attend j iff rank[j] <= rank[i]; query stream: iff rank[j] < rank[i].
// Both -> [batch, 1, n, n] (batch = 1 for a 1-d permutation).
struct XLNetMasks {
  at::Tensor content;
  at::Tensor query;
};
XLNetMasks xlnet_masks(const at::Tensor& permutation);

// Logical AND of two bool masks (broadcasting).
at::Tensor combine_masks(const at::Tensor& a, const at::Tensor& b);

}  // namespace attnkit::ops
// Kernel: src/ops/masks.cpp (ATen ops). Tests: tests/ops/masks_test.cpp (Masks.*).
