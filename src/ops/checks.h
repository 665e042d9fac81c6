#pragma once
// Argument checks shared by the ops' checked entry points. Private to src/.
#include <ATen/core/Tensor.h>

#include <string>

namespace attnkit::ops::detail {

// "[2, 4, 7, 16]"
std::string shape_str(const at::Tensor& t);
std::string shape_str(at::IntArrayRef sizes);

// Throws attnkit::Error "<op>: <msg>".
[[noreturn]] void fail(const char* op, const std::string& msg);

void check_defined(const char* op, const char* name, const at::Tensor& t);
void check_rank(const char* op, const char* name, const at::Tensor& t, int64_t rank,
                const char* layout);
void check_floating(const char* op, const char* name, const at::Tensor& t);
void check_same_dtype(const char* op, const char* name_a, const at::Tensor& a, const char* name_b,
                      const at::Tensor& b);

// q [B, H, L, dk], k [B, H, S, dk], v [B, H, S, dv]: ranks, dtypes and matching dimensions.
// grouped_kv: k and v may have Hkv heads dividing H (grouped-query attention).
void check_qkv(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
               bool grouped_kv = false);

// A boolean (true = attend) or additive floating mask broadcastable to [B, H, L, S].
void check_attention_mask(const char* op, const at::Tensor& mask, int64_t B, int64_t H, int64_t L,
                          int64_t S, const at::Tensor& like);

// key_padding_mask [B, S] bool, true = real key.
void check_key_padding_mask(const char* op, const at::Tensor& mask, int64_t B, int64_t S);

}  // namespace attnkit::ops::detail
