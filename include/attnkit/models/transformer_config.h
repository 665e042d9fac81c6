#pragma once
// TransformerConfig: everything that shapes a TransformerModel. BERT, ALBERT and GPT-2 are
// presets of it (one block, switches), not separate classes. Serialised as JSON in attnkit
// checkpoints (the enums as their names); io/huggingface converts to and from Hugging Face
// config.json.
#include "attnkit/layers/attention_spec.h"
#include "attnkit/layers/conditional_layer_norm.h"
#include "attnkit/layers/embeddings.h"
#include "attnkit/layers/feed_forward.h"
#include "attnkit/ops/rotary.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::models {

// Heads per layer, {layer: [head indices]}, in the unpruned numbering (Hugging Face's
// `pruned_heads` in config.json). With shared layers (ALBERT) the key is the shared block.
using HeadIndices = std::map<int64_t, std::vector<int64_t>>;

// Which family's conventions a config follows, by name: informational to the model code, and the
// Hugging Face family a model is saved as (io/huggingface.h, whose family records carry their
// names; models/ does not know them). The constants are the presets' families below and Custom
// (none: e.g. the encoder-decoder's stacks); a family read from a file is ModelFamily::named.
class ModelFamily {
 public:
  static const ModelFamily Bert, Albert, Gpt2, Roberta, Custom;
  // The family called `name` (kept for the life of the process).
  static ModelFamily named(std::string_view name);
  constexpr const char* name() const { return name_; }
  friend bool operator==(ModelFamily a, ModelFamily b) { return std::string_view(a.name_) == b.name_; }
  friend bool operator!=(ModelFamily a, ModelFamily b) { return !(a == b); }

 private:
  constexpr explicit ModelFamily(const char* name) : name_(name) {}
  const char* name_;
};
inline constexpr ModelFamily ModelFamily::Bert{"bert"};
inline constexpr ModelFamily ModelFamily::Albert{"albert"};
inline constexpr ModelFamily ModelFamily::Gpt2{"gpt2"};
inline constexpr ModelFamily ModelFamily::Roberta{"roberta"};
inline constexpr ModelFamily ModelFamily::Custom{"custom"};
// family.name(): "bert", "albert", "gpt2", "roberta", "custom", "marian", ...
inline const char* model_family_name(ModelFamily family) { return family.name(); }
// The family called `name`: lower-case ASCII letters, digits, '-' and '_'. Throws attnkit::Error
// "unknown model family 'NAME' (a family name is lower-case letters, digits, '-' and '_')", NAME
// on one line, for anything else.
ModelFamily parse_model_family(std::string_view name);

struct TransformerConfig {
  ModelFamily family = ModelFamily::Bert;  // informational + HF naming
  int64_t vocab_size = 30522;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  int64_t embedding_size = 0;  // 0 = hidden; ALBERT's factorised E
  int64_t max_positions = 512;
  int64_t type_vocab_size = 2;  // 0 = no token-type embedding
  layers::PositionEncoding positions = layers::PositionEncoding::Learned;
  layers::Activation activation = layers::Activation::Gelu;  // GeluTanh: HF's gelu_new
  bool norm_first = false;  // pre-LN (GPT-2) vs post-LN (BERT)
  double layer_norm_eps = 1e-12;
  bool embedding_layer_norm = true;
  bool final_layer_norm = false;  // GPT-2's ln_f
  bool pooler = true;             // BERT's tanh pooler over the first token
  bool share_layers = false;      // ALBERT: one set of block weights per group
  int64_t layer_groups = 1;       // ALBERT num_hidden_groups (with share_layers)
  bool tie_word_embeddings = true;
  double dropout = 0.1;            // embeddings and sub-layer outputs
  double attention_dropout = 0.0;  // attention probabilities (HF: attention_probs_dropout_prob)
  layers::AttentionSpec attention;  // kind, feature map, causal, key/value sizes, ...
  // Decoder stacks of the encoder-decoder model: cross attention over a memory.
  bool cross_attention = false;
  layers::AttentionSpec cross_attention_spec;
  int64_t memory_hidden = 0;
  int64_t condition_size = 0;  // > 0: Conditional LayerNorm everywhere, fed [batch, size]
  int64_t pad_token_id = 0;
  // Marian / BART conventions (defaults leave other models unchanged): token embeddings times
  // embedding_scale (scale_embedding: sqrt(hidden)); learned position p read from row
  // p + position_id_offset of a table of max_positions + position_id_offset rows (BART: 2).
  double embedding_scale = 1.0;
  int64_t position_id_offset = 0;
  // RoBERTa's positions (learned): a token's position counts the non-pad tokens before it in its
  // row, and a pad token reads row pad_token_id of the table; position_id_offset must then be
  // pad_token_id + 1 (layers::EmbeddingsOptions::padding_positions).
  bool padding_positions = false;
  // Heads physically removed (TransformerModel::prune_heads): self attention, and the cross
  // attention of decoder blocks. Keys are block indices; heads sorted, in the unpruned numbering.
  HeadIndices pruned_heads;
  HeadIndices pruned_cross_heads;
  // ---- The Llama families (issue 42); the defaults leave the other models unchanged. The
  // attention's own extras (grouped key/value heads, window, soft-cap, scale, q/k norms, biases)
  // are in `attention`.
  // Every norm site's kind (blocks, final norm; the embeddings' LayerNorm stays a LayerNorm).
  layers::NormKind norm = layers::NormKind::LayerNorm;
  bool gated_mlp = false;  // fc_out(act(gate(x)) · fc_in(x))
  bool mlp_bias = true;
  // Gemma 2/3: a norm on each sub-layer's output before the residual sum.
  bool sublayer_output_norm = false;
  // Rotary positions on self attention's q and k (ops::RotaryConfig, head_dim = the key size), one
  // ops::RotaryEmbedding per model; rotary_local, when given, for the layers with a sliding
  // window (Gemma 3's local base frequency).
  std::optional<ops::RotaryConfig> rotary, rotary_local;
  // Per layer: the sliding window (0 = full attention); empty = attention.window at every layer.
  std::vector<int64_t> layer_windows;
  // The causal LM head's logits -> cap · tanh(logits / cap) (Gemma 2); 0 = none.
  double final_logit_softcap = 0.0;
  // Hybrids (a linearized model, issue 45): per-layer overrides of `attention` (self attention)
  // and of `cross_attention_spec` (decoder blocks), keyed by block index; a layer without one
  // uses the model-wide spec. An override keeps the model-wide spec's causality (and, with rotary
  // positions, its key size); its window is still layer_windows' where that is given.
  std::map<int64_t, layers::AttentionSpec> layer_attention_specs, layer_cross_attention_specs;

  int64_t effective_embedding_size() const { return embedding_size > 0 ? embedding_size : hidden; }
  // The attention spec of layer `layer`: its override in layer_attention_specs, else
  // `attention`; a softmax spec's window from layer_windows when that is given.
  layers::AttentionSpec layer_attention(int64_t layer) const;
  // The cross attention spec of decoder block `layer`: its override in
  // layer_cross_attention_specs, else cross_attention_spec.
  layers::AttentionSpec layer_cross_attention(int64_t layer) const;
  // Throws attnkit::Error naming the first inconsistent field.
  void validate() const;

  // Presets with the families' conventions (sizes are arguments so tests can build tiny ones).
  static TransformerConfig bert(int64_t vocab_size, int64_t hidden, int64_t layers, int64_t heads,
                                int64_t intermediate);
  static TransformerConfig albert(int64_t vocab_size, int64_t embedding_size, int64_t hidden,
                                  int64_t layers, int64_t heads, int64_t intermediate);
  static TransformerConfig gpt2(int64_t vocab_size, int64_t hidden, int64_t layers, int64_t heads);
  // BERT's shape with RoBERTa's conventions: one token type, pad id 1 with padding_positions
  // (position_id_offset 2), layer_norm_eps 1e-5, no pooler.
  static TransformerConfig roberta(int64_t vocab_size, int64_t hidden, int64_t layers, int64_t heads,
                                   int64_t intermediate);
  // Sets pad_token_id, and position_id_offset to follow it when padding_positions is on.
  void set_pad_token_id(int64_t id);
};

// Named presets, the families' conventions at given sizes: what `attnkit analyze collapse
// --random NAME` and `attnkit train --model.family NAME` build.
struct PresetSizes {
  int64_t vocab_size = 1000;
  int64_t hidden = 64;
  int64_t layers = 12;
  int64_t heads = 4;
  int64_t intermediate = 0;    // 0 = 4 x hidden
  int64_t embedding_size = 0;  // > 0: factorised embeddings of this size; 0 = hidden
};
const std::vector<std::string>& preset_names();  // bert, albert, gpt2, roberta
bool is_preset(std::string_view name);
bool is_preset(ModelFamily family);
// Throws attnkit::Error "unknown model preset 'NAME' (presets: bert, albert, gpt2, roberta)".
TransformerConfig preset(ModelFamily family, const PresetSizes& sizes = {});
TransformerConfig preset(std::string_view name, const PresetSizes& sizes = {});

void to_json(nlohmann::json& j, const TransformerConfig& config);
// {"layer": [heads]} <-> HeadIndices (keys as decimal strings, as Hugging Face writes them).
// Strict: a key that is not a non-negative integer or a value that is not an integer list
// throws attnkit::Error naming `what`.
nlohmann::json head_indices_to_json(const HeadIndices& heads);
HeadIndices head_indices_from_json(const nlohmann::json& j, const std::string& what);
// Strict: unknown keys, wrong types and unknown family / positions / activation names are errors
// naming the key.
void from_json(const nlohmann::json& j, TransformerConfig& config);

}  // namespace attnkit::models

namespace attnkit::ops {
// A checkpoint's "rotary" object: RotaryConfig's fields under their names (strict).
void to_json(nlohmann::json& j, const RotaryConfig& config);
void from_json(const nlohmann::json& j, RotaryConfig& config);
}  // namespace attnkit::ops

namespace attnkit::layers {
// In the spec's own namespace so nlohmann's ADL finds them.
void to_json(nlohmann::json& j, const AttentionSpec& spec);
void from_json(const nlohmann::json& j, AttentionSpec& spec);
}  // namespace attnkit::layers
