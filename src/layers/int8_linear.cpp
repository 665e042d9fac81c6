// int8 dense layers: include/attnkit/layers/int8_linear.h states the scheme, the kernels
// (src/ops/cpu/int8_gemm_kernel.h) compute it.
#include "attnkit/layers/int8_linear.h"

#include "../ops/cpu/int8_gemm_kernel.h"
#include "../ops/cpu/kernel_isa.h"
#include "../ops/cpu/parallel.h"
#include "attnkit/error.h"
#include "attnkit/layers/feed_forward.h"
#include "attnkit/layers/lora.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/layers/row_linear.h"
#include "attnkit/strings.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
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
// rows of x; tasks split at units of 32 rows (two panels: the panel kernel's block).
constexpr int64_t kInt8Grain = 64;
constexpr int64_t kUnitRows = 2 * ops::cpu::kInt8PanelRows;

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
  return unpack_int8(w).values.to(at::kFloat) * w.scale.unsqueeze(1);
}

Int8Weight pack_int8(const Int8Weight& w) {
  if (!w.defined()) throw Error("pack_int8: an undefined weight");
  if (w.is_packed()) return w;
  const int64_t out = w.out(), in = w.in();
  if (!w.values.is_contiguous() || w.values.scalar_type() != at::kChar || w.values.size(0) != out)
    throw Error("pack_int8: expected contiguous int8 values [out, in] and scale [out]");
  if (ops::cpu::int8_panel_groups(in) * 4 > ops::cpu::kInt8PanelMaxIn)
    throw Error(fmt::format("pack_int8: rows of {} values exceed the panel kernel's {}", in,
                            ops::cpu::kInt8PanelMaxIn));
  const int64_t panels = ops::cpu::int8_panel_count(out), groups = ops::cpu::int8_panel_groups(in);
  Int8Weight p(w.scale, at::empty({panels * ops::cpu::kInt8PanelRows, groups * 4}, w.values.options()),
               at::empty({out}, w.values.options().dtype(at::kInt)), in);
  const int8_t* values = w.values.data_ptr<int8_t>();
  int8_t* packed = p.packed.data_ptr<int8_t>();
  int32_t* sums = p.sums.data_ptr<int32_t>();
  ops::cpu::parallel_for(0, panels, 4, [&](int64_t begin, int64_t end) {
    ops::cpu::pack_int8_panels(values, out, in, packed, sums, begin, end);
  });
  return p;
}

Int8Weight unpack_int8(const Int8Weight& w) {
  if (!w.is_packed()) return w;
  at::Tensor values = at::empty({w.out(), w.in()}, w.packed.options());
  ops::cpu::unpack_int8_panels(w.packed.data_ptr<int8_t>(), w.out(), w.in(), values.data_ptr<int8_t>());
  return {values, w.scale};
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
    const Int8Weight* w;
    const float* b;
    at::Tensor y;
    int64_t out, first;  // first: its first unit of kUnitRows output rows among all segments'
  };
  std::vector<Segment> segments;
  std::vector<at::Tensor> keep;  // contiguous copies of the biases
  int64_t units = 0;
  bool any_packed = false;
  for (size_t l = 0; l < weights.size(); ++l) {
    const Int8Weight& w = weights[l];
    const bool row_major = w.values.defined() && w.values.dim() == 2 &&
                           w.values.scalar_type() == at::kChar && w.values.is_contiguous() &&
                           w.values.size(1) == in;
    const bool packed = w.is_packed() && w.packed_in == in && w.packed.scalar_type() == at::kChar &&
                        w.packed.is_contiguous() &&
                        w.packed.numel() == ops::cpu::int8_panel_bytes(w.out(), in) &&
                        w.sums.scalar_type() == at::kInt && w.sums.numel() == w.out();
    if (!(row_major || packed) || !w.scale.defined() || w.scale.scalar_type() != at::kFloat ||
        (row_major && w.scale.numel() != w.values.size(0)))
      throw Error(fmt::format("int8_linear: layer {}: expected int8 weight [out, {}] (row-major or "
                              "packed) and float scale [out]", l, in));
    any_packed = any_packed || !row_major;
    const int64_t out = w.out();
    const float* bp = nullptr;
    if (biases[l].defined()) {
      if (biases[l].scalar_type() != at::kFloat || biases[l].numel() != out)
        throw Error(fmt::format("int8_linear: layer {}: expected float bias [{}]", l, out));
      keep.push_back(biases[l].contiguous());
      bp = keep.back().data_ptr<float>();
    }
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = out;
    segments.push_back({&w, bp, at::empty(sizes, x.options()), out, units});
    units += (out + kUnitRows - 1) / kUnitRows;
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
  std::vector<uint8_t> xu;  // the panel kernel's unsigned activations
  if (any_packed) {
    xu.resize(static_cast<size_t>(rows * ops::cpu::int8_panel_groups(in) * 4));
    ops::cpu::offset_rows_uint8(xq.data(), rows, in, xu.data());
  }
  const int64_t grain = std::max<int64_t>(1, kInt8Grain / rows / kUnitRows);
  ops::cpu::parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
    for (const auto& s : segments) {
      const int64_t seg_units = (s.out + kUnitRows - 1) / kUnitRows;
      const int64_t lo = std::max(begin, s.first) - s.first;
      const int64_t hi = std::min(end, s.first + seg_units) - s.first;
      if (lo >= hi) continue;
      const Int8Weight& w = *s.w;
      float* y = s.y.data_ptr<float>();
      if (w.is_packed()) {
        constexpr int64_t per_unit = kUnitRows / ops::cpu::kInt8PanelRows;
        const int64_t panels = ops::cpu::int8_panel_count(s.out);
        ops::cpu::gemm_int8_panels(w.packed.data_ptr<int8_t>(), w.sums.data_ptr<int32_t>(), s.out,
                                   in, w.scale.data_ptr<float>(), xu.data(), xs.data(), rows, s.b,
                                   y, s.out, lo * per_unit, std::min(panels, hi * per_unit));
      } else {
        ops::cpu::gemm_int8_rows(w.values.data_ptr<int8_t>(), in, w.scale.data_ptr<float>(),
                                 xq.data(), xs.data(), rows, s.b, y, s.out, lo * kUnitRows,
                                 std::min(s.out, hi * kUnitRows));
      }
    }
  });
  std::vector<at::Tensor> outs;
  for (auto& s : segments) outs.push_back(std::move(s.y));
  return outs;
}

at::Tensor int8_linear(const at::Tensor& x, const Int8Weight& w, const at::Tensor& bias) {
  return int8_linear(x, std::vector<Int8Weight>{w}, std::vector<at::Tensor>{bias})[0];
}

namespace {

// The buffer names of a packed weight beside its row-major one.
std::string panels_name(const std::string& values_name) { return values_name + "_panels"; }
std::string sums_name(const std::string& values_name) { return values_name + "_sums"; }

}  // namespace

Int8Weight int8_buffers(const torch::nn::Module& owner, const std::string& values_name,
                        const std::string& scale_name, int64_t in) {
  const auto buffers = owner.named_buffers(/*recurse=*/false);
  const at::Tensor* values = buffers.find(values_name);
  const at::Tensor* scale = buffers.find(scale_name);
  if (values == nullptr || scale == nullptr) return {};
  const at::Tensor* panels = buffers.find(panels_name(values_name));
  const at::Tensor* sums = buffers.find(sums_name(values_name));
  if (panels != nullptr && sums != nullptr) return {*scale, *panels, *sums, in};
  return {*values, *scale};
}

void store_packed(torch::nn::Module& owner, const std::string& values_name, const Int8Weight& packed) {
  if (!packed.is_packed()) throw Error("store_packed: the weight is not packed (pack_int8)");
  auto buffers = owner.named_buffers(/*recurse=*/false);  // handles sharing the buffers' tensors
  at::Tensor* values = buffers.find(values_name);
  if (values == nullptr) throw Error(fmt::format("store_packed: no buffer '{}'", values_name));
  at::NoGradGuard no_grad;
  owner.register_buffer(panels_name(values_name), packed.packed);
  owner.register_buffer(sums_name(values_name), packed.sums);
  values->set_();  // the row-major copy's memory goes (its tensor is shared by tied holders)
}

Int8Weight int8_weight(const torch::nn::LinearImpl& layer) {
  return int8_buffers(layer, "weight_int8", "weight_scale", layer.options.in_features());
}

at::Tensor linear(const torch::nn::LinearImpl& layer, const at::Tensor& x) {
  if (const Int8Weight w = int8_weight(layer); w.defined()) return int8_linear(x, w, layer.bias);
  return dense_linear(x, layer.weight, layer.bias);
}

namespace {

// The attention and feed-forward dense layers under `module` (itself included), as
// quantize_linears and pack_int8_layers take them.
std::vector<torch::nn::LinearImpl*> dense_layers(torch::nn::Module& module) {
  std::vector<torch::nn::LinearImpl*> layers;
  auto collect = [&](torch::nn::Module* m) {
    if (auto* attention = dynamic_cast<MultiHeadAttentionImpl*>(m)) {
      for (auto* l : {&attention->q, &attention->k, &attention->v, &attention->o})
        if (!l->is_empty()) layers.push_back(l->get());
    } else if (auto* ffn = dynamic_cast<FeedForwardImpl*>(m)) {
      for (auto* l : {&ffn->gate, &ffn->fc_in, &ffn->fc_out})
        if (!l->is_empty()) layers.push_back(l->get());
    }
  };
  collect(&module);
  for (const auto& child : module.modules(/*include_self=*/false)) collect(child.get());
  return layers;
}

}  // namespace

int64_t quantize_linears(torch::nn::Module& module, bool values) {
  // The dense layers of the attentions and feed-forward blocks (their forward and step route every
  // product through `linear` / linear_rows); poolers, task heads and projections stay float.
  // LoRA adapters go into the float weights before they are quantized.
  merge_lora(module);
  const std::vector<torch::nn::LinearImpl*> layers = dense_layers(module);
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

int64_t pack_int8_layers(torch::nn::Module& module) {
  // Tied layers share one packed weight, as they share one int8 weight. Each row-major copy is
  // released as soon as it is packed, so the process holds one layer twice at most.
  std::map<const c10::TensorImpl*, Int8Weight> done;
  at::NoGradGuard no_grad;
  int64_t packed = 0;
  for (auto* layer : dense_layers(module)) {
    const Int8Weight w = int8_weight(*layer);
    if (!w.defined() || w.is_packed()) continue;
    // A layer tied to one packed before holds the emptied row-major tensor: it takes those panels.
    auto it = done.find(w.values.unsafeGetTensorImpl());
    if (it == done.end()) {
      if (!ops::cpu::int8_panels_preferred(w.in())) continue;
      it = done.emplace(w.values.unsafeGetTensorImpl(), pack_int8(w)).first;
    }
    store_packed(*layer, "weight_int8", it->second);
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    ++packed;
  }
  return packed;
}

bool has_packed_int8(const torch::nn::Module& module) {
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    if (ends_with(item.key(), panels_name("_int8"))) return true;
  return false;
}

bool has_int8_layers(const torch::nn::Module& module) {
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    if (ends_with(item.key(), "weight_int8")) return true;
  return false;
}

}  // namespace attnkit::layers
