#pragma once
// Model directories, in either format, of any model shape (models::Model):
//   Hugging Face  config.json with "model_type" (a family of io/huggingface.h) + model.safetensors;
//                 marian and bart are read as the encoder-decoder
//   attnkit       config.json {"attnkit_format": 1, ...the model's description} + model.safetensors
//                 under attnkit's parameter names, whose metadata repeats the config
//                 ("attnkit_config"), so a trainer checkpoint's model.safetensors alone is
//                 loadable too. The description is Model::config_description's: {"model":
//                 TransformerConfig, "heads": HeadsConfig} for encoder-only and decoder-only
//                 models, {"architecture": "encoder-decoder", "encoder_decoder": ...} for the
//                 encoder-decoder (models/model_factory.h's make_model reads both).
//   GGUF          a llama-architecture .gguf file (io/gguf_model.h), read as the Hugging Face
//                 llama model it describes (format "huggingface", path the file)
// A run directory of `attnkit train` (RUN/checkpoints/best, RUN/checkpoints/step-N) is a model
// too: resolve_model_path picks its best checkpoint, else its newest; a checkpoint directory
// carries its tokenizer's files when the run had a tokenizer.
#include "attnkit/io/huggingface.h"
#include "attnkit/layers/int8_linear.h"
#include "attnkit/models/model.h"
#include "attnkit/text/text_tokenizer.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::io {

struct LoadedModel {
  std::shared_ptr<models::Model> model;    // the model of any shape, in eval mode
  std::string path;                        // the directory or file it was read from (resolved)
  std::string format;                      // "huggingface" | "attnkit"
  HuggingFaceModel huggingface;            // layout details when format == "huggingface"
  // Encoder-only and decoder-only models (null / defaults for an encoder-decoder):
  models::TaskModel task{nullptr};                // the model with its heads
  models::TransformerModel transformer{nullptr};  // task->transformer
  models::TransformerConfig config;
  models::HeadsConfig heads;

  // The model as a task model; throws attnkit::Error "PATH: `what` needs ..." for an
  // encoder-decoder (models::Model::task_model).
  models::TaskModel task_model(const std::string& what) const;
};

// What a path given as --model names: an attnkit or Hugging Face model directory, an attnkit
// model.safetensors, a checkpoint directory, or a run directory of `attnkit train` (its
// checkpoints/best when present, else its newest checkpoints/step-N). Returns the path of the
// model directory or file to read; throws attnkit::Error naming the path when none is there.
std::string resolve_model_path(const std::string& path);

// The step checkpoints of a run directory: RUN/checkpoints/*N (else RUN/*N) folders holding a
// model.safetensors, by ascending step N ({} when there are none).
std::vector<std::pair<int64_t, std::string>> run_model_checkpoints(const std::string& run);

// `path` as resolve_model_path reads it. Throws attnkit::Error with one line naming the file and
// what is wrong.
LoadedModel load_model(const std::string& path);

// The tokenizer a command uses with the model at `model_path`: `given_path` when the user named
// one, else the model's own -- its directory's tokenizer files (text::tokenizer_for_model), or a
// GGUF model file's tokenizer.ggml.* metadata (formats/gguf_tokenizer.h); a .gguf given_path is
// read the same way. Null when the model has none.
std::unique_ptr<text::TextTokenizer> tokenizer_for_model(const std::string& given_path,
                                                         const std::string& model_path);

// The metadata an attnkit model.safetensors carries ({"format": "attnkit", "attnkit_config": ...}).
std::map<std::string, std::string> attnkit_metadata(const models::Model& model);
inline std::map<std::string, std::string> attnkit_metadata(const models::TaskModel& model) {
  return attnkit_metadata(*model);
}

// Writes config.json + model.safetensors in attnkit format (atomically, file by file).
void save_attnkit_model(models::Model& model, const std::string& directory);
inline void save_attnkit_model(models::TaskModel& model, const std::string& directory) {
  save_attnkit_model(*model, directory);
}

// Writes `model` (as it is now, e.g. pruned) to `to` in `format` ("attnkit" | "huggingface"; a
// Hugging Face input keeps its layout details; another model gets a fresh config of its family,
// an encoder-decoder that of the first family of the table that expresses it: Marian, else BART;
// io::save_huggingface), copying the tokenizer files of
// the directory it was read from (model.path: tokenizer.json, vocab.txt, vocab.json, merges.txt,
// Marian's source.spm / target.spm, generation_config.json, ...) along.
void save_model(LoadedModel& model, const std::string& to, const std::string& format);

// Loads `from` (either format) and writes it to `to` in `format` ("attnkit" | "huggingface"),
// copying tokenizer files (tokenizer.json, vocab.txt, vocab.json, merges.txt, ...) along.
// quantize = Int8 writes the int8 model (models/quantize.h; attnkit format only), which
// load_model reads back as int8 with no flag. An int8 model does not save in huggingface format.
void convert_model(const std::string& from, const std::string& to, const std::string& format,
                   layers::ComputeType quantize = layers::ComputeType::Float32);

}  // namespace attnkit::io
