// int8 models: include/attnkit/models/quantize.h.
#include "attnkit/models/quantize.h"

#include "../ops/cpu/int8_gemm_kernel.h"
#include "attnkit/error.h"
#include "attnkit/layers/row_linear.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_model.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace attnkit::models {
namespace {

constexpr const char* kHeadValues = "lm_head_int8";
constexpr const char* kHeadScale = "lm_head_scale";

layers::Int8Weight head_int8(const TransformerModelImpl& model) {
  return layers::int8_buffers(model, kHeadValues, kHeadScale, model.config().hidden);
}

// The head's int8 weight in panels, where the panel kernel runs (layers::pack_int8_layers).
void pack_head(TransformerModelImpl& model) {
  const layers::Int8Weight w = head_int8(model);
  if (!w.defined() || w.is_packed() || !ops::cpu::int8_panels_preferred(w.in())) return;
  layers::store_packed(model, kHeadValues, layers::pack_int8(w));
}

void release_freed_memory() {
#if defined(__GLIBC__)
  // The released float weights are mostly heap chunks below glibc's (grown) mmap threshold: give
  // their pages back, or the process stays as large as the float model.
  malloc_trim(0);
#endif
}

void quantize_head(at::Tensor& own_head, TransformerModelImpl& model, bool values) {
  if (head_int8(model).defined()) return;
  const at::Tensor& weight = lm_head_weight(own_head, model);
  layers::Int8Weight q;
  if (values) {
    q = layers::quantize_int8(weight);
  } else {
    q = {at::zeros(weight.sizes(), weight.options().dtype(at::kChar)),
         at::zeros({weight.size(0)}, weight.options())};
  }
  model.register_buffer(kHeadValues, q.values);
  model.register_buffer(kHeadScale, q.scale);
  if (own_head.defined()) {  // untied: the float copy goes (a tied head's is the embedding)
    at::NoGradGuard no_grad;
    own_head.set_requires_grad(false);
    own_head.set_();
  }
}

}  // namespace

void quantize_model(Model& model, layers::ComputeType type, bool values) {
  if (type != layers::ComputeType::Int8) return;  // float32 (bf16 falls back to it)
  at::NoGradGuard no_grad;
  // An int8 model is for inference: nothing of it is trained (int8_linear refuses gradients).
  for (auto& p : model.module().parameters()) p.set_requires_grad(false);
  layers::quantize_linears(model.module(), values);
  if (auto* task = dynamic_cast<TaskModelImpl*>(&model)) {
    if (task->heads().causal_lm) quantize_head(task->lm_head, *task->transformer, values);
  } else if (auto* seq2seq = dynamic_cast<EncoderDecoderModelImpl*>(&model)) {
    quantize_head(seq2seq->lm_head, *seq2seq->decoder, values);
  }
  release_freed_memory();
}

int64_t pack_int8_model(Model& model) {
  at::NoGradGuard no_grad;
  const int64_t packed = layers::pack_int8_layers(model.module());
  if (auto* task = dynamic_cast<TaskModelImpl*>(&model)) {
    if (task->heads().causal_lm) pack_head(*task->transformer);
  } else if (auto* seq2seq = dynamic_cast<EncoderDecoderModelImpl*>(&model)) {
    pack_head(*seq2seq->decoder);
  }
  release_freed_memory();
  return packed;
}

layers::ComputeType model_compute_type(const Model& model) {
  return layers::has_int8_layers(model.module()) ? layers::ComputeType::Int8
                                                 : layers::ComputeType::Float32;
}

at::Tensor lm_head_product(const at::Tensor& hidden, const at::Tensor& own_head,
                           const TransformerModelImpl& model, bool step) {
  if (const layers::Int8Weight w = head_int8(model); w.defined())
    return layers::int8_linear(hidden, w, {});
  const at::Tensor& weight = lm_head_weight(own_head, model);
  return step ? layers::linear_rows(hidden, weight, {}) : layers::dense_linear(hidden, weight, {});
}

}  // namespace attnkit::models
