#pragma once
// Multi-head attention as a torch::nn module; the variant is an AttentionSpec value and the
// computation is delegated to ops/. Shapes: x [batch, L, hidden], memory [batch, S, kv_hidden];
// per head q/k have key_size and v has value_size (both independent of hidden / heads).
//
// The Llama families' attention is the softmax kind with AttentionSpec's extras: grouped-query
// attention (kv_heads key/value heads, k and v never repeated for the fused kernel), rotary
// positions on q and k (AttentionInputs::rotary / StepInputs::rotary: one table per model, made
// by the model), a sliding window, a logit soft-cap, an explicit scale, q/k RMS norms (Gemma 3),
// q/k/v biases without an o bias (Qwen2).
#include "attnkit/layers/attention_cache.h"
#include "attnkit/layers/attention_spec.h"
#include "attnkit/layers/conditional_layer_norm.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/rotary.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <utility>
#include <vector>

namespace attnkit::layers {

struct MultiHeadAttentionOptions {
  MultiHeadAttentionOptions(int64_t hidden, int64_t heads) : hidden_(hidden), heads_(heads) {}
  TORCH_ARG(int64_t, hidden);
  TORCH_ARG(int64_t, heads);
  // Width of the memory for cross attention; 0 = hidden.
  TORCH_ARG(int64_t, memory_hidden) = 0;
  TORCH_ARG(AttentionSpec, spec);
  // Dropout on the attention probabilities in training (softmax, Synthesizer, talking-heads and
  // mixture kinds; linear attention and cosFormer have no probabilities to drop).
  TORCH_ARG(double, dropout) = 0.0;
  // spec.qk_norm: the kind and eps of the q/k norms (the model's norm sites').
  TORCH_ARG(NormKind, norm) = NormKind::RmsNorm;
  TORCH_ARG(double, norm_eps) = 1e-6;
};

struct AttentionInputs {
  // bool (true = may attend) or additive (floating, same dtype as x, added to the logits),
  // broadcastable to [batch, heads, L, S]. Only kinds with explicit logits (softmax,
  // synthesizers, mixtures) accept it alone; linear/cosFormer take causal, padding and
  // prefix_lengths.
  c10::optional<at::Tensor> mask;
  // [batch] integer, self attention only: the prefix-LM mask ops/masks.h prefix_lm_mask
  // (query i < p_b sees keys j < p_b, query i >= p_b sees j < p_b and j <= i); UniLM is
  // ops::unilm_prefix_lengths(token types) with the padding in key_padding. Linear attention and
  // cosFormer run it in O(n) (ops::prefix_linear_attention, prefix_cosformer_attention); the
  // logit kinds use `mask` when it is given (it must then be the same mask, e.g. unilm_mask),
  // else prefix_lm_mask(prefix_lengths, L). With a causal spec the prefix changes nothing
  // (causal ∧ prefix = causal).
  c10::optional<at::Tensor> prefix_lengths;
  // bool [batch, S], true = real key.
  c10::optional<at::Tensor> key_padding;
  // int64 [batch | 1, L]: each query's position (the model's position ids, or offset + 0..L−1),
  // for the position-dependent kinds; the cached step gets them in StepInputs.
  c10::optional<at::Tensor> positions;
  // Rotary positions (self attention): the model's tables at `positions` (ops::RotaryEmbedding),
  // applied to q and k; undefined = none. The linear kinds rotate their feature maps instead
  // (ops::rotary_linear_attention, rotary_cosformer_attention; no key padding or prefix then).
  ops::RotaryTables rotary;
  bool need_weights = false;        // fill AttentionResult::weights
  bool need_head_contexts = false;  // fill AttentionResult::head_contexts
};

struct AttentionResult {
  at::Tensor output;         // [batch, L, hidden]
  at::Tensor weights;        // [batch, heads, L, S] (the weights that multiply v), if asked
  at::Tensor head_contexts;  // [batch, heads, L, value_size] before gates and output projection
};

class MultiHeadAttentionImpl : public torch::nn::Module {
 public:
  explicit MultiHeadAttentionImpl(const MultiHeadAttentionOptions& options);

  // Self attention (memory = x) or cross attention (memory given).
  AttentionResult forward(const at::Tensor& x, const AttentionInputs& inputs = {},
                          const c10::optional<at::Tensor>& memory = c10::nullopt);

  // One cached decoding step of self attention (decoding, decode/incremental.h): x [batch, n,
  // hidden] the new columns, `cache` the state of the columns before (in) and after (out).
  // Returns [batch, n, hidden], what forward gives at those columns over every column so far.
  // The dense layers run through the row kernels (layers/row_linear.h). Throws attnkit::Error
  // for bad shapes.
  at::Tensor step(const at::Tensor& x, const StepInputs& step, AttentionCache& cache);
  // One cached step of cross attention over the memory whose keys and values `cache` holds.
  at::Tensor step(const at::Tensor& x, MemoryCache& cache);
  // The keys and values of `memory` [batch, S, memory width] per head, [batch, heads, S, key_size
  // | value_size] (what a MemoryCache keeps).
  std::pair<at::Tensor, at::Tensor> memory_heads(const at::Tensor& memory);

  // Head gates ξ (Michel et al. 2019), [heads] or [batch, heads], multiplying each head's
  // context; an undefined tensor removes them. A gate tensor that requires grad receives
  // ∂loss/∂ξ (head importance).
  void set_head_gates(const at::Tensor& gates);
  const at::Tensor& head_gates() const { return head_gates_; }

  // Attention transfer (linearizing a trained softmax model; issue 45, stage 1; Zhang et al.
  // 2024, LoLCATs): with a teacher spec (a softmax spec, the layer's before conversion), forward
  // also computes the teacher's attention from the same q, k, v (rotary positions applied to q
  // and k as a softmax layer applies them), keeps the mean squared difference of this layer's
  // per-head contexts from the teacher's (transfer_loss(), differentiable in this layer's
  // parameters) and returns the teacher's output, so every layer above sees the teacher model's
  // activations. nullopt switches it off. Throws attnkit::Error for a teacher spec that is not
  // plain softmax, or a layer of a logit kind (nothing to transfer to).
  void set_transfer_teacher(const c10::optional<AttentionSpec>& teacher);
  bool transferring() const { return transfer_teacher_.has_value(); }
  // The last forward's transfer loss (a scalar; undefined before one or when not transferring).
  const at::Tensor& transfer_loss() const { return transfer_loss_; }

  // Grouped layers: query heads are removed with their rows of q and columns of o, and a
  // key/value head with its rows of k and v once no query head reads it (whole groups go when
  // all their query heads are named).
  // Physical head pruning (Michel et al. 2019): removes `heads`, given in the unpruned numbering
  // [0, original_heads()) as Hugging Face's prune_heads takes them (heads already removed are
  // skipped): their rows of q/k/v, their columns of o and their per-head parameters (Synthesizer
  // logits and MLPs, talking-heads' post-mixing columns). Outputs equal those of the unpruned
  // layer with the removed heads' gates at 0. Talking-heads keeps every q/k head (the pre-softmax
  // mixing reads all of them) and removes value heads only. Removing every head leaves o's bias.
  // Gates set before are narrowed to the kept heads. Throws attnkit::Error for an index outside
  // [0, original_heads()).
  void prune_heads(const std::vector<int64_t>& heads);
  // Removed heads, sorted, in the unpruned numbering.
  const std::vector<int64_t>& pruned_heads() const { return pruned_heads_; }
  // Head count before pruning.
  int64_t original_heads() const { return original_heads_; }
  // Heads of the q/k projections: heads() except for pruned talking-heads (original_heads()).
  int64_t query_heads() const { return query_heads_; }

  const MultiHeadAttentionOptions& options() const { return options_; }
  // Heads now (after pruning).
  int64_t heads() const { return options_.heads(); }
  // Key/value heads of the k and v projections (grouped-query attention: fewer than heads()).
  int64_t kv_heads() const { return kv_heads_; }
  bool grouped() const { return grouped_; }
  // Grouped layers: the key/value head each query head reads (now, after pruning).
  const std::vector<int64_t>& kv_of_head() const { return kv_of_head_; }
  // Every key/value head read by heads() / kv_heads() consecutive query heads (true for layers
  // without groups). Pruning query heads inside a group breaks it: the layer then gives each
  // query head its own copy of its key/value head (outputs unchanged, no longer grouped in the
  // kernel or the cache).
  bool uniform_groups() const;
  // The q/k norms' weights back to their initial value (spec.qk_norm; nothing otherwise).
  void reset_norms();
  int64_t key_size() const { return key_size_; }
  int64_t value_size() const { return value_size_; }
  // Linear attention's feature map (a trained one, t2r / hedgehog, over this layer's
  // feature_map_weight [heads, M, key_size] and feature_map_bias [heads, M] parameters); throws
  // attnkit::Error for the other kinds.
  ops::FeatureMap feature_map() const;

  // LoRA (Hu et al. 2021; issue 45 stage 2, low-rank fine-tuning): projection `which` (0 q, 1 k,
  // 2 v, 3 o; NAME below) gets parameters NAME_lora_a [rank, in] (uniform in ±1/√in, as PEFT's
  // Kaiming init), NAME_lora_b [out, rank] (zeros: the outputs are unchanged at first) and
  // NAME_lora_scale [1] (alpha / rank; a parameter that never trains), so that it computes
  // x·Wᵀ + b + scale·(x·Aᵀ)·Bᵀ in forward and in the cached steps. Throws attnkit::Error for
  // rank < 1, alpha <= 0, a projection the kind lacks (q and k of a random synthesizer), an int8
  // layer, or a projection that has an adapter already.
  void add_lora(int which, int64_t rank, double alpha);
  // The names of the projections `which` counts (0 q, 1 k, 2 v, 3 o), and whether this layer has
  // projection `which` (a random synthesizer has no q or k).
  static constexpr const char* kProjectionNames[4] = {"q", "k", "v", "o"};
  bool has_projection(int which) const;
  // Folds every adapter into its projection (W += scale · B·A, computed in float64, stored in the
  // weight's dtype) and removes its three parameters: a plain layer again, with the same outputs
  // up to float rounding. Returns the number of adapters merged.
  int64_t merge_lora();
  bool has_lora() const;

  // Projections; q and k are empty modules when the kind does not use them (random synthesizer).
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  // spec.qk_norm: the RMSNorm weights [key_size] of q and of k.
  at::Tensor q_norm, k_norm;

 private:
  // Head gates, merged heads, output projection through the row kernels: the end of a step.
  at::Tensor finish_step(at::Tensor context);
  // Projection `which` (0 q, 1 k, 2 v, 3 o) of x: the full forward's product (`linear`), or a
  // step's (linear_rows: the row kernels); plus its LoRA term when it has an adapter.
  at::Tensor project(int which, const at::Tensor& x, bool step);
  // y + scale·(x·Aᵀ)·Bᵀ of projection `which`'s adapter; y itself without one.
  at::Tensor with_lora(int which, const at::Tensor& x, at::Tensor y) const;
  torch::nn::Linear& projection(int which);
  const torch::nn::Linear& projection(int which) const;
  at::Tensor logits(const at::Tensor& q, const at::Tensor& k, AttentionKind kind, int64_t L,
                    int64_t S);
  // The grouped key/value heads repeated to one per query head (for the ops without groups).
  at::Tensor repeat_kv(const at::Tensor& x) const;
  // q/k norms and rotary positions on the split heads.
  void position_heads(at::Tensor& qh, at::Tensor& kh, const ops::RotaryTables& rotary) const;
  at::Tensor explicit_weights(const at::Tensor& q, const at::Tensor& k,
                              const c10::optional<at::Tensor>& mask,
                              const c10::optional<at::Tensor>& key_padding);

  MultiHeadAttentionOptions options_;
  int64_t key_size_ = 0;
  int64_t value_size_ = 0;
  std::shared_ptr<ops::FeatureMap> feature_map_;  // linear attention with a fixed map
  at::Tensor feature_weight_, feature_bias_;       // a trained map's parameters
  // Talking-heads mixing matrices [heads, heads] (identity at init).
  at::Tensor pre_mix_, post_mix_;
  // Synthesizer parameters (registered only for the kinds that use them).
  at::Tensor dense_w1_, dense_b1_, dense_w2_, dense_b2_;
  at::Tensor random_logits_;
  at::Tensor fixed_random_logits_;        // a buffer: never trained
  at::Tensor factor_a_, factor_b_;        // factorized dense projections
  at::Tensor random_r1_, random_r2_;      // factorized random factors
  at::Tensor mixing_;                     // mixture weights (softmax-normalised)
  at::Tensor head_gates_;
  struct Lora {
    at::Tensor a, b, scale;  // [rank, in], [out, rank], [1] (alpha / rank)
  };
  Lora lora_[4];  // q, k, v, o
  c10::optional<AttentionSpec> transfer_teacher_;
  at::Tensor transfer_loss_;
  int64_t original_heads_ = 0;
  int64_t query_heads_ = 0;
  int64_t kv_heads_ = 0;
  bool grouped_ = false;
  std::vector<int64_t> kv_of_head_;  // grouped: each query head's key/value head
  std::vector<int64_t> pruned_heads_;
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace attnkit::layers
