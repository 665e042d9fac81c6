#pragma once
// int8 models (`generate --compute-type int8`, `convert --quantize int8`): every attention and
// feed-forward dense layer (layers/int8_linear.h, the scheme) and the language-model head. The
// word embeddings stay float: a head tied to them gets an int8 copy.
//
// The head's int8 weight lives on the TransformerModel whose outputs it reads (the task model's
// transformer, the encoder-decoder's decoder) as buffers `lm_head_int8` [vocab, hidden] and
// `lm_head_scale` [vocab]; an untied head's float parameter becomes an empty tensor.
#include "attnkit/layers/int8_linear.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnkit::models {

class Model;
class TransformerModelImpl;

// Quantizes `model` in place for `type` (Int8; Float32 and Bf16: nothing). values = false makes the int8 buffers'
// shapes only (zeros), for a model whose int8 state is loaded next. Idempotent.
void quantize_model(Model& model, layers::ComputeType type, bool values = true);

// For decoding: the int8 layers and head of a quantized model in the panel kernel's layout
// (layers::pack_int8_layers; nothing where that kernel does not run). Such a model is not saved
// (io::save_model refuses it). Returns the number of dense layers packed.
int64_t pack_int8_model(Model& model);

// Int8 when the model's layers are quantized, else Float32.
layers::ComputeType model_compute_type(const Model& model);

// hidden [..., hidden] · headᵀ for the LM head over `model` (models::lm_head_weight(own_head,
// model) when float): the int8 copy when the model has one; else layers::linear_rows (a decoding
// step, step = true: attnkit's few-row kernels) or at::linear (a full forward).
at::Tensor lm_head_product(const at::Tensor& hidden, const at::Tensor& own_head,
                           const TransformerModelImpl& model, bool step);

}  // namespace attnkit::models
