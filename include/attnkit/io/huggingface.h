#pragma once
// Hugging Face interop for BERT, ALBERT and GPT-2: config.json <-> TransformerConfig + HeadsConfig,
// and checkpoint tensor names <-> attnkit module names through one name table per family
// (`{layer}` = block index; ALBERT's blocks are its layer groups). Each family is one record of
// the table in src/io/hf_families.cpp (src/io/hf_family.h); the functions here are generic.
//
// Loading accepts what save_pretrained and older releases wrote: names with or without the base
// prefix ("bert." / "albert." / "transformer."), LayerNorm ".gamma"/".beta", non-parameter buffers
// (position_ids, GPT-2's attn.bias / attn.masked_bias, which are recognised and skipped), tied
// weights absent or present (cls.predictions.decoder.weight, lm_head.weight), F32/F16/BF16/F64
// storage (converted to float32). GPT-2's Conv1D weights are stored [in, out] (transposed here)
// and c_attn holds q|k|v side by side (split here). Saving writes the names, dtypes and tied
// copies the checkpoint had, so a load + save round trip reproduces every parameter bit for bit.
#include "attnkit/io/safetensors.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace attnkit::io {

// How a checkpoint was laid out, so saving can write the same layout back.
struct HuggingFaceLayout {
  std::string model_type;                        // a family of the table: bert | albert | gpt2
  bool prefixed = false;                         // base names carry "bert." etc.
  std::map<std::string, std::string> dtypes;     // HF name -> safetensors dtype (F32 default)
  std::vector<std::string> tied_copies;          // tied aliases the file held (re-written)
  std::vector<std::string> alias_only;           // canonical names stored only as their alias
  std::vector<std::string> skipped;              // buffers recognised and not loaded
};

struct HuggingFaceModel {
  models::TransformerConfig config;
  models::HeadsConfig heads;
  nlohmann::json config_json;  // the config.json as read (written back unchanged)
  HuggingFaceLayout layout;
};

// config.json -> TransformerConfig; `model_type` from "model_type" or "architectures". Throws
// attnkit::Error (one line) for an unknown model type, listing the families attnkit reads, or for
// a feature attnkit does not implement (relative positions, cross attention in BERT, ALBERT inner
// groups > 1, an activation it lacks, ...), naming the key.
models::TransformerConfig config_from_huggingface(const nlohmann::json& config_json,
                                                  std::string* model_type = nullptr);
// TransformerConfig + heads -> a config.json save_pretrained would write. Throws when the config
// is not expressible in the family (e.g. linear attention in a "bert" config).
nlohmann::json config_to_huggingface(const models::TransformerConfig& config,
                                     const models::HeadsConfig& heads);

// Reads config.json + model.safetensors from `directory`, builds the TaskModel with the heads
// the checkpoint holds (MLM, NSP/SOP, causal LM, classifier, token classifier, QA span) and loads
// every tensor. Unknown or missing tensors are errors listing the names; a shape mismatch names
// the tensor, the expected and the actual shape.
models::TaskModel load_huggingface(const std::string& directory, HuggingFaceModel* info = nullptr);

// The checkpoint tensors of `model` under Hugging Face names, as `layout` says (prefix, dtypes,
// tied copies). Parameters stay float32 unless the layout names another dtype.
NamedTensors huggingface_tensors(models::TaskModel& model, const HuggingFaceLayout& layout);

// Writes config.json + model.safetensors (metadata {"format": "pt"}) to `directory` atomically.
void save_huggingface(models::TaskModel& model, const HuggingFaceModel& info,
                      const std::string& directory);

// The layout a fresh save uses for a model of this family (prefix when the model has heads).
HuggingFaceLayout default_layout(const models::TransformerConfig& config,
                                 const models::HeadsConfig& heads);

// ---- encoder-decoder families: Marian (MarianMTModel, the Opus-MT checkpoints) and BART --------
// (BartForConditionalGeneration), into models::EncoderDecoderModel. Both are post-LN with q/k/v/o
// biases; Marian has sinusoidal positions laid out in halves (sinusoid-halves: sines, then
// cosines; not stored in the checkpoint) and no embedding LayerNorm; BART has learned positions
// whose table starts 2 rows before position 0 and a LayerNorm after the embeddings (its
// layernorm_embedding). scale_embedding multiplies token embeddings by sqrt(d_model);
// final_logits_bias is added to the logits; shared.weight is the token embedding of both stacks
// (Marian's share_encoder_decoder_embeddings = false: one per stack) and, tied, the LM head;
// decoder_start_token_id is kept in the config. Heads: transformers cannot prune Marian or BART
// heads (config.json's pruned_heads would make from_pretrained fail), so a pruned model is
// written with the full head count, the removed heads' projections zero (the same outputs), and
// its pruned heads by site under "attnkit_pruned_heads" ({"encoder.self": {"layer": [heads]},
// "decoder.self": ..., "decoder.cross": ...}), which loading prunes again.

// Whether config.json names an encoder-decoder family (its model_type or architectures).
bool is_huggingface_encoder_decoder(const nlohmann::json& config_json);
// config.json -> the model config (pruned heads not applied). Throws attnkit::Error
// "config.json: ..." naming the key that is missing, of the wrong type or not supported.
models::EncoderDecoderConfig encoder_decoder_config_from_huggingface(const nlohmann::json& config_json,
                                                                     std::string* model_type = nullptr);
// Reads config.json + model.safetensors (with or without the "model." prefix; tied copies of
// shared.weight present or not; Marian's stored sinusoid skipped) and loads every tensor; errors
// name the file and the tensor or key, on one line.
models::EncoderDecoderModel load_huggingface_encoder_decoder(const std::string& directory,
                                                             HuggingFaceModel* info = nullptr);
// The model's tensors under the family's names, as `layout` says (layout.model_type: marian or
// bart); pruned heads are written back at full size with zeros.
NamedTensors huggingface_encoder_decoder_tensors(models::EncoderDecoderModelImpl& model,
                                                 const HuggingFaceLayout& layout);
// Writes config.json (info.config_json updated: attnkit_pruned_heads; a fresh config when it is
// null) + model.safetensors to `directory`, atomically.
void save_huggingface_encoder_decoder(models::EncoderDecoderModelImpl& model,
                                      const HuggingFaceModel& info, const std::string& directory);

}  // namespace attnkit::io
