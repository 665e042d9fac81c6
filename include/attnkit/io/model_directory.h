#pragma once
// Model directories, in either format:
//   Hugging Face  config.json with "model_type" (bert | albert | gpt2) + model.safetensors
//   attnkit       config.json {"attnkit_format": 1, "model": TransformerConfig, "heads": HeadsConfig}
//                 + model.safetensors under attnkit's parameter names, whose metadata repeats the
//                 config ("attnkit_config"), so a trainer checkpoint's model.safetensors alone
//                 is loadable too.
#include "attnkit/io/huggingface.h"

#include <map>
#include <string>

namespace attnkit::io {

struct LoadedModel {
  models::TransformerConfig config;
  models::HeadsConfig heads;
  models::TaskModel task{nullptr};         // the model with its heads, in eval mode
  models::TransformerModel model{nullptr}; // task->transformer
  std::string format;                      // "huggingface" | "attnkit"
  HuggingFaceModel huggingface;            // layout details when format == "huggingface"
};

// `path`: a directory (either format) or an attnkit model.safetensors file. Throws
// attnkit::Error with one line naming the file and what is wrong.
LoadedModel load_model(const std::string& path);

// The metadata an attnkit model.safetensors carries ({"format": "attnkit", "attnkit_config": ...}).
std::map<std::string, std::string> attnkit_metadata(const models::TaskModel& model);

// Writes config.json + model.safetensors in attnkit format (atomically, file by file).
void save_attnkit_model(models::TaskModel& model, const std::string& directory);

// Writes `model` (its task model as it is now, e.g. pruned) to `to` in `format` ("attnkit" |
// "huggingface"; a Hugging Face input keeps its layout details), copying the tokenizer files of
// the directory `from` (tokenizer.json, vocab.txt, vocab.json, merges.txt, ...) along.
void save_model(LoadedModel& model, const std::string& from, const std::string& to,
                const std::string& format);

// Loads `from` (either format) and writes it to `to` in `format` ("attnkit" | "huggingface"),
// copying tokenizer files (tokenizer.json, vocab.txt, vocab.json, merges.txt, ...) along.
void convert_model(const std::string& from, const std::string& to, const std::string& format);

}  // namespace attnkit::io
