#pragma once
// models::Model: the one interface of every attnkit model, whatever its shape:
//
//   encoder-only     a bidirectional TransformerModel + task heads (BERT, ALBERT; TaskModel)
//   decoder-only     a causal TransformerModel + task heads (GPT-2, a conditional LM; TaskModel)
//   encoder-decoder  two stacks, the decoder's blocks with cross attention (EncoderDecoderModel)
//
// What every consumer does the same way for every shape goes through the interface: the module
// (parameters, buffers, train/eval), the attention sites (gates, head counts, pruning), the
// description that rebuilds the model (config_description; model_factory.h's make_model), the
// parameter count, decoding (decoding(): a session that decode/'s search strategies drive).
// What only one shape has (a task head's forward, the encoder-decoder's teacher-forced forward,
// a decoding session) is reached through the checked downcasts task_model() / encoder_decoder(),
// which name the model's shape and the operation in one line when it does not fit. An abstract
// interface rather than a std::variant: the generic consumers (model directories, checkpoints,
// heads analysis, pruning) then have one code path instead of a visit with the same branches,
// and a new shape (a two-tower retrieval model, a pretraining model) is one new class.
//
// Attention sites: each place where a model's heads live, in a fixed order (encoder self,
// decoder self, cross). A site names a layer stack (a TransformerModel) and which attention of
// its blocks (models::AttentionSite Self / Cross); head gates ξ, importance, ablations and
// pruning iterate over sites. Names: "encoder.self" (encoder-only models and the encoder of an
// encoder-decoder), "decoder.self" (decoder-only models and the decoder), "decoder.cross".
#include "attnkit/models/decoding.h"
#include "attnkit/models/transformer_model.h"

#include <ATen/core/Tensor.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace attnkit::models {

class TaskModelImpl;
class EncoderDecoderModelImpl;

enum class ModelShape { EncoderOnly, DecoderOnly, EncoderDecoder };
const char* to_string(ModelShape shape);  // "encoder-only" | "decoder-only" | "encoder-decoder"

// One attention site of a model: a handle (the stack is shared with the model).
struct AttentionSiteRef {
  std::string name;                      // "encoder.self" | "decoder.self" | "decoder.cross"
  TransformerModel stack{nullptr};       // the layer stack whose blocks hold the heads
  AttentionSite attention = AttentionSite::Self;

  int64_t layers() const;                        // depths (layers) of the stack
  std::vector<int64_t> heads_per_layer() const;  // after pruning
  // Gates ξ per layer (TransformerModelImpl::set_head_gates); empty = none.
  void set_head_gates(const std::vector<at::Tensor>& gates) const;
  // The attention layer of `layer` (depth) at this site.
  layers::MultiHeadAttention layer(int64_t layer) const;
};

// Heads by attention site: site name -> {layer: [heads]}. The name "" stands for the only site of
// a model that has one (the {"layer": [heads]} form of the command line).
using SiteHeads = std::map<std::string, HeadIndices>;
// {"layer": [heads]} (-> {"": ...}) or {"SITE": {"layer": [heads]}, ...} (every value an object).
// Throws attnkit::Error naming `what` for anything else (head_indices_from_json's rules).
SiteHeads site_heads_from_json(const nlohmann::json& j, const std::string& what);

class Model {
 public:
  virtual ~Model() = default;

  virtual ModelShape shape() const = 0;
  virtual torch::nn::Module& module() = 0;
  virtual const torch::nn::Module& module() const = 0;

  // The sites in their fixed order (encoder self, decoder self, cross): one for the task models,
  // three for the encoder-decoder.
  virtual std::vector<AttentionSiteRef> attention_sites() const = 0;
  // The site named `name`. Throws attnkit::Error naming the model's sites for another name.
  AttentionSiteRef attention_site(const std::string& name) const;
  // Physical head pruning at a site ({layer: [heads]} in the unpruned numbering, Hugging Face's
  // prune_heads convention); recorded in the model's config, so a saved model reloads pruned.
  virtual void prune_heads(const std::string& site, const HeadIndices& heads) = 0;
  // Heads of every site now (after pruning).
  int64_t head_count() const;
  // Each site `heads` names, with its heads, in the given order. Throws attnkit::Error "`what`:
  // ..." for an unknown site name, or for "" when the model has several sites.
  std::vector<std::pair<AttentionSiteRef, HeadIndices>> resolve_site_heads(
      const SiteHeads& heads, const std::string& what) const;

  // What make_model rebuilds this model from (without weights): a JSON object that an attnkit
  // config.json and checkpoint metadata carry beside "attnkit_format". Task models: {"model":
  // TransformerConfig, "heads": HeadsConfig} (the layout of every file written so far);
  // encoder-decoder: {"architecture": "encoder-decoder", "encoder_decoder": EncoderDecoderConfig}.
  virtual nlohmann::json config_description() const = 0;
  // Decoding (models/decoding.h): how prompts are written and ended, and a session over the
  // request's prompts whose layers keep the states `caches` makes (decode::caches()). decoding()
  // checks the request first (attnkit::Error "generate: ..." for an empty prompt, an id outside
  // the vocabulary, a condition or start token the model cannot take, a model without an LM
  // head). Call it, and the session, in eval mode under torch::NoGradGuard.
  virtual DecodingTraits decoding_traits() const = 0;
  virtual Decoding decoding(const DecodingRequest& request, const CacheFactory& caches) = 0;

  // Checked downcasts: the model as a task model (encoder-only or decoder-only) or as an
  // encoder-decoder. Throw attnkit::Error "`what` needs a ... model; this is an S model".
  TaskModelImpl& task_model(const std::string& what);
  EncoderDecoderModelImpl& encoder_decoder(const std::string& what);
};

}  // namespace attnkit::models
