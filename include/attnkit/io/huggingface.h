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

}  // namespace attnkit::io
