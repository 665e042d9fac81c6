#pragma once
// Linearizing a trained softmax model (issue 45; `attnkit linearize`, docs/training.md): some of
// its attention layers swapped for a linear-family kind (cosFormer, linear attention with a fixed
// or trained feature map) as a hybrid (TransformerConfig::layer_attention_specs), and stage 1,
// attention transfer (Zhang et al. 2024, LoLCATs; Kasai et al. 2021, T2R): only the converted
// layers' feature maps trained so that each layer's per-head contexts match its softmax teacher's
// on the model's own data (MultiHeadAttentionImpl::set_transfer_teacher), every other weight the
// teacher's and frozen. Stage 2 (fine-tuning) is the trainer's (`attnkit train --init`).
#include "attnkit/analysis/heads_experiment.h"
#include "attnkit/layers/attention_spec.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/models/model.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attnkit::analysis {

// `text` as a linear-family kind (cosformer, linear:elu | relu | favor | t2r[:M] | hedgehog[:M]).
// Throws attnkit::Error naming the accepted kinds for anything else (a softmax or logit kind).
layers::AttentionSpec linear_family_kind(const std::string& text);

// One attention layer of a model: its site (Model::attention_sites' names) and depth.
struct LayerSite {
  std::string site;
  int64_t layer = 0;
};

// Which layers to convert, of `sites` (empty = every site of the model): `layers` at each of them
// (empty = all), or, with keep_softmax >= 0, all but the keep_softmax layers of highest summed
// head importance in `importance_file` (a heads.json of `analyze heads --out`; ties to the
// earlier layer). In site order, then by depth. Throws attnkit::Error for an unknown site, a layer
// outside a site, a heads.json that is not this model's, keep_softmax above the layers there are.
std::vector<LayerSite> layers_to_convert(const models::Model& model, const std::vector<std::string>& sites,
                                         const std::vector<int64_t>& layers, int64_t keep_softmax = -1,
                                         const std::string& importance_file = "");

// A converted layer of the student: where, its teacher's spec (plain softmax), the layer.
struct ConvertedLayer {
  LayerSite where;
  layers::AttentionSpec teacher;
  layers::MultiHeadAttention attention{nullptr};
};

struct Student {
  std::shared_ptr<models::Model> model;  // in eval mode
  std::vector<ConvertedLayer> layers;
  // The converted layers' trained feature-map parameters (feature_map_weight, feature_map_bias);
  // empty for the kinds without (cosformer, elu, relu, favor).
  std::vector<at::Tensor> feature_maps;
};

// The student of `teacher`: its description (Model::config_description) with each of `convert`'s
// layers given `kind` (kind and feature map; causality, key/value sizes, grouped key/value heads,
// biases and q/k norms the teacher layer's), built by models::make_model, every teacher parameter
// and buffer copied in by name (the new feature maps keep their initialisation). Throws
// attnkit::Error for a converted layer that is not plain softmax, shared layers (ALBERT),
// Conditional LayerNorm, a quantized teacher, or a teacher tensor the student lacks or shapes
// differently.
Student make_student(models::Model& teacher, const std::vector<LayerSite>& convert,
                     const layers::AttentionSpec& kind);

// The rows [begin, end) of `inputs` (a task's input ids and mask, or translation pairs).
HeadsInputs input_rows(const HeadsInputs& inputs, int64_t begin, int64_t end);
int64_t input_row_count(const HeadsInputs& inputs);

struct TransferOptions {
  int64_t steps = 200;
  int64_t batch_size = 8;
  int64_t log_every = 10;  // and the first and last step
  double lr = 1e-2;        // Adam (LoLCATs' attention-transfer rate)
  uint64_t seed = 0;       // batch order
  // Called at each logged step with the step and the converted layers' losses of its batch.
  std::function<void(int64_t step, const std::vector<double>& losses)> on_log;
};

struct TransferCurvePoint {
  int64_t step = 0;
  double loss = 0;
};

struct TransferResult {
  bool trained = false;  // false: a kind without trained maps, or steps = 0 (measured only)
  int64_t steps = 0, train_examples = 0, eval_examples = 0;
  // Per converted layer (Student::layers' order): its batch losses at the logged steps, and its
  // mean transfer loss on the held-out examples before and after.
  std::vector<std::vector<TransferCurvePoint>> curves;
  std::vector<double> initial, final;
};

// Stage 1: the student's converted layers in transfer mode, its feature maps alone trained by
// Adam on the sum of the layers' transfer losses over batches of `train` (a fresh order per pass,
// from options.seed), the held-out losses on `held_out` before and after; transfer is switched
// off again at the end and every parameter trainable. A student without feature maps is measured
// only.
TransferResult attention_transfer(Student& student, const HeadsInputs& train, const HeadsInputs& held_out,
                                  const TransferOptions& options);

// transfer.json: per layer {site, layer, teacher, curve [{step, loss}], initial, final} and the
// totals (sums over the layers).
nlohmann::json to_json(const Student& student, const TransferResult& result);

}  // namespace attnkit::analysis
