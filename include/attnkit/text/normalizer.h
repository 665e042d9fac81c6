#pragma once
// BERT's text normalisation (the normaliser half of BERT's "basic tokenizer"), with alignment:
//   clean_text:           drop NUL, U+FFFD and other (C*) characters; every whitespace -> ' '
//   handle_chinese_chars: put spaces around each CJK ideograph so it becomes its own word
//   strip_accents:        NFD, then drop non-spacing marks (Mn); defaults to `lowercase`
//   lowercase:            full Unicode lower-case mapping
// The steps run in this order, as in the Hugging Face tokenizers library.
#include <optional>

#include "attnkit/text/aligned_text.h"

namespace attnkit::text {

struct BertNormalizer {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents;  // nullopt: same as lowercase
  bool lowercase = true;
};

AlignedText normalize(const BertNormalizer& normalizer, const AlignedText& text);

}  // namespace attnkit::text
