#pragma once
// One Hugging Face model family as data (private to io): how config.json names it, which stacks
// its checkpoints hold, how its config maps to and from attnkit's model config, its checkpoint
// name table, tied aliases, buffers to skip, which heads a checkpoint holds and how pruned heads
// are stored. huggingface.cpp's one loader and one saver are generic over these records;
// huggingface_families() (hf_families.cpp) is the table they read. Adding a family = one file
// defining its record (a function returning it, declared below) + one row in that table.
#include "attnkit/error.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_config.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace attnkit::io::detail {

// ------------------------------------------------------------------------------------------
// What a family's checkpoints hold. A record lists its stacks: an encoder (encoder-only families,
// read as a TaskModel whose attention site is "encoder.self"), a decoder (decoder-only families:
// "decoder.self"), or both (encoder-decoder families, read as an EncoderDecoderModel); a stack's
// rules cover its embeddings too. Heads are what lies outside the stacks (task heads, LM head,
// final_logits_bias).
enum class Stack { Encoder, Decoder, Heads };

// Name tables. A rule binds one HF tensor to one attnkit tensor (or three, for GPT-2's fused
// c_attn). A stack's rules are relative to the base prefix on the HF side and to the stack's
// module on ours ("transformer." in a TaskModel, "encoder." / "decoder." in an
// EncoderDecoderModel), and "{layer}" is a block of that stack; Heads rules are absolute on both
// sides.
enum class TensorLayout {
  Same,        // the same shape and values
  Transposed,  // Conv1D's [in, out] against Linear's [out, in]
  FusedQkv,    // q|k|v side by side in one Conv1D ([in, 3 out]); `ours` contains "{qkv}"
  RowBlocks,   // ours stacked by rows in one Linear (Phi-3's qkv_proj, gate_up_proj): `ours`
               // contains "{part}", replaced by each of `parts` in order; blocks of any height
};

struct NameRule {
  std::string hf;
  std::string ours;
  Stack stack;
  TensorLayout layout = TensorLayout::Same;
  bool optional = false;  // a checkpoint may lack it: the tensor keeps its initial value
  std::vector<std::string> parts = {};  // RowBlocks only
};

// Rules for one module's weight and (when `bias`) bias.
void add_dense(std::vector<NameRule>& rules, const std::string& hf, const std::string& ours, Stack stack,
               TensorLayout layout = TensorLayout::Same, bool bias = true);

// A tensor a checkpoint may hold that repeats another: `alias` repeats `canonical`; either is
// absolute, or relative to the base prefix when it starts with '@'.
struct TiedAlias {
  std::string alias;
  std::string canonical;
};

// The model a config.json describes, in attnkit's terms: the one stack with its task heads (a
// family with an encoder or a decoder), or the encoder-decoder's config (a family with both).
struct HuggingFaceConfig {
  models::TransformerConfig stack{};
  models::HeadsConfig heads{};
  models::EncoderDecoderConfig encoder_decoder{};
};

// The tensors of a checkpoint, as a family's head detection sees them: canonical names (LayerNorm
// gamma/beta read as weight/bias), with the base prefix when the checkpoint has one.
class CheckpointContents {
 public:
  virtual ~CheckpointContents() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual bool has_any_with_prefix(const std::string& prefix) const = 0;
  // The first dimension of `name` (present); throws attnkit::Error for a scalar.
  virtual int64_t rows(const std::string& name) const = 0;
  // Whether the tensors `a` and `b` (both present) hold the same values.
  virtual bool same_values(const std::string& a, const std::string& b) const = 0;
  // A base name (relative to the base prefix) as the checkpoint spells it.
  virtual std::string base(const std::string& name) const = 0;
};

// How pruned heads are stored.
enum class HeadPruning {
  // transformers prunes the family's heads: config.json's "pruned_heads" ({layer: [heads]}) and
  // tensors of the kept heads only.
  InConfig,
  // transformers cannot (config.json's pruned_heads would make from_pretrained fail): tensors at
  // full size, the removed heads' slices zero, and the heads by site under "attnkit_pruned_heads"
  // ({"encoder.self": {layer: [heads]}, ...}), which loading prunes again.
  Zeroed,
  // transformers cannot prune, and the heads are grouped (the Llama families): a model pruned
  // alike in every layer (the same query and key/value head counts, whole groups or the same
  // number of query heads per group) is written at its pruned size, config.json's
  // num_attention_heads / num_key_value_heads / head_dim changed; other pruned models are refused
  // (attnkit's format keeps them).
  Shrunk,
};

struct HuggingFaceFamily {
  const char* model_type;                          // config.json's "model_type", e.g. "bert"
  std::vector<std::string> architecture_prefixes;  // "architectures" names it is detected by
  const char* base_prefix;                         // base names' prefix in *For* checkpoints
  std::vector<Stack> stacks;                       // what its checkpoints hold (see Stack)
  HeadPruning pruning;
  // config.json (the family's own keys; pruned heads are read by the caller) -> the model.
  // Throws attnkit::Error "config.json: ..." naming the key, for a feature attnkit lacks.
  HuggingFaceConfig (*config_from_json)(const nlohmann::json& config_json);
  // The model -> the config.json save_pretrained writes (without pruned heads and torch_dtype,
  // which the caller adds, after checking, for a one-stack family, what every such family needs:
  // softmax attention, learned positions, no cross attention). Throws (require_expressible) for
  // a config the family cannot express.
  nlohmann::json (*config_to_json)(const HuggingFaceConfig& config);
  std::vector<NameRule> (*name_rules)(const HuggingFaceConfig& config);
  std::vector<TiedAlias> (*tied_aliases)(const HuggingFaceConfig& config);
  const char* buffer_names;  // regex (ECMAScript) over base names of tensors recognised and skipped
  // Which heads and optional parts (pooler, token types) the checkpoint holds; `config` arrives
  // as config_from_json made it. nullptr: the config says it all.
  void (*detect_heads)(const CheckpointContents& contents, const nlohmann::json& config_json,
                       HuggingFaceConfig& config);
  // The output name of the next-sentence head in the family's Hugging Face models.
  const char* next_sentence_output = "seq_relationship_logits";

  bool has(Stack stack) const;
  bool encoder_decoder() const { return has(Stack::Encoder) && has(Stack::Decoder); }
};

// The table of families (hf_families.cpp), in the order errors list them.
const std::vector<const HuggingFaceFamily*>& huggingface_families();
// "bert, albert, gpt2, marian, bart, roberta, llama, ...": the model types of the table.
std::string huggingface_model_types();
// The family of a config.json "model_type"; throws attnkit::Error "config.json: model_type 'X' is
// not supported (attnkit reads bert, albert, ..., gemma)", X on one line.
const HuggingFaceFamily& huggingface_family_named(const std::string& model_type);
// The family config.json names: its "model_type", else the first "architectures" name that
// starts with a family's prefix. Throws attnkit::Error "config.json: ...".
const HuggingFaceFamily& detect_family(const nlohmann::json& config_json);

// `s` with every `from` replaced by `to`.
std::string replace_all(std::string s, const std::string& from, const std::string& to);

// ------------------------------------------------------------------------------------------
// config.json readers for the families: errors are one line, "config.json: ..." naming the key.

// `text` quoted for an error message: on one line, control characters escaped.
inline std::string quoted(const std::string& text) { return "'" + one_line(text) + "'"; }

const nlohmann::json& require(const nlohmann::json& j, const char* key);

template <typename T>
T value(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = require(j, key);
  try {
    if constexpr (std::is_same_v<T, int64_t>) {
      if (!v.is_number_integer())
        throw Error(fmt::format("config.json: '{}' must be an integer ({})", key, v.dump()));
    }
    return v.template get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(fmt::format("config.json: '{}' has the wrong type ({})", key, v.dump()));
  }
}

template <typename T>
T value_or(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : value<T>(j, key);
}

// Throws when j[key] is true: `what` names the feature attnkit does not implement.
void reject_true(const nlohmann::json& j, const char* key, const char* what);
// j[key] (or `fallback`) as an activation: gelu, gelu_new, gelu_tanh, gelu_pytorch_tanh, relu,
// silu, swish;
// another name is an error naming the key.
layers::Activation activation_or(const nlohmann::json& j, const char* key, const char* fallback);
// Whether one of "architectures" contains `part`.
bool architecture_contains(const nlohmann::json& j, const std::string& part);
// id2label / label2id as save_pretrained writes them for `labels` classes.
nlohmann::json label_maps(int64_t labels);
// Throws attnkit::Error "cannot write a Hugging Face 'FAMILY' config: WHAT" unless `ok`.
void require_expressible(bool ok, const models::TransformerConfig& config, const char* what);

}  // namespace attnkit::io::detail
