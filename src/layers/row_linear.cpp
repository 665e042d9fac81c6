// Dense layers for the cached decoding steps: include/attnkit/layers/row_linear.h says which rows
// take attnkit's kernels (ops/cpu/gemv_kernel.h) and why.
#include "attnkit/layers/row_linear.h"

#include "../ops/cpu/blas.h"
#include "../ops/cpu/gemv_kernel.h"
#include "../ops/cpu/parallel.h"
#include "attnkit/error.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace attnkit::layers {

int64_t few_rows_max() {
  static const int64_t value = [] {
    const char* text = std::getenv("ATTNKIT_DECODE_FEW_ROWS_MAX");
    if (text == nullptr || *text == '\0') return kFewRowsMax;
    char* end = nullptr;
    const long long v = std::strtoll(text, &end, 10);
    if (*end != '\0' || v < 0)
      throw Error(std::string("ATTNKIT_DECODE_FEW_ROWS_MAX: expected a row count >= 0, got '") +
                  text + "'");
    return static_cast<int64_t>(v);
  }();
  return value;
}

namespace {

// Output rows per task of the parallel gemv: a few tens of KiB of weights at hidden sizes of
// hundreds, so a 768 × 768 layer still splits over two threads.
constexpr int64_t kGemvGrain = 64;

// The number of rows of `x` ([..., in]) when the kernels take it for every layer: 1 to
// few_rows_max() rows, float32 weights and bias, nothing to differentiate; 0 otherwise.
int64_t kernel_rows(const at::Tensor& x, const std::vector<DenseLayer>& layers) {
  if (x.dim() < 1 || x.scalar_type() != at::kFloat || layers.empty()) return 0;
  const bool grad_mode = at::GradMode::is_enabled();
  if (grad_mode && x.requires_grad()) return 0;
  const int64_t in = x.size(-1);
  if (in == 0 || x.numel() == 0) return 0;
  const int64_t rows = x.numel() / in;
  if (rows > few_rows_max()) return 0;
  for (const auto& l : layers) {
    if (l.weight.dim() != 2 || l.weight.size(1) != in || l.weight.scalar_type() != at::kFloat) return 0;
    if (l.bias.defined() && l.bias.scalar_type() != at::kFloat) return 0;
    if (grad_mode && (l.weight.requires_grad() || (l.bias.defined() && l.bias.requires_grad())))
      return 0;
  }
  return rows;
}

}  // namespace

void kernel_rows_into(const float* x, int64_t rows, int64_t in, const KernelRows* layers,
                      size_t count) {
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += layers[i].out;
  // A task's work grows with the rows: fewer output rows per task for more rows of x.
  const int64_t grain = std::max<int64_t>(16, kGemvGrain / rows);
  ops::cpu::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    int64_t first = 0;  // the layer's first row in the concatenated numbering
    for (size_t i = 0; i < count; ++i) {
      const KernelRows& l = layers[i];
      const int64_t lo = std::max(begin, first) - first;
      const int64_t hi = std::min(end, first + l.out) - first;
      first += l.out;
      if (lo >= hi) continue;
      if (rows == 1)
        ops::cpu::gemv_rows(l.weight, l.ldw, x, in, l.bias, l.y, lo, hi);
      else
        ops::cpu::gemm_few_rows(l.weight, l.ldw, x, in, rows, in, l.bias, l.y, l.out, lo, hi);
    }
  });
}

namespace {

// weight_i [out_i, in] · x [rows, in]ᵀ + bias_i for every layer -> [rows, out_i], in one parallel
// region whose tasks split the layers' output rows (q, k and v of one attention wake the threads
// once).
std::vector<at::Tensor> kernel_linear(const std::vector<DenseLayer>& layers,
                                             const at::Tensor& x2d) {
  const at::Tensor x = x2d.contiguous();
  const int64_t rows = x.size(0), in = x.size(1);
  std::vector<at::Tensor> kept, out;  // weights and biases made contiguous, the outputs
  std::vector<KernelRows> raw;
  for (const auto& l : layers) {
    const at::Tensor w = l.weight.stride(1) == 1 ? l.weight : l.weight.contiguous();
    const at::Tensor b = l.bias.defined() ? l.bias.contiguous() : l.bias;
    out.push_back(at::empty({rows, w.size(0)}, x.options()));
    raw.push_back({w.data_ptr<float>(), w.stride(0), w.size(0),
                   b.defined() ? b.data_ptr<float>() : nullptr, out.back().data_ptr<float>()});
    kept.push_back(w);
    if (b.defined()) kept.push_back(b);
  }
  kernel_rows_into(x.data_ptr<float>(), rows, in, raw.data(), raw.size());
  return out;
}

// Whether dense_linear may take its GEMM path for these operands (gradients or not).
bool gemm_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (x.scalar_type() != at::kFloat || weight.scalar_type() != at::kFloat || weight.dim() != 2 ||
      x.dim() < 1 || x.size(-1) != weight.size(1) || weight.size(1) == 0 || x.numel() == 0)
    return false;
  if (bias.defined() && (bias.scalar_type() != at::kFloat || bias.dim() != 1 || bias.size(0) != weight.size(0)))
    return false;
  return x.device().is_cpu() && weight.device().is_cpu() && (!bias.defined() || bias.device().is_cpu());
}

// A row-major operand for ops::cpu::gemm: rows of unit stride (the leading dimension may be wider).
at::Tensor gemm_ready(const at::Tensor& t) {
  return t.dim() == 2 && t.stride(1) == 1 && t.stride(0) >= t.size(1) ? t : t.contiguous();
}

// x2 [rows, in] · weightᵀ + bias -> [rows, out], one GEMM, no autograd.
at::Tensor gemm_linear(const at::Tensor& x2d, const at::Tensor& weight, const at::Tensor& bias) {
  const at::Tensor x = gemm_ready(x2d), w = gemm_ready(weight);
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  // A fresh buffer: bias.expand(...).contiguous() is bias itself for one row, which the GEMM writes.
  at::Tensor y = at::empty({rows, out}, x.options());
  if (bias.defined()) y.copy_(bias.expand({rows, out}));
  ops::cpu::gemm(false, true, rows, out, in, 1.0f, x.data_ptr<float>(), x.stride(0), w.data_ptr<float>(),
                 w.stride(0), bias.defined() ? 1.0f : 0.0f, y.data_ptr<float>(), out);
  return y;
}

// x2d · weightᵀ + bias without autograd: the few-row kernels up to few_rows_max() rows (as the
// decoding steps), else one GEMM; the same bits whether or not a gradient is wanted.
at::Tensor dense_product(const at::Tensor& x2d, const at::Tensor& weight, const at::Tensor& bias) {
  const std::vector<DenseLayer> layer{{weight, bias, {}}};
  if (kernel_rows(x2d, layer) > 0) return kernel_linear(layer, x2d)[0];
  return gemm_linear(x2d, weight, bias);
}

// dense_linear where something needs a gradient: the forward and both backward products as GEMMs
// of the kernels' library. A backward that itself records a graph (create_graph) takes ATen's ops,
// so higher derivatives stay available.
class DenseLinearFunction : public torch::autograd::Function<DenseLinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x2d,
                            const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
    ctx->save_for_backward({x2d, weight});
    ctx->saved_data["bias"] = bias.has_value();
    // Autograd runs forward with gradients off: the kernels' rows as without gradients.
    return dense_product(x2d, weight, bias.has_value() ? *bias : at::Tensor());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const at::Tensor g = grads[0];  // [rows, out]
    at::Tensor gx, gw, gb;
    if (at::GradMode::is_enabled()) {
      if (ctx->needs_input_grad(0)) gx = g.mm(w);
      if (ctx->needs_input_grad(1)) gw = g.t().mm(x);
    } else {
      const at::Tensor gc = gemm_ready(g);
      const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
      if (ctx->needs_input_grad(0)) {
        // [rows, out] · [out, in]
        const at::Tensor wc = gemm_ready(w);
        gx = at::empty({rows, in}, g.options());
        ops::cpu::gemm(false, false, rows, in, out, 1.0f, gc.data_ptr<float>(), gc.stride(0),
                       wc.data_ptr<float>(), wc.stride(0), 0.0f, gx.data_ptr<float>(), in);
      }
      if (ctx->needs_input_grad(1)) {
        // [rows, out]ᵀ · [rows, in]
        const at::Tensor xc = gemm_ready(x);
        gw = at::empty({out, in}, g.options());
        ops::cpu::gemm(true, false, out, in, rows, 1.0f, gc.data_ptr<float>(), gc.stride(0),
                       xc.data_ptr<float>(), xc.stride(0), 0.0f, gw.data_ptr<float>(), in);
      }
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) gb = g.sum(0);
    return {gx, gw, gb};
  }
};

}  // namespace

at::Tensor dense_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!gemm_operands(x, weight, bias)) return at::linear(x, weight, bias);
  const int64_t in = weight.size(1), out = weight.size(0);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = out;
  const at::Tensor x2d = x.reshape({x.numel() / in, in});
  const bool grad = at::GradMode::is_enabled() &&
                    (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  // Few rows (a short sentence through an encoder) take the decoding steps' kernels.
  if (!grad) return dense_product(x2d, weight, bias).view(sizes);
  c10::optional<at::Tensor> b;
  if (bias.defined()) b = bias;
  return DenseLinearFunction::apply(x2d, weight, b).view(sizes);
}

DenseLayer dense_layer(const torch::nn::LinearImpl& layer) {
  return {layer.weight, layer.bias, int8_weight(layer)};
}

std::vector<at::Tensor> linear_rows(const at::Tensor& x, const std::vector<DenseLayer>& layers) {
  const auto quantized = std::count_if(layers.begin(), layers.end(),
                                       [](const DenseLayer& l) { return l.int8.defined(); });
  if (quantized > 0) {
    if (quantized != static_cast<int64_t>(layers.size()))
      throw Error("linear_rows: int8 and float layers in one call");
    std::vector<Int8Weight> weights;
    std::vector<at::Tensor> biases;
    for (const auto& l : layers) {
      weights.push_back(l.int8);
      biases.push_back(l.bias);
    }
    return int8_linear(x, weights, biases);
  }
  std::vector<at::Tensor> out;
  const auto shaped = [&](const at::Tensor& y, int64_t size) {
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = size;
    return y.view(sizes);
  };
  if (const int64_t rows = kernel_rows(x, layers); rows > 0) {
    auto ys = kernel_linear(layers, x.reshape({rows, x.size(-1)}));
    for (size_t i = 0; i < ys.size(); ++i) out.push_back(shaped(ys[i], layers[i].weight.size(0)));
    return out;
  }
  for (const auto& l : layers) {
    const int64_t in = l.weight.size(1);
    if (x.dim() >= 1 && x.numel() == in && x.size(-1) == in &&
        x.scalar_type() == l.weight.scalar_type()) {
      at::Tensor r = x.reshape({in});
      at::Tensor y = l.bias.defined() ? at::addmv(l.bias, l.weight, r) : at::mv(l.weight, r);
      out.push_back(shaped(y, l.weight.size(0)));
    } else {
      out.push_back(dense_linear(x, l.weight, l.bias));
    }
  }
  return out;
}

at::Tensor linear_rows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return linear_rows(x, std::vector<DenseLayer>{{weight, bias, {}}})[0];
}

at::Tensor linear_rows(const torch::nn::LinearImpl& layer, const at::Tensor& x) {
  return linear_rows(x, std::vector<DenseLayer>{dense_layer(layer)})[0];
}

}  // namespace attnkit::layers
