#pragma once
// Post-processor: adds special tokens around the encoded text(s) and sets type ids, e.g. BERT's
//   single: [CLS] A [SEP]          pair: [CLS] A [SEP] B [SEP]   (type ids 0 ... 0 1 ... 1)
// Every supported kind is expressed as a template; kByteLevel adds nothing but trims the leading
// and trailing spaces ('Ġ') of byte-level tokens out of their offsets when trim_offsets is set.
// kRoberta (RoBERTa's and BART's): <s> A </s> / <s> A </s></s> B </s>, every type id 0, with
// kByteLevel's offset trimming.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnkit/text/encoding.h"

namespace attnkit::text {

struct TemplatePiece {
  bool is_sequence = false;  // true: the text itself ($A or $B); false: a special token
  int sequence = 0;          // 0 for $A, 1 for $B (when is_sequence)
  std::string special_token; // key into PostProcessor::special_tokens (when !is_sequence)
  uint32_t type_id = 0;
};

struct TemplateSpecialToken {
  std::vector<uint32_t> ids;
  std::vector<std::string> tokens;
};

struct PostProcessor {
  enum class Kind { kNone, kBert, kTemplate, kByteLevel, kRoberta };
  Kind kind = Kind::kNone;
  std::vector<TemplatePiece> single;  // empty: "$A"
  std::vector<TemplatePiece> pair;    // empty: "$A $B:1"
  std::map<std::string, TemplateSpecialToken> special_tokens;
  bool trim_offsets = false;      // kByteLevel, kRoberta
  bool add_prefix_space = false;  // kByteLevel, kRoberta: a prefix space of the first token is not trimmed
  // kTemplate: tokenizer.json's Sequence [ByteLevel, TemplateProcessing] (Llama 3): the byte-level
  // offset trimming (trim_offsets, add_prefix_space) runs before the template.
  bool byte_level_first = false;

  // BERT's [CLS] A [SEP] / [CLS] A [SEP] B [SEP] with the given ids.
  static PostProcessor bert(const std::string& cls, uint32_t cls_id, const std::string& sep, uint32_t sep_id);
  static PostProcessor byte_level(bool trim_offsets, bool add_prefix_space);
  // RoBERTa's <s> A </s> / <s> A </s></s> B </s> (type ids 0) with the given ids.
  static PostProcessor roberta(const std::string& cls, uint32_t cls_id, const std::string& sep, uint32_t sep_id,
                               bool trim_offsets, bool add_prefix_space);

  // Number of tokens process() adds for one text (pair == false) or two.
  size_t added_tokens(bool pair) const;
  // Combines the encodings of the text(s) into the final encoding.
  Encoding process(Encoding first, const Encoding* second, bool add_special_tokens) const;
};

}  // namespace attnkit::text
