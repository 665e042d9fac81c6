#pragma once
// A catalogue of every attention variant in the zoo, runnable on random input: the CLI's
// `attention` subcommand and `demo` use it to run a variant and its float64 oracle.
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attnkit::ops {

struct VariantInfo {
  std::string kind;         // e.g. "cosformer"
  std::string description;  // one line
  bool supports_causal;
};

// All kinds, in display order.
const std::vector<VariantInfo>& attention_variants();

struct VariantShape {
  int64_t batch = 1;
  int64_t heads = 4;
  int64_t queries = 128;  // L
  int64_t keys = 128;     // S
  int64_t key_dim = 32;   // dk
  int64_t value_dim = 32; // dv
};

using VariantFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// Random inputs and parameters for one variant, with the op and its oracle ready to call.
// inputs = {q, k, v, parameters...}; op(inputs) and reference(inputs) take the same list, so a
// gradient check can differentiate with respect to every input and parameter.
struct VariantCase {
  std::string kind;
  bool causal = false;
  std::vector<at::Tensor> inputs;
  VariantFn op;         // the op (input dtype)
  VariantFn reference;  // the float64 oracle
  at::Tensor run() const { return op(inputs); }
  at::Tensor run_reference() const { return reference(inputs); }
};

// key_padding [batch, S] bool (true = real key) is honoured by every variant. Throws
// attnkit::Error for an unknown kind (listing the known ones) or a non-positive size.
VariantCase make_variant_case(const std::string& kind, const VariantShape& shape, bool causal,
                              uint64_t seed, at::ScalarType dtype,
                              const c10::optional<at::Tensor>& key_padding = c10::nullopt);

}  // namespace attnkit::ops
