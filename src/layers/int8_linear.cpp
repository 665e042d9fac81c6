// int8 dense layers: include/attnkit/layers/int8_linear.h states the scheme, the kernels
// (src/ops/cpu/int8_gemm_kernel.h) compute it.
#include "attnkit/layers/int8_linear.h"

#include "../ops/cpu/int8_gemm_kernel.h"
#include "../ops/cpu/kernel_isa.h"
#include "../ops/cpu/parallel.h"
#include "attnkit/error.h"
#include "attnkit/layers/feed_forward.h"
#include "attnkit/layers/multi_head_attention.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <map>

namespace attnkit::layers {

ComputeType parse_compute_type(const std::string& text, const std::string& option) {
  if (text == "float32") return ComputeType::Float32;
  if (text == "int8") return ComputeType::Int8;
  if (text == "bf16") return ComputeType::Bf16;
  throw Error(fmt::format("{}: '{}' is not a compute type (accepted: float32, int8, bf16)", option,
                          text));
}

const char* compute_type_name(ComputeType type) {
  switch (type) {
    case ComputeType::Int8: return "int8";
    case ComputeType::Bf16: return "bf16";
    default: return "float32";
  }
}

std::string bf16_note() {
  __builtin_cpu_init();
  const bool avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  return fmt::format("note: --compute-type bf16 falls back to float32 (this build has no bf16 "
                     "kernel; this CPU {} AVX-512 BF16, kernels {})",
                     avx512_bf16 ? "has" : "lacks",
                     ops::cpu::kernel_isa_name(ops::cpu::kernel_isa()));
}

namespace {

void check_matrix(const at::Tensor& m, const char* what) {
  if (!m.defined() || m.dim() != 2 || m.scalar_type() != at::kFloat)
    throw Error(fmt::format("{}: expected a float32 matrix [rows, in], got {}", what,
                            m.defined() ? fmt::format("{} [{}]", c10::toString(m.scalar_type()),
                                                      fmt::join(m.sizes(), ", "))
                                        : std::string("an undefined tensor")));
  if (m.size(1) > ops::cpu::kInt8MaxIn)
    throw Error(fmt::format("{}: rows of {} values exceed the int8 product's {} (int32 sums)", what,
                            m.size(1), ops::cpu::kInt8MaxIn));
}

// Rows per task when quantizing a weight in parallel.
constexpr int64_t kQuantizeGrain = 64;

// Output rows per task of the int8 product: like row_linear's gemv grain, fewer per task for more
// rows of x.
constexpr int64_t kInt8Grain = 64;

}  // namespace

Int8Weight quantize_int8(const at::Tensor& matrix) {
  check_matrix(matrix, "quantize_int8");
  const at::Tensor m = matrix.detach().contiguous();
  const int64_t rows = m.size(0), in = m.size(1);
  Int8Weight out{at::empty({rows, in}, m.options().dtype(at::kChar)),
                 at::empty({rows}, m.options())};
  const float* mp = m.data_ptr<float>();
  int8_t* qp = out.values.data_ptr<int8_t>();
  float* sp = out.scale.data_ptr<float>();
  ops::cpu::parallel_for(0, rows, kQuantizeGrain, [&](int64_t begin, int64_t end) {
    ops::cpu::quantize_rows_int8(mp + begin * in, in, end - begin, in, qp + begin * in, sp + begin);
  });
  return out;
}

at::Tensor dequantize_int8(const Int8Weight& w) {
  return w.values.to(at::kFloat) * w.scale.unsqueeze(1);
}

std::vector<at::Tensor> int8_linear(const at::Tensor& x, const std::vector<Int8Weight>& weights,
                                    const std::vector<at::Tensor>& biases) {
  if (weights.empty() || weights.size() != biases.size())
    throw Error("int8_linear: expected one bias (or an undefined tensor) per weight");
  if (!x.defined() || x.dim() < 1 || x.scalar_type() != at::kFloat)
    throw Error("int8_linear: expected float32 input [..., in]");
  if (at::GradMode::is_enabled() && x.requires_grad())
    throw Error("int8_linear: int8 layers compute no gradients (use --compute-type float32 to train)");
  const int64_t in = x.size(-1);
  struct Segment {
    const int8_t* w;
    const float* ws;
    const float* b;
    at::Tensor y;
    int64_t out, first;
  };
  std::vector<Segment> segments;
  std::vector<at::Tensor> keep;  // contiguous copies of the biases
  int64_t total = 0;
  for (size_t l = 0; l < weights.size(); ++l) {
    const Int8Weight& w = weights[l];
    if (!w.defined() || w.values.dim() != 2 || w.values.scalar_type() != at::kChar ||
        !w.values.is_contiguous() || w.scale.scalar_type() != at::kFloat ||
        w.scale.numel() != w.values.size(0) || w.values.size(1) != in)
      throw Error(fmt::format("int8_linear: layer {}: expected int8 weight [out, {}] and float scale "
                              "[out]", l, in));
    const int64_t out = w.values.size(0);
    const float* bp = nullptr;
    if (biases[l].defined()) {
      if (biases[l].scalar_type() != at::kFloat || biases[l].numel() != out)
        throw Error(fmt::format("int8_linear: layer {}: expected float bias [{}]", l, out));
      keep.push_back(biases[l].contiguous());
      bp = keep.back().data_ptr<float>();
    }
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = out;
    segments.push_back({w.values.data_ptr<int8_t>(), w.scale.data_ptr<float>(), bp,
                        at::empty(sizes, x.options()), out, total});
    total += out;
  }
  const int64_t rows = in == 0 ? 0 : x.numel() / in;
  if (rows == 0) {  // no rows, or rows of no values: the bias alone
    std::vector<at::Tensor> outs;
    for (size_t l = 0; l < segments.size(); ++l) {
      segments[l].y.zero_();
      if (biases[l].defined()) segments[l].y.add_(biases[l]);
      outs.push_back(segments[l].y);
    }
    return outs;
  }
  const at::Tensor x2d = x.reshape({rows, in}).contiguous();
  std::vector<int8_t> xq(static_cast<size_t>(rows * in));
  std::vector<float> xs(static_cast<size_t>(rows));
  ops::cpu::quantize_rows_int8(x2d.data_ptr<float>(), in, rows, in, xq.data(), xs.data());
  const int64_t grain = std::max<int64_t>(4, kInt8Grain / rows);
  ops::cpu::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    for (const auto& s : segments) {
      const int64_t lo = std::max(begin, s.first) - s.first;
      const int64_t hi = std::min(end, s.first + s.out) - s.first;
      if (lo >= hi) continue;
      ops::cpu::gemm_int8_rows(s.w, in, s.ws, xq.data(), xs.data(), rows, s.b,
                               s.y.data_ptr<float>(), s.out, lo, hi);
    }
  });
  std::vector<at::Tensor> outs;
  for (auto& s : segments) outs.push_back(std::move(s.y));
  return outs;
}

at::Tensor int8_linear(const at::Tensor& x, const Int8Weight& w, const at::Tensor& bias) {
  return int8_linear(x, std::vector<Int8Weight>{w}, std::vector<at::Tensor>{bias})[0];
}

Int8Weight int8_weight(const torch::nn::LinearImpl& layer) {
  const auto buffers = layer.named_buffers(/*recurse=*/false);
  const at::Tensor* values = buffers.find("weight_int8");
  const at::Tensor* scale = buffers.find("weight_scale");
  if (values == nullptr || scale == nullptr) return {};
  return {*values, *scale};
}

at::Tensor linear(const torch::nn::LinearImpl& layer, const at::Tensor& x) {
  if (const Int8Weight w = int8_weight(layer); w.defined()) return int8_linear(x, w, layer.bias);
  return at::linear(x, layer.weight, layer.bias);
}

int64_t quantize_linears(torch::nn::Module& module, bool values) {
  // The dense layers of the attentions and feed-forward blocks (their forward and step route every
  // product through `linear` / linear_rows); poolers, task heads and projections stay float.
  std::vector<torch::nn::LinearImpl*> layers;
  auto collect = [&](torch::nn::Module* m) {
    if (auto* attention = dynamic_cast<MultiHeadAttentionImpl*>(m)) {
      attention->merge_lora();  // LoRA adapters into the float weights before they are quantized
      for (auto* l : {&attention->q, &attention->k, &attention->v, &attention->o})
        if (!l->is_empty()) layers.push_back(l->get());
    } else if (auto* ffn = dynamic_cast<FeedForwardImpl*>(m)) {
      for (auto* l : {&ffn->gate, &ffn->fc_in, &ffn->fc_out})
        if (!l->is_empty()) layers.push_back(l->get());
    }
  };
  collect(&module);
  for (const auto& child : module.modules(/*include_self=*/false)) collect(child.get());
  // Quantize every layer before any float weight is released: tied layers share one.
  std::map<const c10::TensorImpl*, Int8Weight> done;
  std::vector<torch::nn::LinearImpl*> fresh;
  for (auto* layer : layers) {
    if (int8_weight(*layer).defined()) continue;
    const at::Tensor& w = layer->weight;
    auto it = done.find(w.unsafeGetTensorImpl());
    if (it == done.end()) {
      Int8Weight q;
      if (values) {
        q = quantize_int8(w);
      } else {
        check_matrix(w, "quantize_linears");
        q = {at::zeros(w.sizes(), w.options().dtype(at::kChar)), at::zeros({w.size(0)}, w.options())};
      }
      it = done.emplace(w.unsafeGetTensorImpl(), q).first;
    }
    layer->register_buffer("weight_int8", it->second.values);
    layer->register_buffer("weight_scale", it->second.scale);
    fresh.push_back(layer);
  }
  at::NoGradGuard no_grad;
  for (auto* layer : fresh) {
    layer->weight.set_requires_grad(false);
    layer->weight.set_();  // an empty float tensor: the float weight's memory goes
  }
  return static_cast<int64_t>(fresh.size());
}

bool has_int8_layers(const torch::nn::Module& module) {
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    const std::string& key = item.key();
    const std::string suffix = "weight_int8";
    if (key.size() >= suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

}  // namespace attnkit::layers
