#pragma once
// One Transformer block for every model family: self attention, optional cross attention
// (decoders), feed-forward; post-LN (BERT/ALBERT, norm_first = false) or pre-LN (GPT-2,
// norm_first = true). The skip connections, the MLP and the LayerNorms can be switched off
// per block at run time (BlockPaths): the rank-collapse experiments (Dong et al. 2021) compare
// pure attention, attention + skip, attention + MLP and the full block with the same weights.
//
//   post-LN: h = LN(x + Att(x));          y = LN(h + FFN(h))
//   pre-LN:  h = x + Att(LN(x));          y = h + FFN(LN(h))
// With skip off the "x +" terms vanish; with the MLP off y = h; with LN off LN is the identity;
// with attention off the self-attention sub-layer outputs zero (h = x, or LN(x) post-LN), which
// truncates the network to the paths that skip this layer (short-path experiment).
//
// The Llama families: pre-LN blocks with RMSNorm (norm), a gated MLP, and (Gemma 2/3,
// sublayer_output_norm) a second norm on each sub-layer's output before the residual sum:
//   h = x + LN'(Att(LN(x)));   y = h + LN''(FFN(LN(h)))
#include "attnkit/layers/conditional_layer_norm.h"
#include "attnkit/layers/feed_forward.h"
#include "attnkit/layers/multi_head_attention.h"

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>

namespace attnkit::layers {

struct BlockPaths {
  bool skip = true;
  bool mlp = true;
  bool layer_norm = true;
  bool attention = true;  // false: the self-attention sub-layer contributes nothing
};

struct TransformerBlockOptions {
  TransformerBlockOptions(int64_t hidden, int64_t heads, int64_t intermediate)
      : hidden_(hidden), heads_(heads), intermediate_(intermediate) {}
  TORCH_ARG(int64_t, hidden);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(int64_t, intermediate);
  TORCH_ARG(Activation, activation) = Activation::Gelu;
  TORCH_ARG(bool, norm_first) = false;
  TORCH_ARG(double, layer_norm_eps) = 1e-12;
  TORCH_ARG(AttentionSpec, attention);
  // Decoder blocks: cross attention over an encoder memory of width memory_hidden (0 = hidden).
  TORCH_ARG(bool, cross_attention) = false;
  TORCH_ARG(AttentionSpec, cross_spec);
  TORCH_ARG(int64_t, memory_hidden) = 0;
  TORCH_ARG(double, dropout) = 0.0;  // on each sub-layer's output before the residual sum
  TORCH_ARG(double, attention_dropout) = 0.0;  // on the attention probabilities
  TORCH_ARG(int64_t, condition_size) = 0;  // > 0: every LayerNorm is conditional
  TORCH_ARG(BlockPaths, paths);
  TORCH_ARG(NormKind, norm) = NormKind::LayerNorm;  // every norm site's kind
  TORCH_ARG(bool, gated_mlp) = false;
  TORCH_ARG(bool, mlp_bias) = true;
  TORCH_ARG(bool, sublayer_output_norm) = false;
};

struct BlockInputs {
  AttentionInputs self;                     // mask, key padding, what to return
  c10::optional<at::Tensor> memory;         // [batch, S, memory_hidden] for cross attention
  c10::optional<at::Tensor> memory_padding; // [batch, S] bool, true = real token
  c10::optional<at::Tensor> condition;      // [batch, condition_size]
  bool need_cross_head_contexts = false;    // fill BlockOutput::cross_head_contexts
};

struct BlockOutput {
  at::Tensor hidden;         // [batch, n, hidden]
  at::Tensor weights;        // self-attention weights, if asked
  at::Tensor head_contexts;  // self-attention per-head contexts, if asked
  at::Tensor cross_head_contexts;  // cross-attention per-head contexts, if asked
};

// How a block computes its sub-layers, each from the sub-layer's input [batch, n, hidden] (the
// LayerNorm's output when norm_first), for forward(x, inputs, sublayers): XLNet's two streams
// (models/transformer_model.h) pass their own. forward(x, inputs) and step() pass the block's
// modules directly. Every path runs one residual / LayerNorm / dropout / paths sequence.
struct BlockSublayers {
  // Self attention; called only while paths().attention is on.
  std::function<AttentionResult(const at::Tensor& input)> self_attention;
  // Optional: called instead of self_attention while paths().attention is off, its result unused
  // (a cached state that must still take the new columns).
  std::function<void(const at::Tensor& input)> skipped_self_attention;
  // Cross attention over the memory; decoder blocks (options().cross_attention()) only.
  std::function<AttentionResult(const at::Tensor& input)> cross_attention;
  // The feed-forward network; called only while paths().mlp is on.
  std::function<at::Tensor(const at::Tensor& input)> feed_forward;
};

// The caches of one block in a decoding session (decode/incremental.h makes them).
struct BlockCaches {
  AttentionCache* self = nullptr;
  MemoryCache* cross = nullptr;  // decoder blocks (options().cross_attention()) only
};

class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const TransformerBlockOptions& options);
  BlockOutput forward(const at::Tensor& x, const BlockInputs& inputs = {});
  // The block around `sublayers` (inputs.self and inputs.memory are for the sub-layers: this
  // reads only inputs.condition, for the LayerNorms). Dropout on the sub-layers' outputs is
  // applied in training only.
  BlockOutput forward(const at::Tensor& x, const BlockInputs& inputs,
                      const BlockSublayers& sublayers);
  // One cached decoding step: x [batch, n, hidden] the new columns; the sub-layers are
  // MultiHeadAttentionImpl::step over the caches and FeedForwardImpl::step. With the attention
  // path off the self-attention cache still takes the new columns. `condition` [batch,
  // condition_size] for conditional LayerNorms. Returns the block's output [batch, n, hidden].
  at::Tensor step(const at::Tensor& x, const StepInputs& step, const BlockCaches& caches,
                  const c10::optional<at::Tensor>& condition = c10::nullopt);

  const TransformerBlockOptions& options() const { return options_; }
  const BlockPaths& paths() const { return options_.paths(); }
  void set_paths(const BlockPaths& paths) { options_.paths(paths); }

  MultiHeadAttention attention{nullptr}, cross_attention{nullptr};
  FeedForward ffn{nullptr};
  ConditionalLayerNorm ln_attention{nullptr}, ln_cross{nullptr}, ln_ffn{nullptr};
  // sublayer_output_norm: the norms of the attention's and the MLP's outputs.
  ConditionalLayerNorm ln_attention_out{nullptr}, ln_ffn_out{nullptr};

 private:
  at::Tensor norm(ConditionalLayerNorm& ln, const at::Tensor& x, const BlockInputs& in);
  // One residual sub-layer around `sublayer`, honouring norm_first and the paths.
  template <typename Sublayer>
  at::Tensor residual(const at::Tensor& x, ConditionalLayerNorm& ln, ConditionalLayerNorm& out_ln,
                      const BlockInputs& in, Sublayer&& sublayer);
  // The block's sequence around its sub-layers (callables, no std::function on the step path).
  template <typename Self, typename Skipped, typename Cross, typename FeedForward>
  BlockOutput run(const at::Tensor& x, const BlockInputs& in, Self&& self, Skipped&& skipped,
                  Cross&& cross, FeedForward&& feed_forward);

  TransformerBlockOptions options_;
};
TORCH_MODULE(TransformerBlock);

}  // namespace attnkit::layers
