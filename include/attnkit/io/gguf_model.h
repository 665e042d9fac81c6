#pragma once
// GGUF models (llama.cpp's files) read as Hugging Face checkpoints: a llama-architecture file's
// metadata becomes the config.json transformers writes for it (model_type "llama": sizes, heads
// and key/value heads, rope theta and scaling, RMSNorm eps, tied embeddings when the file has no
// output.weight, bos/eos/pad ids of its tokenizer), its tensors get transformers' names,
// dequantized to float32 exactly as the gguf Python package does (formats::GgufFile), and the
// rows of q and k that llama.cpp's converter permutes (its rotary pairs interleaved per head) are
// put back. io/huggingface.h's loader then builds the model, so a GGUF model is a Hugging Face
// model in every command (and `convert --from FILE.gguf --to DIR --format huggingface` writes a
// directory transformers loads).
#include "attnkit/io/huggingface.h"
#include "attnkit/text/tokenizer.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>

namespace attnkit::io {

struct GgufCheckpoint {
  nlohmann::json config;                      // the config.json
  std::map<std::string, at::Tensor> tensors;  // transformers' names, float32
};

// Whether `path` is a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::string& path);

// Throws attnkit::Error "PATH: ..." (one line) for a file that is not GGUF, an architecture other
// than llama and gemma3, missing or inconsistent metadata, tensors missing, unexpected or of the wrong shape.
GgufCheckpoint read_gguf_checkpoint(const std::string& path);

// text::load_tokenizer(path), or the tokenizer of a GGUF file's tokenizer.ggml.* metadata when
// `path` is one (formats/gguf_tokenizer.h): what a command's tokenizer path may name.
text::Tokenizer load_tokenizer(const std::string& path);

// read_gguf_checkpoint + load_huggingface_checkpoint.
std::shared_ptr<models::Model> load_gguf(const std::string& path, HuggingFaceModel* info = nullptr);

}  // namespace attnkit::io
