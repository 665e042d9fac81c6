#pragma once
// Hugging Face tokenizer.json: read and write.
// Supported: models WordPiece, BPE (byte-level) and Unigram; normalizers BertNormalizer, NFC/NFD/
// NFKC/NFKD, Lowercase, StripAccents, Strip, Nmt, Replace, Precompiled, a Sequence of them, or none;
// pre_tokenizer BertPreTokenizer, ByteLevel, Metaspace or Sequence [WhitespaceSplit, Metaspace]; post_processor BertProcessing, TemplateProcessing,
// ByteLevel or none; decoder WordPiece, ByteLevel or Metaspace; added_tokens; truncation; padding.
// Anything else is rejected with an attnkit::Error that names the file and the unsupported part.
#include <nlohmann/json_fwd.hpp>

#include <string>

#include "attnkit/text/tokenizer.h"

namespace attnkit::text {

// `source` names the origin in error messages (a path, or "<string>").
Tokenizer tokenizer_from_json_string(const std::string& json, const std::string& source = "<string>");
// The same from a parsed document (e.g. one built in memory: formats/gguf_tokenizer.h).
Tokenizer tokenizer_from_json(const nlohmann::json& root, const std::string& source = "<json>");
std::string tokenizer_to_json_string(const Tokenizer& tokenizer, bool pretty = true);

Tokenizer read_tokenizer_json(const std::string& path);
void write_tokenizer_json(const Tokenizer& tokenizer, const std::string& path, bool pretty = true);

}  // namespace attnkit::text
