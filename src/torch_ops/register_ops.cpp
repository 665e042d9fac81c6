// torch.ops.attnkit.*: the attention ops as PyTorch operators for LibTorch 1.13 (Debian's
// python3-torch), loadable with torch.ops.load_library("build/libattnkit_ops.so").
// m.def(schema, fn) registers each as a CompositeImplicitAutograd operator: autograd sees what the
// function calls, i.e. the toolkit's own autograd Functions (FlashAttention, FusedFeatureAttention,
// CausalProduct: their backward passes are attnkit's fused kernels) and, on the unfused paths,
// ATen ops. There are no fake/meta kernels, so torch.compile cannot trace them; the pip package
// (src/torch_ops/package_ops.cpp, docs/python.md) is the torch.library form for PyTorch 2.x.
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/softmax_attention.h"

#include <torch/library.h>

namespace {

at::Tensor softmax_attention_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const c10::optional<at::Tensor>& mask, bool causal,
                                c10::optional<double> scale, double dropout, int64_t seed) {
  return attnkit::ops::softmax_attention(q, k, v, mask, causal, scale,
                                         {dropout, static_cast<uint64_t>(seed)});
}

at::Tensor linear_attention_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               c10::string_view feature_map, bool causal) {
  return attnkit::ops::linear_attention(q, k, v, std::string(feature_map), causal);
}

at::Tensor cosformer_attention_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  bool causal) {
  return attnkit::ops::cosformer_attention(q, k, v, causal);
}

at::Tensor favor_projection_op(int64_t dim, int64_t num_features, int64_t seed) {
  return attnkit::ops::favor_projection(dim, num_features, static_cast<uint64_t>(seed));
}

}  // namespace

TORCH_LIBRARY(attnkit, m) {
  m.def("softmax_attention(Tensor q, Tensor k, Tensor v, Tensor? mask=None, bool causal=False, "
        "float? scale=None, float dropout=0.0, int seed=0) -> Tensor",
        &softmax_attention_op);
  m.def("linear_attention(Tensor q, Tensor k, Tensor v, str feature_map=\"elu\", "
        "bool causal=False) -> Tensor",
        &linear_attention_op);
  m.def("cosformer_attention(Tensor q, Tensor k, Tensor v, bool causal=False) -> Tensor",
        &cosformer_attention_op);
  m.def("favor_projection(int dim, int num_features, int seed=0) -> Tensor", &favor_projection_op);
}
