// torch.ops.attnkit.*: the operators of the Python package `attnkit` (python/attnkit, built by
// setup.py against the PyTorch >= 2.7 of the environment it is installed into; docs/python.md).
// Unlike src/torch_ops/register_ops.cpp (the LibTorch 1.13 library of the CMake build, whose ops
// are composite wrappers around autograd Functions), every op here but two is a real CPU kernel
// with no autograd of its own: python/attnkit/_ops.py registers their fake (meta) kernels, so that
// torch.compile(fullgraph=True) traces them, and their autograd (torch.library.register_autograd),
// whose backward calls the *_backward ops below (or causal_product itself). The two composite ops
// (favor_projection, recurrent_step) are made of ATen ops, which autograd and torch.compile see
// through. Tensors on any other device than the CPU get a one-line error naming the op and device.
//
//   flash_attention          softmax attention, the fused flash kernel: (out, logsumexp)
//   flash_attention_backward (dq, dk, dv)
//   feature_attention        linear (elu, relu) and cosFormer attention with the feature map in
//                            the fused kernels, non-causal / causal / prefix-LM: (out, denominator)
//   feature_attention_backward (dq, dk, dv)
//   causal_product           tril(Q Kᵀ) V (FAVOR and the unfused causal paths)
//   favor_projection         Performer's random projection W [m, d] (float64)
//   recurrent_step           one decoding step of causal linear attention / cosFormer
#include "attnkit/attention_kind.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/recurrent.h"
#include "ops/checks.h"
#include "ops/feature_attention.h"
#include "ops/flash_attention.h"
#include "ops/fused_feature_attention.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <fmt/format.h>
#include <torch/library.h>

#include <cmath>
#include <string>

namespace {

using attnkit::FeatureMapKind;
namespace detail = attnkit::ops::detail;

void check_cpu_float(const char* op, const char* name, const at::Tensor& t) {
  const auto dtype = t.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble)
    detail::fail(op, fmt::format("{} must be float32 or float64 but has dtype {}", name,
                                 c10::toString(dtype)));
}

void check_kernel_qkv(const char* op, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v) {
  detail::check_qkv(op, q, k, v);
  check_cpu_float(op, "q", q);
}

// A backward op's grad_out and out [B, H, L, dv] and per-row statistic [B, H, L] (lse, den).
void check_saved(const char* op, const at::Tensor& grad_out, const at::Tensor& out,
                 const char* row_name, const at::Tensor& row, const at::Tensor& q,
                 const at::Tensor& v) {
  const std::vector<int64_t> out_shape{q.size(0), q.size(1), q.size(2), v.size(3)};
  if (grad_out.sizes() != at::IntArrayRef(out_shape) || out.sizes() != grad_out.sizes() ||
      row.sizes() != at::IntArrayRef(out_shape).slice(0, 3))
    detail::fail(op, fmt::format("grad_out {}, out {} and {} {} do not fit q {} and v {}",
                                 detail::shape_str(grad_out), detail::shape_str(out), row_name,
                                 detail::shape_str(row), detail::shape_str(q),
                                 detail::shape_str(v)));
}

// ---- softmax attention ----------------------------------------------------------------------

void check_flash(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const c10::optional<at::Tensor>& mask, double scale, double dropout) {
  check_kernel_qkv(op, q, k, v);
  if (mask.has_value() && mask->defined())
    detail::check_attention_mask(op, *mask, q.size(0), q.size(1), q.size(2), k.size(2), q);
  if (!(dropout >= 0.0 && dropout < 1.0))
    detail::fail(op, fmt::format("dropout must be in [0, 1), got {}", dropout));
  if (!std::isfinite(scale)) detail::fail(op, fmt::format("scale must be finite, got {}", scale));
}

at::Tensor defined_or_empty(const c10::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? *t : at::Tensor();
}

std::tuple<at::Tensor, at::Tensor> flash_attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v,
                                                       const c10::optional<at::Tensor>& mask,
                                                       bool causal, double scale, double dropout,
                                                       int64_t seed) {
  check_flash("attnkit::flash_attention", q, k, v, mask, scale, dropout);
  return detail::flash_attention_forward(q, k, v, defined_or_empty(mask), causal, scale, dropout,
                                         seed);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const c10::optional<at::Tensor>& mask,
    bool causal, double scale, double dropout, int64_t seed) {
  constexpr const char* op = "attnkit::flash_attention_backward";
  check_flash(op, q, k, v, mask, scale, dropout);
  check_saved(op, grad_out, out, "lse", lse, q, v);
  return detail::flash_attention_backward(grad_out.to(q.scalar_type()), q, k, v,
                                          out.to(q.scalar_type()), lse.to(q.scalar_type()),
                                          defined_or_empty(mask), causal, scale, dropout, seed);
}

// ---- feature (linear / cosFormer) attention -------------------------------------------------

struct FeatureSettings {
  FeatureMapKind kind;
  double angle_step = 0.0;
  bool clamp = false;
};

// "elu", "relu" or "cosformer"; cosFormer's horizon M = max(L, S) (n in prefix-LM mode).
FeatureSettings feature_settings(const char* op, const std::string& feature, const at::Tensor& q,
                                 const at::Tensor& k) {
  if (feature == "elu") return {FeatureMapKind::Elu};
  if (feature == "relu") return {FeatureMapKind::Relu};
  if (feature == "cosformer") {
    const int64_t M = std::max<int64_t>({q.size(2), k.size(2), 1});
    return {FeatureMapKind::CosRelu, M_PI / 2.0 / static_cast<double>(M), true};
  }
  detail::fail(op, fmt::format("feature must be \"elu\", \"relu\" or \"cosformer\", got \"{}\" "
                               "(FAVOR runs through attnkit.linear_attention)",
                               feature));
}

struct FeatureArgs {
  FeatureSettings settings;
  at::Tensor keep, prefix;
};

FeatureArgs check_feature(const char* op, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, const std::string& feature, bool causal,
                          const c10::optional<at::Tensor>& key_padding_mask,
                          const c10::optional<at::Tensor>& prefix_lengths) {
  detail::check_feature_attention_inputs(op, q, k, v, causal, key_padding_mask);
  check_cpu_float(op, "q", q);
  FeatureArgs args{feature_settings(op, feature, q, k), defined_or_empty(key_padding_mask), {}};
  const bool prefix = prefix_lengths.has_value() && prefix_lengths->defined();
  if (prefix && causal)
    detail::fail(op, "prefix_lengths and causal exclude each other (prefix length 0 is causal)");
  if (causal && (q.size(2) != k.size(2) || args.keep.defined()))
    detail::fail(op, fmt::format("the fused causal kernel needs L = S and no key_padding_mask "
                                 "(q {}, k {}); attnkit.linear_attention and "
                                 "attnkit.cosformer_attention take the other cases",
                                 detail::shape_str(q), detail::shape_str(k)));
  if (prefix) args.prefix = detail::check_prefix_lengths(op, q, k, *prefix_lengths);
  return args;
}

std::tuple<at::Tensor, at::Tensor> feature_attention_cpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, c10::string_view feature,
    bool causal, const c10::optional<at::Tensor>& key_padding_mask,
    const c10::optional<at::Tensor>& prefix_lengths) {
  const auto a = check_feature("attnkit::feature_attention", q, k, v, std::string(feature), causal,
                               key_padding_mask, prefix_lengths);
  return detail::fused_feature_forward(q, k, v, a.keep, a.prefix, a.settings.kind,
                                       a.settings.angle_step, a.settings.clamp, causal);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> feature_attention_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& den, c10::string_view feature, bool causal,
    const c10::optional<at::Tensor>& key_padding_mask,
    const c10::optional<at::Tensor>& prefix_lengths) {
  constexpr const char* op = "attnkit::feature_attention_backward";
  const auto a = check_feature(op, q, k, v, std::string(feature), causal, key_padding_mask,
                               prefix_lengths);
  check_saved(op, grad_out, out, "den", den, q, v);
  return detail::fused_feature_backward(grad_out.to(q.scalar_type()), q, k, v,
                                        out.to(q.scalar_type()), den.to(q.scalar_type()), a.keep,
                                        a.prefix, a.settings.kind, a.settings.angle_step,
                                        a.settings.clamp, causal);
}

// ---- causal product, FAVOR projection, recurrent step ----------------------------------------

at::Tensor causal_product_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              bool reverse) {
  constexpr const char* op = "attnkit::causal_product";
  detail::check_rank(op, "q", q, 4, "[batch, heads, n, m]");
  detail::check_rank(op, "k", k, 4, "[batch, heads, n, m]");
  detail::check_rank(op, "v", v, 4, "[batch, heads, n, e]");
  check_cpu_float(op, "q", q);
  detail::check_same_dtype(op, "q", q, "k", k);
  detail::check_same_dtype(op, "q", q, "v", v);
  if (k.sizes() != q.sizes() || v.sizes().slice(0, 3) != q.sizes().slice(0, 3))
    detail::fail(op, fmt::format("q {}, k {} and v {} must share batch, heads and n, and q and k "
                                 "their last dimension",
                                 detail::shape_str(q), detail::shape_str(k),
                                 detail::shape_str(v)));
  return detail::causal_product_forward(q, k, v, reverse);
}

// num_features = 0: the toolkit's default M = d·ceil(ln d) (FeatureMap::favor).
at::Tensor favor_projection_op(int64_t dim, int64_t num_features, int64_t seed) {
  if (dim <= 0 || num_features < 0)
    detail::fail("attnkit::favor_projection",
                 fmt::format("dim must be positive and num_features non-negative, got {} and {}",
                             dim, num_features));
  return attnkit::ops::FeatureMap::favor(dim, num_features, static_cast<uint64_t>(seed))
      .projection();
}

// state [B, H, m, dv + 1] (zeros before the first token) + φ(k)ᵀ[v, 1]; output φ(q)·S_num over
// φ(q)·S_den + 1e-6 (linear) or max(φ(q)·S_den, 1e-6) (cosFormer, clamp): ops::feature_recurrence
// on explicit features.
std::tuple<at::Tensor, at::Tensor> recurrent_step_op(const at::Tensor& state,
                                                     const at::Tensor& phi_q,
                                                     const at::Tensor& phi_k, const at::Tensor& v,
                                                     bool clamp) {
  constexpr const char* op = "attnkit::recurrent_step";
  for (const at::Tensor* t : {&state, &phi_q, &phi_k, &v})
    if (!t->device().is_cpu())
      detail::fail(op, fmt::format("attnkit runs on the CPU only, got a tensor on {}",
                                   t->device().str()));
  detail::check_rank(op, "phi_q", phi_q, 4, "[batch, heads, 1, m]");
  detail::check_rank(op, "phi_k", phi_k, 4, "[batch, heads, 1, m]");
  detail::check_rank(op, "v", v, 4, "[batch, heads, 1, dv]");
  detail::check_rank(op, "state", state, 4, "[batch, heads, m, dv + 1]");
  const int64_t B = v.size(0), H = v.size(1), m = phi_q.size(3), dv = v.size(3);
  const std::vector<int64_t> one{B, H, 1, m};
  if (phi_q.sizes() != at::IntArrayRef(one) || phi_k.sizes() != at::IntArrayRef(one) ||
      v.size(2) != 1 || state.sizes() != at::IntArrayRef({B, H, m, dv + 1}))
    detail::fail(op, fmt::format("a step takes one token: phi_q {} and phi_k {} must be {}, v {} "
                                 "[batch, heads, 1, dv] and state {} [batch, heads, m, dv + 1]",
                                 detail::shape_str(phi_q), detail::shape_str(phi_k),
                                 detail::shape_str(at::IntArrayRef(one)), detail::shape_str(v),
                                 detail::shape_str(state)));
  at::Tensor next = state;  // feature_recurrence replaces it (the input is not written)
  at::Tensor out = attnkit::ops::feature_recurrence(next, phi_q, phi_k, v, /*causal=*/true, clamp);
  return {out, next};
}

// Every kernel op on a device other than the CPU: one line naming the op and the device.
void refuse_device(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  std::string device = "another device";
  for (const auto& value : *stack)
    if (value.isTensor() && value.toTensor().defined() && !value.toTensor().device().is_cpu()) {
      device = value.toTensor().device().str();
      break;
    }
  detail::fail(handle.schema().name().c_str(),
               fmt::format("attnkit runs on the CPU only, got a tensor on {}", device));
}

constexpr const char* kKernelOps[] = {"flash_attention", "flash_attention_backward",
                                      "feature_attention", "feature_attention_backward",
                                      "causal_product"};

}  // namespace

TORCH_LIBRARY(attnkit, m) {
  m.def("flash_attention(Tensor q, Tensor k, Tensor v, Tensor? mask=None, bool causal=False, "
        "float scale=1.0, float dropout=0.0, int seed=0) -> (Tensor, Tensor)");
  m.def("flash_attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, "
        "Tensor lse, Tensor? mask, bool causal, float scale, float dropout, int seed) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("feature_attention(Tensor q, Tensor k, Tensor v, str feature, bool causal=False, "
        "Tensor? key_padding_mask=None, Tensor? prefix_lengths=None) -> (Tensor, Tensor)");
  m.def("feature_attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, "
        "Tensor den, str feature, bool causal, Tensor? key_padding_mask, "
        "Tensor? prefix_lengths) -> (Tensor, Tensor, Tensor)");
  m.def("causal_product(Tensor q, Tensor k, Tensor v, bool reverse=False) -> Tensor");
  // Composite (CompositeImplicitAutograd): ATen ops only.
  m.def("favor_projection(int dim, int num_features, int seed=0) -> Tensor",
        &favor_projection_op);
  m.def("recurrent_step(Tensor state, Tensor phi_q, Tensor phi_k, Tensor v, bool clamp=False) "
        "-> (Tensor, Tensor)",
        &recurrent_step_op);
}

TORCH_LIBRARY_IMPL(attnkit, CPU, m) {
  m.impl("flash_attention", &flash_attention_cpu);
  m.impl("flash_attention_backward", &flash_attention_backward_cpu);
  m.impl("feature_attention", &feature_attention_cpu);
  m.impl("feature_attention_backward", &feature_attention_backward_cpu);
  m.impl("causal_product", &causal_product_cpu);
}

#define ATTNKIT_REFUSE_DEVICE(KEY)                                                    \
  TORCH_LIBRARY_IMPL(attnkit, KEY, m) {                                               \
    for (const char* name : kKernelOps)                                               \
      m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuse_device>());      \
  }
ATTNKIT_REFUSE_DEVICE(CUDA)
ATTNKIT_REFUSE_DEVICE(XPU)
ATTNKIT_REFUSE_DEVICE(MPS)
