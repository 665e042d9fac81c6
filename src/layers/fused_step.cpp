// The fused one-column decoding step of a block (fused_step.h says what and why).
#include "fused_step.h"

#include "attnkit/error.h"
#include "attnkit/layers/int8_linear.h"
#include "attnkit/layers/row_linear.h"
#include "attnkit/runtime.h"

#include "../ops/cpu/activation_kernel.h"
#include "../ops/cpu/flash_attention_kernel.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace attnkit::layers {
namespace {

std::atomic<int>& fused_flag() {
  static std::atomic<int> flag{[] {
    const char* text = std::getenv("ATTNKIT_FUSED_STEP");
    if (text == nullptr || *text == '\0') return 1;
    const std::string value(text);
    if (value == "1") return 1;
    if (value == "0") return 0;
    throw Error("ATTNKIT_FUSED_STEP: expected 0 or 1, got '" + one_line(value) + "'");
  }()};
  return flag;
}

bool float_vector(const at::Tensor& t, int64_t size) {
  return t.defined() && t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == size &&
         t.is_contiguous() && t.device().is_cpu();
}

// A float32 dense layer the kernels read in place (kernel_rows_into): [out, in] with unit column
// stride, its bias (if any) [out], not quantized.
bool float_layer(const torch::nn::LinearImpl& layer, int64_t in) {
  if (int8_weight(layer).defined()) return false;
  const at::Tensor& w = layer.weight;
  if (!w.defined() || w.scalar_type() != at::kFloat || w.dim() != 2 || w.size(1) != in ||
      w.stride(1) != 1 || !w.device().is_cpu())
    return false;
  return !layer.bias.defined() || float_vector(layer.bias, w.size(0));
}

bool norm_ready(const ConditionalLayerNorm& ln, int64_t hidden) {
  if (!ln || ln->options().condition_size() > 0 || !float_vector(ln->weight, hidden)) return false;
  return ln->options().kind() != NormKind::LayerNorm || float_vector(ln->bias, hidden);
}

KernelRows rows_of(const torch::nn::LinearImpl& layer, float* y) {
  const at::Tensor& w = layer.weight;
  return {w.data_ptr<float>(), w.stride(0), w.size(0),
          layer.bias.defined() ? layer.bias.data_ptr<float>() : nullptr, y};
}

// out[r] = norm(x[r]) for `rows` rows of `n`: LayerNorm (mean and variance in double, as
// accurate as ATen's float Welford sums or more), RMSNorm in float32 as transformers computes it
// (x · rsqrt(mean(x²) + eps), the mean summed in double), Gemma's with (1 + w).
void norm_rows(const ConditionalLayerNormImpl& ln, const float* x, int64_t rows, int64_t n, float* out) {
  const float* w = ln.weight.data_ptr<float>();
  const auto kind = ln.options().kind();
  const double eps = ln.options().eps();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    if (kind == NormKind::LayerNorm) {
      const float* b = ln.bias.data_ptr<float>();
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(n);
      double squares = 0.0;
      for (int64_t i = 0; i < n; ++i) squares += (xr[i] - mean) * (xr[i] - mean);
      const auto inv = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(n) + eps));
      const auto m = static_cast<float>(mean);
      for (int64_t i = 0; i < n; ++i) o[i] = (xr[i] - m) * inv * w[i] + b[i];
      continue;
    }
    double squares = 0.0;
    for (int64_t i = 0; i < n; ++i) squares += static_cast<double>(xr[i]) * xr[i];
    const float variance = static_cast<float>(squares / static_cast<double>(n));
    const float inv = 1.0f / std::sqrt(variance + static_cast<float>(eps));
    if (kind == NormKind::GemmaRmsNorm)
      for (int64_t i = 0; i < n; ++i) o[i] = (xr[i] * inv) * (w[i] + 1.0f);
    else
      for (int64_t i = 0; i < n; ++i) o[i] = w[i] * (xr[i] * inv);
  }
}

// transformers' rotate_half rotation of `heads` heads of size d in place, the first `width`
// features of each (the rest pass), with one row's cos / sin of that width.
void rotate_heads(float* x, int64_t heads, int64_t d, int64_t width, const float* cos, const float* sin) {
  const int64_t half = width / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * d;
    for (int64_t i = 0; i < half; ++i) {
      const float a = xh[i], b = xh[i + half];
      xh[i] = a * cos[i] - b * sin[i];
      xh[i + half] = b * cos[i + half] + a * sin[i + half];
    }
  }
}

void activate(float* x, int64_t n, Activation activation) {
  switch (activation) {
    case Activation::Gelu:
      for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
      return;
    case Activation::GeluTanh:
      ops::cpu::gelu_tanh_in_place(x, n);
      return;
    case Activation::Relu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
      return;
    case Activation::Silu:
      ops::cpu::silu_in_place(x, n);
      return;
  }
}

// Whether row r's new column is a real token (valid [rows, 1], bool or integer).
bool column_valid(const at::Tensor& valid, int64_t r) {
  if (valid.scalar_type() == at::kBool) return valid.data_ptr<bool>()[r * valid.stride(0)];
  return valid.data_ptr<int64_t>()[r * valid.stride(0)] != 0;
}

std::atomic<int64_t> block_steps{0};

}  // namespace

bool fused_step_enabled() { return fused_flag().load() != 0; }
int64_t fused_block_steps() { return block_steps.load(); }
void set_fused_step(bool enabled) { fused_flag().store(enabled ? 1 : 0); }

bool fused_block_ready(TransformerBlockImpl& block, const BlockCaches& caches, const at::Tensor& h,
                       const StepInputs& step, FusedBlockPlan& plan) {
  if (at::GradMode::is_enabled() || caches.self == nullptr) return false;
  const auto& o = block.options();
  const int64_t hidden = o.hidden();
  if (h.dim() != 3 || h.size(1) != 1 || h.size(2) != hidden || h.scalar_type() != at::kFloat ||
      !h.is_contiguous() || !h.device().is_cpu())
    return false;
  const int64_t rows = h.size(0);
  if (rows < 1 || rows > few_rows_max()) return false;
  if (!step.valid.defined() || step.valid.dim() != 2 || step.valid.size(0) != rows ||
      step.valid.size(1) != 1 ||
      (step.valid.scalar_type() != at::kBool && step.valid.scalar_type() != at::kLong) ||
      !step.valid.device().is_cpu())
    return false;
  const BlockPaths& paths = block.paths();
  if (o.sublayer_output_norm() || o.condition_size() > 0 || !paths.skip || !paths.mlp || !paths.layer_norm ||
      !paths.attention || block.is_training())
    return false;
  if (!norm_ready(block.ln_attention, hidden) || !norm_ready(block.ln_ffn, hidden)) return false;
  const MultiHeadAttentionImpl& a = *block.attention;
  const AttentionSpec& spec = a.options().spec();
  if (spec.kind != AttentionKind::Softmax || spec.talking_heads || a.head_gates().defined() ||
      a.has_lora() || a.q_norm.defined() || a.transferring() || (a.grouped() && !a.uniform_groups()) ||
      !a.q || !a.k || !a.v || !a.o)
    return false;
  const int64_t H = a.heads(), KV = a.grouped() ? a.kv_heads() : H;
  const int64_t dk = a.key_size(), dv = a.value_size();
  if (!float_layer(*a.q, hidden) || !float_layer(*a.k, hidden) || !float_layer(*a.v, hidden) ||
      !float_layer(*a.o, H * dv) || a.q->weight.size(0) != H * dk || a.k->weight.size(0) != KV * dk ||
      a.v->weight.size(0) != KV * dv || a.o->weight.size(0) != hidden)
    return false;
  if (step.rotary.cos.defined()) {
    for (const at::Tensor* t : {&step.rotary.cos, &step.rotary.sin})
      if (!t->defined() || t->scalar_type() != at::kFloat || t->dim() != 3 || !t->is_contiguous() ||
          (t->size(0) != 1 && t->size(0) != rows) || t->size(1) != 1 || t->size(2) > dk ||
          t->size(2) % 2 != 0)
        return false;
    if (step.rotary.sin.sizes() != step.rotary.cos.sizes()) return false;
  }
  if (block.cross_attention) {
    // Softmax cross attention over a memory the cache reads in place, its rows in blocks.
    const MultiHeadAttentionImpl& c = *block.cross_attention;
    const AttentionSpec& cspec = c.options().spec();
    if (caches.cross == nullptr || !norm_ready(block.ln_cross, hidden) || cspec.kind != AttentionKind::Softmax ||
        cspec.talking_heads || c.head_gates().defined() || c.has_lora() || c.q_norm.defined() || c.grouped() ||
        c.transferring() || !c.q || !c.o)
      return false;
    const int64_t CH = c.heads(), cdk = c.key_size(), cdv = c.value_size();
    if (!float_layer(*c.q, hidden) || !float_layer(*c.o, CH * cdv) || c.q->weight.size(0) != CH * cdk ||
        c.o->weight.size(0) != hidden)
      return false;
    const MemoryRows& m = plan.memory;
    if (!caches.cross->memory_rows(rows, plan.memory) || m.heads != CH || m.key_size != cdk ||
        m.value_size != cdv)
      return false;
  }
  const FeedForwardImpl& f = *block.ffn;
  const int64_t inner = f.options().intermediate();
  if (!f.fc_in || !f.fc_out || !float_layer(*f.fc_in, hidden) || !float_layer(*f.fc_out, inner) ||
      f.fc_in->weight.size(0) != inner || f.fc_out->weight.size(0) != hidden)
    return false;
  if (f.gate && (!float_layer(*f.gate, hidden) || f.gate->weight.size(0) != inner)) return false;
  const KVColumn& kv = plan.kv;
  return caches.self->one_column(plan.kv) && kv.batch == rows && kv.kv_heads == KV && kv.key_size == dk &&
         kv.value_size == dv;
}

void fused_block_step(TransformerBlockImpl& block, const BlockCaches& caches, at::Tensor& h,
                      const StepInputs& step, const FusedBlockPlan& plan) {
  const int64_t hidden = block.options().hidden(), rows = h.size(0);
  const bool pre = block.options().norm_first();
  MultiHeadAttentionImpl& a = *block.attention;
  const FeedForwardImpl& f = *block.ffn;
  AttentionCache& cache = *caches.self;
  const int64_t H = a.heads(), KV = a.grouped() ? a.kv_heads() : H;
  const int64_t dk = a.key_size(), dv = a.value_size(), inner = f.options().intermediate();
  const MultiHeadAttentionImpl* c = block.cross_attention ? block.cross_attention.get() : nullptr;
  const int64_t CH = c ? c->heads() : 0, cdk = c ? c->key_size() : 0, cdv = c ? c->value_size() : 0;
  const KVColumn& kv = plan.kv;

  // Scratch: the sub-layer's input, q, k, v, the contexts, a sub-layer's output, the FFN's inner
  // rows (two when gated), the log-sum-exps. One buffer per thread, grown as needed.
  const int64_t q_size = std::max(H * dk, CH * cdk), k_size = KV * dk, v_size = KV * dv;
  const int64_t ctx_size = std::max(H * dv, CH * cdv), heads = std::max(H, CH);
  const int64_t need = rows * (2 * hidden + q_size + k_size + v_size + ctx_size + 2 * inner + heads);
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
  float* input = scratch.data();
  float* q = input + rows * hidden;
  float* k = q + rows * q_size;
  float* v = k + rows * k_size;
  float* ctx = v + rows * v_size;
  float* sub = ctx + rows * ctx_size;
  float* up = sub + rows * hidden;
  float* gate = up + rows * inner;
  float* lse = gate + rows * inner;
  float* x = h.data_ptr<float>();
  // A residual sub-layer as TransformerBlockImpl::run orders it: pre-norm x += f(norm(x)),
  // post-norm x = norm(x + f(x)). `body` reads `from` and writes its output to `sub`.
  const auto residual = [&](const ConditionalLayerNormImpl& ln, const auto& body) {
    const float* from = x;
    if (pre) {
      norm_rows(ln, x, rows, hidden, input);
      from = input;
    }
    body(from);
    for (int64_t i = 0; i < rows * hidden; ++i) x[i] += sub[i];
    if (!pre) norm_rows(ln, x, rows, hidden, x);  // in place: each row is read before it is written
  };

  // ---- self attention: o(attend(rotate(q), the cache + rotate(k), v))
  residual(*block.ln_attention, [&](const float* from) {
    const KernelRows qkv[3] = {rows_of(*a.q, q), rows_of(*a.k, k), rows_of(*a.v, v)};
    kernel_rows_into(from, rows, hidden, qkv, 3);
    if (step.rotary.cos.defined()) {
      const int64_t width = step.rotary.cos.size(2);
      const bool per_row = step.rotary.cos.size(0) == rows && rows > 1;
      const float* cos = step.rotary.cos.data_ptr<float>();
      const float* sin = step.rotary.sin.data_ptr<float>();
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = per_row ? r * width : 0;
        rotate_heads(q + r * H * dk, H, dk, width, cos + t, sin + t);
        rotate_heads(k + r * k_size, KV, dk, width, cos + t, sin + t);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < KV; ++g) {
        std::memcpy(kv.keys + ((r * KV + g) * kv.capacity + kv.slot) * dk, k + r * k_size + g * dk,
                    static_cast<size_t>(dk) * sizeof(float));
        std::memcpy(kv.values + ((r * KV + g) * kv.capacity + kv.slot) * dv, v + r * v_size + g * dv,
                    static_cast<size_t>(dv) * sizeof(float));
      }
      kv.valid[r * kv.capacity + kv.slot] = column_valid(step.valid, r);
    }
    cache.column_written();
    const AttentionSpec& spec = a.options().spec();
    ops::cpu::FlashProblem p;
    p.B = rows;
    p.H = H;
    p.Hkv = KV;
    p.L = 1;
    p.S = kv.filled;
    p.dk = dk;
    p.dv = dv;
    p.scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(dk));
    p.logit_softcap = spec.logit_softcap;
    p.q_rows = {H * dk, dk, dk};
    p.k_rows = {KV * kv.capacity * dk, kv.capacity * dk, dk};
    p.v_rows = {KV * kv.capacity * dv, kv.capacity * dv, dv};
    p.out_rows = {H * dv, dv, dv};
    p.mask.bool_data = kv.valid;
    p.mask.stride_b = kv.capacity;
    p.mask.stride_s = 1;
    ops::cpu::flash_attention_forward(p, q, kv.keys, kv.values, ctx, lse);
    const KernelRows out_projection = rows_of(*a.o, sub);
    kernel_rows_into(ctx, rows, H * dv, &out_projection, 1);
  });

  // ---- cross attention: o(attend(q, the memory's keys and values)), as CrossAttentionCache
  // attends: the rows of one memory row as one block of queries, the default scale
  if (c != nullptr) {
    const MemoryRows& m = plan.memory;
    residual(*block.ln_cross, [&](const float* from) {
      const KernelRows query = rows_of(*c->q, q);
      kernel_rows_into(from, rows, hidden, &query, 1);
      const int64_t G = m.group;
      ops::cpu::FlashProblem p;
      p.B = m.memory_rows;
      p.H = CH;
      p.L = G;
      p.S = m.length;
      p.dk = cdk;
      p.dv = cdv;
      p.scale = 1.0 / std::sqrt(static_cast<double>(cdk));
      // Row r = (memory row r / G, query r mod G): [U, G, H, d] read as [U, H, G, d].
      p.q_rows = {G * CH * cdk, cdk, CH * cdk};
      p.k_rows = {m.key_strides[0], m.key_strides[1], m.key_strides[2]};
      p.v_rows = {m.value_strides[0], m.value_strides[1], m.value_strides[2]};
      p.out_rows = {G * CH * cdv, cdv, CH * cdv};
      if (m.padding != nullptr) {
        p.mask.bool_data = m.padding;
        p.mask.stride_b = m.padding_stride;
        p.mask.stride_s = 1;
      }
      ops::cpu::flash_attention_forward(p, q, m.keys, m.values, ctx, lse);
      const KernelRows out_projection = rows_of(*c->o, sub);
      kernel_rows_into(ctx, rows, CH * cdv, &out_projection, 1);
    });
  }

  // ---- feed-forward: fc_out(act(gate(·)) · fc_in(·)), or fc_out(act(fc_in(·)))
  residual(*block.ln_ffn, [&](const float* from) {
    if (f.gate) {
      const KernelRows both[2] = {rows_of(*f.gate, gate), rows_of(*f.fc_in, up)};
      kernel_rows_into(from, rows, hidden, both, 2);
      activate(gate, rows * inner, f.options().activation());
      for (int64_t i = 0; i < rows * inner; ++i) up[i] *= gate[i];
    } else {
      const KernelRows in_layer = rows_of(*f.fc_in, up);
      kernel_rows_into(from, rows, hidden, &in_layer, 1);
      activate(up, rows * inner, f.options().activation());
    }
    const KernelRows down = rows_of(*f.fc_out, sub);
    kernel_rows_into(up, rows, inner, &down, 1);
  });
  block_steps.fetch_add(1);
}

}  // namespace attnkit::layers

namespace attnkit {
bool fused_decoding_step() { return layers::fused_step_enabled(); }
}  // namespace attnkit
