#pragma once
// SentencePiece `.model` files (a serialised ModelProto), read directly with a minimal protobuf
// wire-format reader (no protobuf dependency). Only Unigram models. The tokenizer built from one:
//   normaliser:     the precompiled charsmap (when present), then, with remove_extra_whitespaces,
//                   leading and trailing whitespace stripped (Strip) and runs of spaces collapsed;
//   pre-tokenizer:  Metaspace ('▁', prepended when add_dummy_prefix);
//   model:          Unigram with the pieces' scores, unk_id and byte_fallback of the trainer spec;
//   added tokens:   the CONTROL and USER_DEFINED pieces (special), matched in the raw text;
//   post-processor: "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B [SEP]" when both are control pieces
//                   (ALBERT), none otherwise; decoder: Metaspace.
#include <string>

#include "attnkit/text/tokenizer.h"

namespace attnkit::text {

// `source` names the origin in error messages. Throws attnkit::Error (one line) for a truncated or
// malformed file or an unsupported model type.
Tokenizer tokenizer_from_sentencepiece(const std::string& bytes, const std::string& source);
Tokenizer read_sentencepiece_model(const std::string& path);

}  // namespace attnkit::text
