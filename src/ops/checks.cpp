#include "checks.h"

#include "attnkit/error.h"

#include <fmt/format.h>

namespace attnkit::ops::detail {

std::string shape_str(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(sizes[i]);
  }
  return s + "]";
}

std::string shape_str(const at::Tensor& t) {
  return t.defined() ? shape_str(t.sizes()) : std::string("<undefined>");
}

void fail(const char* op, const std::string& msg) { throw Error(fmt::format("{}: {}", op, msg)); }

void check_defined(const char* op, const char* name, const at::Tensor& t) {
  if (!t.defined()) fail(op, fmt::format("{} is an undefined tensor", name));
}

void check_rank(const char* op, const char* name, const at::Tensor& t, int64_t rank,
                const char* layout) {
  check_defined(op, name, t);
  if (t.dim() != rank)
    fail(op, fmt::format("{} must have {} dimensions {} but has shape {}", name, rank, layout,
                         shape_str(t)));
}

void check_floating(const char* op, const char* name, const at::Tensor& t) {
  if (!at::isFloatingType(t.scalar_type()))
    fail(op, fmt::format("{} must be a floating tensor (float32/float64) but has dtype {}", name,
                         c10::toString(t.scalar_type())));
}

void check_same_dtype(const char* op, const char* name_a, const at::Tensor& a, const char* name_b,
                      const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type())
    fail(op, fmt::format("{} has dtype {} but {} has dtype {}; they must match", name_b,
                         c10::toString(b.scalar_type()), name_a, c10::toString(a.scalar_type())));
}

void check_qkv(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
               bool grouped_kv) {
  check_rank(op, "q", q, 4, "[batch, heads, L, dk]");
  check_rank(op, "k", k, 4, "[batch, heads, S, dk]");
  check_rank(op, "v", v, 4, "[batch, heads, S, dv]");
  check_floating(op, "q", q);
  check_same_dtype(op, "q", q, "k", k);
  check_same_dtype(op, "q", q, "v", v);
  if (grouped_kv && k.size(1) != q.size(1) &&
      (k.size(1) == 0 || q.size(1) % k.size(1) != 0 || v.size(1) != k.size(1)))
    fail(op, fmt::format("k has shape {}, v {} and q {}; the key/value heads must be equal and "
                         "divide the query heads",
                         shape_str(k), shape_str(v), shape_str(q)));
  const int64_t kv_heads = grouped_kv ? k.size(1) : q.size(1);
  if (k.size(0) != q.size(0) || k.size(1) != kv_heads)
    fail(op, fmt::format("k has shape {} but q has shape {}; batch and heads must match",
                         shape_str(k), shape_str(q)));
  if (v.size(0) != q.size(0) || v.size(1) != kv_heads)
    fail(op, fmt::format("v has shape {} but q has shape {}; batch and heads must match",
                         shape_str(v), shape_str(q)));
  if (k.size(3) != q.size(3))
    fail(op, fmt::format("k has shape {} but q has shape {}; q and k must have the same last "
                         "dimension (dk)",
                         shape_str(k), shape_str(q)));
  if (v.size(2) != k.size(2))
    fail(op, fmt::format("v has shape {} but k has shape {}; k and v must have the same "
                         "sequence length (S)",
                         shape_str(v), shape_str(k)));
}

void check_attention_mask(const char* op, const at::Tensor& mask, int64_t B, int64_t H, int64_t L,
                          int64_t S, const at::Tensor& like) {
  const std::string target = shape_str({B, H, L, S});
  if (mask.scalar_type() != at::kBool && !at::isFloatingType(mask.scalar_type()))
    fail(op, fmt::format("mask has dtype {}; expected bool (true = attend) or an additive "
                         "floating mask",
                         c10::toString(mask.scalar_type())));
  if (at::isFloatingType(mask.scalar_type()) && mask.scalar_type() != like.scalar_type())
    fail(op, fmt::format("additive mask has dtype {} but q has dtype {}; they must match",
                         c10::toString(mask.scalar_type()), c10::toString(like.scalar_type())));
  if (mask.dim() > 4)
    fail(op, fmt::format("mask has shape {}; it must be broadcastable to {}", shape_str(mask),
                         target));
  const int64_t full[4] = {B, H, L, S};
  for (int64_t i = 0; i < mask.dim(); ++i) {
    const int64_t m = mask.size(mask.dim() - 1 - i);
    const int64_t want = full[3 - i];
    if (m != 1 && m != want)
      fail(op, fmt::format("mask has shape {}; it must be broadcastable to {}", shape_str(mask),
                           target));
  }
}

void check_key_padding_mask(const char* op, const at::Tensor& mask, int64_t B, int64_t S) {
  if (mask.scalar_type() != at::kBool)
    fail(op, fmt::format("key_padding_mask has dtype {}; expected bool [batch, S] with true = "
                         "real key",
                         c10::toString(mask.scalar_type())));
  if (mask.dim() != 2 || mask.size(0) != B || mask.size(1) != S)
    fail(op, fmt::format("key_padding_mask has shape {}; expected {}", shape_str(mask),
                         shape_str({B, S})));
}

}  // namespace attnkit::ops::detail
