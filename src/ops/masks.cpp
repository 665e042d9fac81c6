#include "attnkit/ops/masks.h"

#include "attnkit/error.h"
#include "checks.h"

#include <fmt/format.h>

namespace attnkit::ops {

using detail::fail;
using detail::shape_str;

namespace {

at::Tensor positions(int64_t n) { return at::arange(n, at::TensorOptions().dtype(at::kLong)); }

void check_int_tensor(const char* op, const char* name, const at::Tensor& t, int64_t rank) {
  detail::check_defined(op, name, t);
  if (t.dim() != rank)
    fail(op, fmt::format("{} must have {} dimension(s) but has shape {}", name, rank,
                         shape_str(t)));
  if (at::isFloatingType(t.scalar_type()) || t.scalar_type() == at::kBool)
    fail(op, fmt::format("{} must be an integer tensor but has dtype {}", name,
                         c10::toString(t.scalar_type())));
}

}  // namespace

at::Tensor causal_mask(int64_t L, int64_t S) {
  if (L < 0 || S < 0) fail("causal_mask", fmt::format("L={} and S={} must be >= 0", L, S));
  auto i = positions(L).unsqueeze(1) + (S - L);
  auto j = positions(S).unsqueeze(0);
  return j.le(i).view({1, 1, L, S});
}

at::Tensor padding_mask(const at::Tensor& key_valid) {
  detail::check_rank("padding_mask", "key_valid", key_valid, 2, "[batch, S]");
  if (key_valid.scalar_type() != at::kBool)
    fail("padding_mask", fmt::format("key_valid must be bool (true = real token) but has dtype {}",
                                     c10::toString(key_valid.scalar_type())));
  return key_valid.view({key_valid.size(0), 1, 1, key_valid.size(1)});
}

at::Tensor padding_mask_from_lengths(const at::Tensor& lengths, int64_t S) {
  check_int_tensor("padding_mask_from_lengths", "lengths", lengths, 1);
  auto valid = positions(S).unsqueeze(0).lt(lengths.to(at::kLong).unsqueeze(1));
  return padding_mask(valid);
}

at::Tensor prefix_lm_mask(const at::Tensor& prefix_lengths, int64_t n) {
  check_int_tensor("prefix_lm_mask", "prefix_lengths", prefix_lengths, 1);
  auto p = prefix_lengths.to(at::kLong).view({-1, 1, 1});
  auto i = positions(n).view({1, n, 1});
  auto j = positions(n).view({1, 1, n});
  return (j.lt(p) | j.le(i)).unsqueeze(1);
}

at::Tensor prefix_lm_mask(int64_t prefix_length, int64_t n) {
  return prefix_lm_mask(at::full({1}, prefix_length, at::TensorOptions().dtype(at::kLong)), n);
}

at::Tensor unilm_mask(const at::Tensor& segment_ids) {
  check_int_tensor("unilm_mask", "segment_ids", segment_ids, 2);
  auto c = segment_ids.to(at::kLong).cumsum(1);
  return c.unsqueeze(1).le(c.unsqueeze(2)).unsqueeze(1);
}

at::Tensor unilm_prefix_lengths(const at::Tensor& segment_ids) {
  check_int_tensor("unilm_prefix_lengths", "segment_ids", segment_ids, 2);
  auto seg = segment_ids.to(at::kCPU).to(at::kLong);
  const int64_t n = seg.size(1);
  if (seg.numel() > 0) {
    const bool binary = seg.eq(0).logical_or(seg.eq(1)).all().item<bool>();
    // 0…0 1…1: never a 0 right after a 1.
    const bool ordered =
        n < 2 || !seg.narrow(1, 1, n - 1).lt(seg.narrow(1, 0, n - 1)).any().item<bool>();
    if (!binary || !ordered)
      fail("unilm_prefix_lengths",
           fmt::format("segment_ids of shape {} must be 0…0 1…1 in every row (source, then "
                       "target); use unilm_mask for other layouts",
                       shape_str(segment_ids)));
  }
  return (n - seg.sum(1)).contiguous();
}

XLNetMasks xlnet_masks(const at::Tensor& permutation) {
  detail::check_defined("xlnet_masks", "permutation", permutation);
  auto perm = permutation.dim() == 1 ? permutation.unsqueeze(0) : permutation;
  check_int_tensor("xlnet_masks", "permutation", perm, 2);
  perm = perm.to(at::kLong);
  const int64_t n = perm.size(1);
  // Every row must be a permutation of 0..n-1.
  auto sorted = std::get<0>(perm.sort(1));
  if (!sorted.eq(positions(n).unsqueeze(0)).all().item<bool>())
    fail("xlnet_masks", fmt::format("permutation of shape {} is not a permutation of 0..{} in "
                                    "every row",
                                    shape_str(permutation), n - 1));
  auto rank = at::empty_like(perm).scatter_(1, perm, positions(n).unsqueeze(0).expand_as(perm));
  auto ri = rank.unsqueeze(2);
  auto rj = rank.unsqueeze(1);
  return {rj.le(ri).unsqueeze(1), rj.lt(ri).unsqueeze(1)};
}

at::Tensor combine_masks(const at::Tensor& a, const at::Tensor& b) {
  detail::check_defined("combine_masks", "a", a);
  detail::check_defined("combine_masks", "b", b);
  if (a.scalar_type() != at::kBool || b.scalar_type() != at::kBool)
    fail("combine_masks", fmt::format("masks must be bool, got {} and {}",
                                      c10::toString(a.scalar_type()),
                                      c10::toString(b.scalar_type())));
  try {
    return a.logical_and(b);
  } catch (const c10::Error&) {
    fail("combine_masks", fmt::format("masks of shape {} and {} do not broadcast", shape_str(a),
                                      shape_str(b)));
  }
}

}  // namespace attnkit::ops
