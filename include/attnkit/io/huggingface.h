#pragma once
// Hugging Face interop (BERT, ALBERT, GPT-2, RoBERTa, Marian, BART): config.json <-> attnkit's
// model config, and checkpoint tensor names <-> attnkit tensor names through one name table per
// family (`{layer}` = a block of the rule's stack; ALBERT's blocks are its layer groups). Each
// family is one record of the table in src/io/hf_families.cpp (src/io/hf_family.h); one loader
// and one saver (src/io/huggingface.cpp) read the records and never name a family.
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

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace attnkit::io {

// How a checkpoint was laid out, so saving can write the same layout back.
struct HuggingFaceLayout {
  std::string model_type;                        // a family of the table (its model_type)
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

// The tensors of a checkpoint, however stored: one model.safetensors, the shards a
// model.safetensors.index.json names, or tensors made in memory (a GGUF file's, io/gguf_model.h).
class CheckpointTensors {
 public:
  virtual ~CheckpointTensors() = default;
  virtual const std::vector<TensorEntry>& entries() const = 0;  // name, dtype, shape
  // Throws attnkit::Error naming the checkpoint for an unknown name.
  virtual const TensorEntry& entry(const std::string& name) const = 0;
  virtual at::Tensor tensor(const std::string& name) const = 0;  // as stored (any dtype)
  // `use` called with the tensor as stored, valid during the call only (a file's mapped bytes,
  // SafetensorsFile::read_into: the loader's one copy); by default tensor(name).
  virtual void read_into(const std::string& name, const std::function<void(const at::Tensor&)>& use) const {
    use(tensor(name));
  }
  // The tensor as stored over memory it shares with the checkpoint instead of a copy
  // (SafetensorsFile::shared_tensor), or undefined where it has none to share (the default).
  virtual at::Tensor shared_tensor(const std::string& name) const { return {}; }
  virtual const std::string& path() const = 0;  // what messages name
};

// `directory`'s model.safetensors, or the shards its model.safetensors.index.json names
// ({"weight_map": {tensor: shard file}}: each shard opened once, every tensor in the shard the
// map names, shard names plain file names in `directory`). Throws attnkit::Error naming the file.
std::unique_ptr<CheckpointTensors> open_safetensors_checkpoint(const std::string& directory);
// Tensors held in memory under their Hugging Face names, reported as `path`.
std::unique_ptr<CheckpointTensors> memory_checkpoint(std::map<std::string, at::Tensor> tensors,
                                                     std::string path);

// The model `config_json` describes (its family from model_type / architectures), filled from
// `tensors` as load_huggingface does; config errors name `config_where`.
std::shared_ptr<models::Model> load_huggingface_checkpoint(const nlohmann::json& config_json,
                                                           const std::string& config_where,
                                                           const CheckpointTensors& tensors,
                                                           HuggingFaceModel* info = nullptr);

// Reads config.json + model.safetensors (or sharded safetensors) from `directory` (any family of
// the table), builds the
// model its family's stacks make -- a TaskModel with the heads the checkpoint holds (MLM,
// NSP/SOP, causal LM, classifier, token classifier, QA span) for an encoder or a decoder, an
// EncoderDecoderModel for both -- and loads every tensor. Unknown or missing tensors are errors
// listing the names; a shape mismatch names the tensor, the expected and the actual shape; a
// config.json error names the file and the key, on one line.
std::shared_ptr<models::Model> load_huggingface(const std::string& directory, HuggingFaceModel* info = nullptr);

// The checkpoint tensors of `model` under Hugging Face names, as `layout` says (family, prefix,
// dtypes, tied copies). Tensors stay float32 unless the layout names another dtype; an
// encoder-decoder's pruned heads are written back at full size with zeros.
NamedTensors huggingface_tensors(models::Model& model, const HuggingFaceLayout& layout);

// Writes config.json + model.safetensors (metadata {"format": "pt"}) to `directory` atomically.
// info.config_json is written back with the pruned heads updated (pruned_heads, or an
// encoder-decoder's attnkit_pruned_heads); when it is null a fresh config is written: the family
// info.layout.model_type names, else a one-stack model's own family (default_layout), else the
// first encoder-decoder family of the table that can express the model (Marian, BART).
void save_huggingface(models::Model& model, const HuggingFaceModel& info, const std::string& directory);
inline void save_huggingface(models::TaskModel& model, const HuggingFaceModel& info,
                             const std::string& directory) {
  save_huggingface(*model, info, directory);
}

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

// The name the family's Hugging Face models give the next-sentence (sentence-order) logits:
// ALBERT's "sop_logits", else "seq_relationship_logits".
const char* next_sentence_output_name(const models::ModelFamily& family);

}  // namespace attnkit::io
