#pragma once
// The tokenizer a GGUF file describes in its `tokenizer.ggml.*` metadata, as Hugging Face files:
// the tokenizer.json and tokenizer_config.json that transformers builds when it reads the file
// (AutoTokenizer.from_pretrained(DIR, gguf_file=NAME), transformers 5.x), and the text::Tokenizer
// that tokenizer.json loads as. docs/tokenizers.md ("GGUF files") says what is read.
//
//   tokenizer.ggml.model  "gpt2": byte-level BPE (tokens, merges; tokenizer.ggml.pre picks the
//                         pre-tokenizer's split rule), "llama": SentencePiece-style BPE with byte
//                         fallback (tokens; merges from the file, or from the scores), with
//                         Gemma's and Phi-3's variants chosen by general.architecture, "gemma4".
//   tokenizer.ggml.token_type  3 (control): special added tokens; 4 (user-defined): added tokens.
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id, add_bos_token, add_eos_token,
//   tokenizer.chat_template: tokenizer_config.json and the post-processor's template.
//
// Missing or inconsistent metadata (no tokens, a count that differs from the tokens', an id out of
// range, an unknown model or pre-tokenizer, a token that is not UTF-8, a malformed merge) throws one
// attnkit::Error line "PATH: ..." naming the key.
#include <nlohmann/json.hpp>

#include <string>

#include "attnkit/formats/gguf.h"
#include "attnkit/text/tokenizer.h"

namespace attnkit::formats {

// The tokenizer.json (Hugging Face tokenizers' format) of the file's tokenizer.
nlohmann::json gguf_tokenizer_json(const GgufFile& file);

// tokenizer_config.json: bos_token, eos_token, unk_token, pad_token (the tokens the ids name; null
// when the file gives no id), add_bos_token, add_eos_token, and chat_template when the file has one.
nlohmann::json gguf_tokenizer_config_json(const GgufFile& file);

// gguf_tokenizer_json(file) loaded as a Tokenizer (text::tokenizer_from_json).
text::Tokenizer gguf_tokenizer(const GgufFile& file);
// The same for the GGUF file at `path`.
text::Tokenizer read_gguf_tokenizer(const std::string& path);

}  // namespace attnkit::formats
