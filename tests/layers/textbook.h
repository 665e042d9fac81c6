#pragma once
// Textbook float64 formulas for the layer tests, written with plain at:: ops from the papers'
// definitions (not from attnkit's ops), reading a layer's parameters by name.
#include "attnkit/layers/conditional_layer_norm.h"
#include "attnkit/layers/feed_forward.h"
#include "attnkit/layers/multi_head_attention.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace attnkit::textbook {

inline at::Tensor linear(const at::Tensor& x, const torch::nn::Linear& layer) {
  at::Tensor y = at::matmul(x, layer->weight.t());
  return layer->bias.defined() ? y + layer->bias : y;
}

// (x − mean) / √(var + eps) · γ + β over the last axis; a condition c [batch, C] adds W_γ c to γ
// and W_β c to β.
inline at::Tensor layer_norm(const at::Tensor& x, const layers::ConditionalLayerNorm& ln,
                             const c10::optional<at::Tensor>& condition = c10::nullopt) {
  at::Tensor centred = x - x.mean(-1, /*keepdim=*/true);
  at::Tensor normed = centred / (centred.pow(2).mean(-1, /*keepdim=*/true) + ln->options().eps()).sqrt();
  at::Tensor gain = ln->weight, shift = ln->bias;
  if (ln->options().condition_size() > 0) {
    const auto& c = *condition;
    std::vector<int64_t> shape(x.dim(), 1);
    shape.front() = x.size(0);
    shape.back() = x.size(-1);
    gain = (gain + at::matmul(c, ln->condition_to_weight->weight.t())).view(shape);
    shift = (shift + at::matmul(c, ln->condition_to_bias->weight.t())).view(shape);
  }
  return normed * gain + shift;
}

inline at::Tensor activation(const at::Tensor& x, layers::Activation kind) {
  switch (kind) {
    case layers::Activation::Gelu: return 0.5 * x * (1.0 + at::erf(x / std::sqrt(2.0)));
    case layers::Activation::GeluTanh:
      return 0.5 * x * (1.0 + at::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
    case layers::Activation::Relu: return x.clamp_min(0.0);
  }
  return x;
}

inline at::Tensor feed_forward(const at::Tensor& x, const layers::FeedForward& ffn,
                               layers::Activation kind) {
  return linear(activation(linear(x, ffn->fc_in), kind), ffn->fc_out);
}

struct Attention {
  at::Tensor output;   // [B, L, hidden]
  at::Tensor weights;  // [B, H, L, S]
};

// Softmax attention per head: softmax(q kᵀ/√dk) over the allowed keys, a bool `allowed`
// broadcastable to [B, H, L, S] (undefined = all); causal is bottom-right aligned.
inline Attention softmax_attention(const layers::MultiHeadAttention& mha, const at::Tensor& x,
                                   const at::Tensor& memory, at::Tensor allowed, bool causal) {
  const int64_t B = x.size(0), L = x.size(1), S = memory.size(1), H = mha->heads();
  const int64_t dk = mha->key_size(), dv = mha->value_size();
  at::Tensor q = linear(x, mha->q).view({B, L, H, dk}).transpose(1, 2);
  at::Tensor k = linear(memory, mha->k).view({B, S, H, dk}).transpose(1, 2);
  at::Tensor v = linear(memory, mha->v).view({B, S, H, dv}).transpose(1, 2);
  at::Tensor scores = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(dk));
  if (causal) {
    at::Tensor i = torch::arange(L).view({L, 1}), j = torch::arange(S).view({1, S});
    at::Tensor lower = j.le(i + (S - L));
    allowed = allowed.defined() ? allowed.logical_and(lower) : lower;
  }
  if (allowed.defined())
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  Attention out;
  out.weights = at::softmax(scores, -1);
  at::Tensor context = at::matmul(out.weights, v).transpose(1, 2).reshape({B, L, H * dv});
  out.output = linear(context, mha->o);
  return out;
}

// key_valid [B, S] (true = real key) as [B, 1, 1, S].
inline at::Tensor keys(const at::Tensor& key_valid) {
  return key_valid.view({key_valid.size(0), 1, 1, key_valid.size(1)});
}

}  // namespace attnkit::textbook
