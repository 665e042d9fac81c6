#include "attnkit/layers/transformer_block.h"

#include "attnkit/error.h"

namespace attnkit::layers {

TransformerBlockImpl::TransformerBlockImpl(const TransformerBlockOptions& options)
    : options_(options) {
  const auto ln_options = ConditionalLayerNormOptions(options.hidden())
                              .eps(options.layer_norm_eps())
                              .condition_size(options.condition_size())
                              .kind(options.norm());
  attention = register_module(
      "attention", MultiHeadAttention(MultiHeadAttentionOptions(options.hidden(), options.heads())
                                          .spec(options.attention())
                                          .dropout(options.attention_dropout())
                                          .norm(options.norm())
                                          .norm_eps(options.layer_norm_eps())));
  ln_attention = register_module("ln_attention", ConditionalLayerNorm(ln_options));
  if (options.cross_attention()) {
    cross_attention = register_module(
        "cross_attention",
        MultiHeadAttention(MultiHeadAttentionOptions(options.hidden(), options.heads())
                               .memory_hidden(options.memory_hidden())
                               .spec(options.cross_spec())
                               .dropout(options.attention_dropout())));
    ln_cross = register_module("ln_cross", ConditionalLayerNorm(ln_options));
  }
  ffn = register_module("ffn", FeedForward(FeedForwardOptions(options.hidden(), options.intermediate())
                                               .activation(options.activation())
                                               .gated(options.gated_mlp())
                                               .bias(options.mlp_bias())));
  ln_ffn = register_module("ln_ffn", ConditionalLayerNorm(ln_options));
  if (options.sublayer_output_norm()) {
    if (!options.norm_first() || options.cross_attention())
      throw Error("block: sublayer_output_norm needs pre-LN blocks without cross attention");
    ln_attention_out = register_module("ln_attention_out", ConditionalLayerNorm(ln_options));
    ln_ffn_out = register_module("ln_ffn_out", ConditionalLayerNorm(ln_options));
  }
}

at::Tensor TransformerBlockImpl::norm(ConditionalLayerNorm& ln, const at::Tensor& x,
                                      const BlockInputs& in) {
  return paths().layer_norm ? ln->forward(x, in.condition) : x;
}

template <typename Sublayer>
at::Tensor TransformerBlockImpl::residual(const at::Tensor& x, ConditionalLayerNorm& ln,
                                          ConditionalLayerNorm& out_ln, const BlockInputs& in,
                                          Sublayer&& sublayer) {
  const bool pre = options_.norm_first();
  at::Tensor y = sublayer(pre ? norm(ln, x, in) : x);
  if (out_ln) y = norm(out_ln, y, in);
  if (options_.dropout() > 0 && is_training()) y = torch::dropout(y, options_.dropout(), true);
  if (paths().skip) y = x + y;
  return pre ? y : norm(ln, y, in);
}

template <typename Self, typename Skipped, typename Cross, typename FeedForward>
BlockOutput TransformerBlockImpl::run(const at::Tensor& x, const BlockInputs& in, Self&& self,
                                      Skipped&& skipped, Cross&& cross,
                                      FeedForward&& feed_forward) {
  BlockOutput out;
  at::Tensor h = residual(x, ln_attention, ln_attention_out, in, [&](const at::Tensor& input) {
    if (!paths().attention) {
      skipped(input);
      return at::zeros_like(input);
    }
    AttentionResult r = self(input);
    out.weights = r.weights;
    out.head_contexts = r.head_contexts;
    return r.output;
  });
  if (cross_attention) {
    ConditionalLayerNorm none{nullptr};
    h = residual(h, ln_cross, none, in, [&](const at::Tensor& input) {
      AttentionResult r = cross(input);
      out.cross_head_contexts = r.head_contexts;
      return r.output;
    });
  }
  if (paths().mlp) h = residual(h, ln_ffn, ln_ffn_out, in, feed_forward);
  out.hidden = h;
  return out;
}

BlockOutput TransformerBlockImpl::forward(const at::Tensor& x, const BlockInputs& in) {
  if (cross_attention && !in.memory)
    throw Error("decoder block: cross attention needs the encoder memory [batch, S, width]");
  return run(
      x, in, [&](const at::Tensor& input) { return attention->forward(input, in.self); },
      [](const at::Tensor&) {},
      [&](const at::Tensor& input) {
        AttentionInputs cross;
        cross.key_padding = in.memory_padding;
        cross.need_head_contexts = in.need_cross_head_contexts;
        return cross_attention->forward(input, cross, in.memory);
      },
      [&](const at::Tensor& input) { return ffn->forward(input); });
}

BlockOutput TransformerBlockImpl::forward(const at::Tensor& x, const BlockInputs& in,
                                          const BlockSublayers& sublayers) {
  if (cross_attention && !sublayers.cross_attention)
    throw Error("decoder block: no cross-attention sub-layer given (BlockSublayers::cross_attention)");
  return run(
      x, in, [&](const at::Tensor& input) { return sublayers.self_attention(input); },
      [&](const at::Tensor& input) {
        if (sublayers.skipped_self_attention) sublayers.skipped_self_attention(input);
      },
      [&](const at::Tensor& input) { return sublayers.cross_attention(input); },
      [&](const at::Tensor& input) { return sublayers.feed_forward(input); });
}

at::Tensor TransformerBlockImpl::step(const at::Tensor& x, const StepInputs& s,
                                      const BlockCaches& caches,
                                      const c10::optional<at::Tensor>& condition) {
  if (caches.self == nullptr) throw Error("block step: no self-attention cache");
  if (cross_attention && caches.cross == nullptr)
    throw Error("decoder block step: no cross-attention cache (the encoder memory's)");
  BlockInputs in;  // the LayerNorms' condition
  in.condition = condition;
  const auto self = [&](const at::Tensor& input) {
    AttentionResult r;
    r.output = attention->step(input, s, *caches.self);
    return r;
  };
  const auto cross = [&](const at::Tensor& input) {
    AttentionResult r;
    r.output = cross_attention->step(input, *caches.cross);
    return r;
  };
  return run(
             x, in, self, [&](const at::Tensor& input) { attention->step(input, s, *caches.self); },
             cross, [&](const at::Tensor& input) { return ffn->step(input); })
      .hidden;
}

}  // namespace attnkit::layers
