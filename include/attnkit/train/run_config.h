#pragma once
// Everything one training run needs, read from a TOML file (`attnkit train --config run.toml`)
// and overridable setting by setting from the command line (`--model.hidden 256`). The resolved
// config is written to the run directory as config.toml, which `--resume` and `attnkit eval` read.
//
//   [run]        dir, steps, seed, accumulation, clip_norm, ema, eval_every, checkpoint_every, cpu_budget,
//                keep_last, log_every
//   [task]       name (a task of the registry, tasks.h), data, tokenizer, batch_size, truncate,
//                min_length, max_length, train_examples, eval_examples, eval_split,
//                skip_bad_lines, symbols, mask_probability, mask_fraction, random_fraction,
//                whole_word, predict_last, two_stream, label_smoothing, beams, length_penalty, image_size,
//                word_list
//   [model]      family (bert | albert | gpt2 | roberta), hidden, layers, heads, intermediate,
//                embedding_size, attention (an AttentionSpec string), positions, dropout,
//                max_positions, pooling, pre_ln, share_embeddings, cross_attention, init, unshare,
//                key_size, value_size
//   [optimizer]  name (adamw | adam | sgd), lr, weight_decay, beta1, beta2, eps, momentum
//   [schedule]   kind (constant | linear | cosine), warmup, min_ratio
//   [lora]       rank (0 = off), alpha, targets: LoRA adapters on the attention projections, the
//                rest of the model frozen (layers/lora.h)
#include "attnkit/layers/lora.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_config.h"
#include "attnkit/train/trainer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::train {

struct TaskConfig {
  std::string name = "listops";
  std::string data;        // what the task reads (TaskInfo::files in tasks.h); a training file's
                           // validation file is the same name with "train" -> "val"
  std::string tokenizer;   // tokenizer.json, vocab.txt or a directory (TaskInfo::tokenizer)
  int64_t batch_size = 32;
  int64_t truncate = 512;  // longest input (tokens); lm: block size
  int64_t min_length = 32; // generated examples: listops tokens, synthetic symbols or pairs
  int64_t max_length = 128;
  int64_t train_examples = 20000;  // generated tasks
  int64_t eval_examples = 500;
  bool skip_bad_lines = false;     // skip and count bad data lines instead of stopping
  std::string eval_split = "val";  // the file evaluation reads: val | test (tasks with
                                   // TaskInfo::test_split: "train" in the name -> "test")
  int64_t symbols = 16;    // copy/reverse/sort alphabet, recall values
  // mlm (train/pretraining.h): share of tokens selected, and of them the shares replaced by the
  // mask token and by a random token (the rest stay unchanged); whole WordPiece words.
  double mask_probability = 0.15;
  double mask_fraction = 0.8;
  double random_fraction = 0.1;
  bool whole_word = false;
  int64_t predict_last = 0;  // plm: predict only the last K tokens of each order (0 = all)
  bool two_stream = false;   // plm: XLNet's two-stream attention (a query stream predicts)
  // translation: label smoothing of the training loss (PyTorch's: (1 - e) * NLL + e * the mean
  // of -log p over the vocabulary), and the validation decoder (1 = greedy, else beam search
  // with that many beams and length_penalty, as Hugging Face generate).
  double label_smoothing = 0.0;
  int64_t beams = 1;
  double length_penalty = 1.0;
  int64_t image_size = 0;  // lra-pathfinder generated: 32 (0) or 128; lra-image: 28 (0) or 32 (padded)
  // mlm: a UTF-8 word list (one word per line, first field) for Chinese whole-word masking: runs of
  // CJK-character tokens grouped into its words by greedy longest match; implies whole_word.
  std::string word_list;
};

// A setting parsed into its typed value once, when it is set (from the TOML file, the command line,
// or code assigning its text): the code reads value(), config.toml writes text() back as it was
// written. An invalid text throws attnkit::Error (one line, naming the setting).
template <typename T, T (*Parse)(const std::string&)>
class ParsedSetting {
 public:
  ParsedSetting(const char* text) : ParsedSetting(std::string(text)) {}
  ParsedSetting(std::string text) : value_(Parse(text)), text_(std::move(text)) {}
  const T& value() const { return value_; }
  const T* operator->() const { return &value_; }
  const std::string& text() const { return text_; }

 private:
  T value_;
  std::string text_;
};

// model.family: a preset's family (models::preset: bert | albert | gpt2 | roberta), "transformer"
// (the encoder-decoder of task translation), or "" (the task's default).
struct ModelFamilyChoice {
  std::optional<models::ModelFamily> preset;
  bool encoder_decoder = false;
  bool task_default() const { return !preset && !encoder_decoder; }
};
// The parsers of the typed model settings; errors name the setting ("model.family: ...").
ModelFamilyChoice parse_model_family_setting(const std::string& text);
layers::AttentionSpec parse_attention_setting(const std::string& text);
std::optional<layers::AttentionSpec> parse_cross_attention_setting(const std::string& text);  // "" = none
layers::PositionEncoding parse_positions_setting(const std::string& text);
models::Pooling parse_pooling_setting(const std::string& text);

struct ModelSettings {
  // default: bert for classification, gpt2 for LM tasks
  ParsedSetting<ModelFamilyChoice, parse_model_family_setting> family = "";
  int64_t hidden = 128;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t intermediate = 0;  // 0 = 4 * hidden
  int64_t embedding_size = 0;
  ParsedSetting<layers::AttentionSpec, parse_attention_setting> attention = "softmax";
  ParsedSetting<layers::PositionEncoding, parse_positions_setting> positions = "learned";
  double dropout = 0.1;
  int64_t max_positions = 0;  // 0 = from the task's longest input
  // classification: pooler | first | last | mean
  ParsedSetting<models::Pooling, parse_pooling_setting> pooling = "mean";
  // A model directory (attnkit or Hugging Face layout) to start from: its architecture and
  // weights replace the settings above; the task's heads not in it are new (`attnkit train --init`).
  std::string init;
  // translation (encoder-decoder): pre-LN blocks (else post-LN, as Vaswani et al.), one token
  // embedding for source and target (and the LM head), the decoder's cross attention kind
  // ("" = model.attention).
  bool pre_ln = false;
  bool share_embeddings = true;
  ParsedSetting<std::optional<layers::AttentionSpec>, parse_cross_attention_setting> cross_attention = "";
  // ALBERT un-sharing: give each layer its own copy of the shared block (TransformerModel::
  // unshare) once the weights are loaded, so the layers train apart (an error for a model that
  // does not share its layers).
  bool unshare = false;
  // Per-head width of the attention's queries and keys, and of its values (the low-rank
  // bottleneck of "key_size"): 0 = hidden / heads.
  int64_t key_size = 0;
  int64_t value_size = 0;
};

struct RunConfig {
  std::string directory;  // [run] dir
  TrainerOptions trainer;
  TaskConfig task;
  ModelSettings model;
  layers::LoraOptions lora;
};

// One setting: its TOML section and key; on the command line "--section.key".
struct SettingInfo {
  std::string section;
  std::string key;
  std::string help;
  std::string flag() const { return "--" + section + "." + key; }
};
const std::vector<SettingInfo>& run_settings();

// Sets `section.key` from its text form; throws attnkit::Error "SECTION.KEY: ..." for an unknown
// key or a value of the wrong type.
void apply_setting(RunConfig& config, const std::string& section, const std::string& key,
                   const std::string& value);
// Reads a TOML file: every key must be a known setting. Throws attnkit::Error "FILE:LINE: ...".
void apply_toml_file(RunConfig& config, const std::string& path);
// The resolved config as TOML text (every setting), readable by apply_toml_file.
std::string to_toml(const RunConfig& config);

}  // namespace attnkit::train
