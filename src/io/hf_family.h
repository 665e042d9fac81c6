#pragma once
// One Hugging Face model family as data (private to io): how config.json names it, how its config
// maps to and from TransformerConfig + HeadsConfig, its checkpoint name table, tied aliases,
// buffers to skip and which heads a checkpoint holds. huggingface.cpp's loader and saver are
// generic over these records; huggingface_families() (hf_families.cpp) is the table they read.
// Adding a family = one file defining its record (a function returning it, declared below) + one
// row in that table.
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
// Name tables. A rule binds one HF tensor to one attnkit parameter (or three, for GPT-2's fused
// c_attn). Base rules are relative to the base prefix on the HF side and to "transformer." on
// ours; head rules are absolute on both sides. "{layer}" is the block index.

enum class TensorLayout {
  Same,        // the same shape and values
  Transposed,  // Conv1D's [in, out] against Linear's [out, in]
  FusedQkv,    // q|k|v side by side in one Conv1D ([in, 3 out]); `ours` contains "{qkv}"
};
enum class RuleScope { Base, Head };

struct NameRule {
  std::string hf;
  std::string ours;
  TensorLayout layout = TensorLayout::Same;
  RuleScope scope = RuleScope::Base;
};

// Rules for one module's weight and (when `bias`) bias.
void add_dense(std::vector<NameRule>& rules, const std::string& hf, const std::string& ours,
               TensorLayout layout = TensorLayout::Same, RuleScope scope = RuleScope::Base,
               bool bias = true);

// A tensor a checkpoint may hold that repeats another: `alias` (an absolute HF name) repeats
// `canonical` (absolute, or relative to the base prefix when it starts with '@').
struct TiedAlias {
  std::string alias;
  std::string canonical;
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

// An encoder-decoder family (Marian, BART): the hooks huggingface_encoder_decoder.cpp's loader
// and saver read. Base rules are relative to the base prefix ("model.") on the HF side; every
// rule's `ours` is a parameter or buffer name of models::EncoderDecoderModel. In `hf`, "{layer}"
// is a layer of the stack the name starts with ("encoder." or "decoder.").
struct EncoderDecoderFamily {
  // config.json -> the model config; throws "config.json: ..." naming the key.
  models::EncoderDecoderConfig (*config_from_json)(const nlohmann::json& config_json);
  // The config.json of a model (its architecture, sizes and conventions) for a fresh save;
  // throws (require_expressible) for a config the family cannot express.
  nlohmann::json (*config_to_json)(const models::EncoderDecoderConfig& config);
  std::vector<NameRule> (*name_rules)(const models::EncoderDecoderConfig& config);
  std::vector<TiedAlias> (*tied_aliases)(const models::EncoderDecoderConfig& config);
  const char* buffer_names;  // regex over base names of tensors recognised and not loaded
};

struct HuggingFaceFamily {
  const char* model_type;                          // config.json's "model_type", e.g. "bert"
  models::ModelFamily family;                      // TransformerConfig::family it maps to
  std::vector<std::string> architecture_prefixes;  // "architectures" names it is detected by
  const char* base_prefix;                         // base names' prefix in *For* checkpoints
  // config.json (the family's own keys; pruned_heads is read by the caller) -> TransformerConfig.
  // Throws attnkit::Error "config.json: ..." naming the key, for a feature attnkit lacks.
  models::TransformerConfig (*config_from_json)(const nlohmann::json& config_json);
  // TransformerConfig + heads -> the config.json save_pretrained writes (without pruned_heads
  // and torch_dtype, which the caller adds, after checking what every family needs: softmax
  // attention, learned positions, no cross attention). Throws (require_expressible) for a config
  // the family cannot express.
  nlohmann::json (*config_to_json)(const models::TransformerConfig& config,
                                   const models::HeadsConfig& heads);
  std::vector<NameRule> (*name_rules)(const models::TransformerConfig& config,
                                      const models::HeadsConfig& heads);
  std::vector<TiedAlias> (*tied_aliases)(const models::HeadsConfig& heads);
  const char* buffer_names;  // regex (ECMAScript) over base names of buffers to skip on loading
  // Which heads and optional parts (pooler, token types) the checkpoint holds; `config` arrives
  // as config_from_json made it.
  void (*detect_heads)(const CheckpointContents& contents, const nlohmann::json& config_json,
                       models::TransformerConfig& config, models::HeadsConfig& heads);
  // Encoder-decoder families: their hooks (the single-stack ones above are then null, and
  // `family` is Custom); nullptr for the single-stack families.
  const EncoderDecoderFamily* encoder_decoder;
};

// The records, one file each (hf_bert.cpp, hf_albert.cpp, hf_gpt2.cpp, hf_roberta.cpp; Marian and
// BART share hf_bart_like.cpp).
const HuggingFaceFamily& bert_family();
const HuggingFaceFamily& albert_family();
const HuggingFaceFamily& gpt2_family();
const HuggingFaceFamily& marian_family();
const HuggingFaceFamily& bart_family();
const HuggingFaceFamily& roberta_family();

// The family config.json names: its "model_type", else the first "architectures" name that
// starts with a family's prefix (huggingface.cpp). Throws attnkit::Error "config.json: ...".
const HuggingFaceFamily& detect_family(const nlohmann::json& config_json);

// A Hugging Face directory's files (huggingface.cpp): DIR/config.json, parsed, and
// DIR/model.safetensors, which must exist (a pytorch_model.bin alone is refused with the
// save_pretrained hint). One-line errors naming the path.
struct HuggingFaceFiles {
  std::string config_path, weights_path;
  nlohmann::json config_json;
};
HuggingFaceFiles huggingface_files(const std::string& directory);
// A config reader's "config.json: WHAT" error as "CONFIG_PATH: WHAT".
Error naming_config_file(const Error& e, const std::string& config_path);

// The table of families (hf_families.cpp), in the order errors list them.
const std::vector<const HuggingFaceFamily*>& huggingface_families();
// "bert, albert, gpt2, marian, bart, roberta": the model types of the table.
std::string huggingface_model_types();
// The single-stack family of a TransformerConfig::family, or nullptr (Custom).
const HuggingFaceFamily* huggingface_family(models::ModelFamily family);
// The family of a config.json "model_type"; throws attnkit::Error "config.json: model_type 'X' is
// not supported (attnkit reads bert, albert, gpt2, marian, bart, roberta)", X on one line.
const HuggingFaceFamily& huggingface_family_named(const std::string& model_type);

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
