#pragma once
// The catalogue of every attention variant in the zoo, runnable on random input: the CLI's
// `attention` and `demo` subcommands and the tests run a variant and its float64 oracle from it.
// It is the one table a new variant registers in (src/ops/variants.cpp): its kind (in the grammar
// of attnkit/attention_kind.h), description, traits and how to build a case. Tests iterate it.
#include "attnkit/attention_kind.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attnkit::ops {

// What a variant does and does not do. Every variant honours causality, key padding and L ≠ S
// (the oracle test runs all of them that way), so those are not traits. Each trait below is
// checked against the op by tests/ops/variant_oracle_test.cpp (VariantTraits.*).
struct VariantInfo {
  std::string kind;         // canonical spelling, e.g. "cosformer", "linear:favor"
  std::string description;  // one line
  // The output depends on q / on k (random Synthesizers read neither; MultiHeadAttention builds
  // no projection for what a kind does not read).
  bool reads_queries = true;
  bool reads_keys = true;
  // Takes an arbitrary bool mask (UniLM, XLNet, prefix LM); false: causality and key padding
  // only, and a mask is refused with an error (linear kinds and cosFormer take the prefix-LM and
  // UniLM masks as prefix lengths instead: prefix_linear_attention, prefix_cosformer_attention).
  bool general_mask = true;
  // Causal with more queries than keys (L > S, bottom-right aligned: the first L − S queries see
  // no key and give zeros); false: refused with an error naming L <= S.
  bool causal_more_queries = true;
  // Has a token-by-token (RNN) form, ops/recurrent.h, equal to the causal op.
  bool recurrent_step = false;
  // The fused CPU op it runs through for float32/float64 (its autograd node carries this name),
  // e.g. "FlashAttention"; empty: composed from ATen ops.
  std::string fused_kernel;
  // The kind this one approximates (FAVOR approximates softmax with random features); empty:
  // exact, it computes its own formula.
  std::string approximates;

  bool exact() const { return approximates.empty(); }
  bool has_fused_kernel() const { return !fused_kernel.empty(); }
};

// All variants, in display order.
const std::vector<VariantInfo>& attention_variants();
// The entry of a kind string (any spelling parse_attention_kind accepts, e.g. "linear:favor:64:7"
// finds "linear:favor"); throws attnkit::Error for a kind the catalogue does not run.
const VariantInfo& variant_info(const std::string& kind);

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
// gradient check can differentiate with respect to every input and trained parameter (fixed
// ones, like synthesizer-random-fixed's alignment, are held by the functions instead).
struct VariantCase {
  std::string kind;  // canonical
  bool causal = false;
  std::vector<at::Tensor> inputs;
  VariantFn op;         // the op (input dtype)
  VariantFn reference;  // the float64 oracle
  VariantFn recurrent;  // token by token (ops/recurrent.h); empty without recurrent_step
  at::Tensor run() const { return op(inputs); }
  at::Tensor run_reference() const { return reference(inputs); }
  // The recurrent form over all L tokens, [batch, heads, L, dv]; throws attnkit::Error for a kind
  // without one, or a case that is not causal with L = S and no key padding.
  at::Tensor run_recurrent() const;
};

// key_padding [batch, S] bool (true = real key) is honoured by every variant; mask (bool, true =
// may attend, broadcastable to [batch, heads, L, S]) only by those with general_mask (others throw
// attnkit::Error). kind: any spelling parse_attention_kind accepts whose entry is in the
// catalogue (a favor kind's M and SEED are used). Throws attnkit::Error for an unknown kind
// (listing the catalogue) or a non-positive size.
VariantCase make_variant_case(const std::string& kind, const VariantShape& shape, bool causal,
                              uint64_t seed, at::ScalarType dtype,
                              const c10::optional<at::Tensor>& key_padding = c10::nullopt,
                              const c10::optional<at::Tensor>& mask = c10::nullopt);

}  // namespace attnkit::ops
// Kernel: src/ops/variants.cpp (the table; each variant's op runs its own kernel). Tests: tests/ops/variant_oracle_test.cpp (VariantOracle.*, VariantProperty.*, VariantTraits.*, VariantCatalogue.*).
