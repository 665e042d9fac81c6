#include "attnkit/text/post_processor.h"

#include <fmt/format.h>

#include "attnkit/error.h"

namespace attnkit::text {
namespace {

TemplatePiece special(const std::string& name, uint32_t type_id) { return {false, 0, name, type_id}; }
TemplatePiece sequence(int which, uint32_t type_id) { return {true, which, "", type_id}; }

const std::vector<TemplatePiece>& default_single() {
  static const std::vector<TemplatePiece> pieces{sequence(0, 0)};
  return pieces;
}
const std::vector<TemplatePiece>& default_pair() {
  static const std::vector<TemplatePiece> pieces{sequence(0, 0), sequence(1, 1)};
  return pieces;
}

// Byte-level tokens that begin or end with spaces ('Ġ') get those spaces cut from their offsets.
void trim_byte_level_offsets(Encoding& encoding, bool add_prefix_space) {
  static const std::string kSpace = "\xC4\xA0";  // 'Ġ', the byte-level character of ' '
  for (size_t i = 0; i < encoding.size(); ++i) {
    const std::string& token = encoding.tokens[i];
    auto& [begin, end] = encoding.offsets[i];
    uint32_t leading = 0;
    while ((leading + 1) * kSpace.size() <= token.size() && token.compare(leading * kSpace.size(), kSpace.size(), kSpace) == 0) ++leading;
    uint32_t trailing = 0;
    if (leading * kSpace.size() < token.size()) {
      while ((trailing + 1) * kSpace.size() <= token.size() &&
             token.compare(token.size() - (trailing + 1) * kSpace.size(), kSpace.size(), kSpace) == 0) {
        ++trailing;
      }
    } else {
      trailing = leading;  // a token made only of spaces
    }
    if (leading > 0) {
      const bool is_first = i == 0 || begin == 0;
      if (!(is_first && add_prefix_space && leading == 1)) begin = std::min(begin + leading, end);
    }
    if (trailing > 0 && end >= trailing) end = std::max(end - trailing, begin);
  }
}

}  // namespace

PostProcessor PostProcessor::bert(const std::string& cls, uint32_t cls_id, const std::string& sep, uint32_t sep_id) {
  PostProcessor processor;
  processor.kind = Kind::kBert;
  processor.single = {special(cls, 0), sequence(0, 0), special(sep, 0)};
  processor.pair = {special(cls, 0), sequence(0, 0), special(sep, 0), sequence(1, 1), special(sep, 1)};
  processor.special_tokens[cls] = {{cls_id}, {cls}};
  processor.special_tokens[sep] = {{sep_id}, {sep}};
  return processor;
}

PostProcessor PostProcessor::byte_level(bool trim_offsets, bool add_prefix_space) {
  PostProcessor processor;
  processor.kind = Kind::kByteLevel;
  processor.trim_offsets = trim_offsets;
  processor.add_prefix_space = add_prefix_space;
  return processor;
}

PostProcessor PostProcessor::roberta(const std::string& cls, uint32_t cls_id, const std::string& sep,
                                     uint32_t sep_id, bool trim_offsets, bool add_prefix_space) {
  PostProcessor processor;
  processor.kind = Kind::kRoberta;
  processor.single = {special(cls, 0), sequence(0, 0), special(sep, 0)};
  processor.pair = {special(cls, 0), sequence(0, 0), special(sep, 0), special(sep, 0), sequence(1, 0), special(sep, 0)};
  processor.special_tokens[cls] = {{cls_id}, {cls}};
  processor.special_tokens[sep] = {{sep_id}, {sep}};
  processor.trim_offsets = trim_offsets;
  processor.add_prefix_space = add_prefix_space;
  return processor;
}

size_t PostProcessor::added_tokens(bool pair) const {
  const auto& pieces = pair ? (this->pair.empty() ? default_pair() : this->pair) : (single.empty() ? default_single() : single);
  size_t count = 0;
  for (const auto& piece : pieces) {
    if (!piece.is_sequence) count += special_tokens.at(piece.special_token).ids.size();
  }
  return count;
}

Encoding PostProcessor::process(Encoding first, const Encoding* second, bool add_special_tokens) const {
  const bool trim = (kind == Kind::kByteLevel || kind == Kind::kRoberta || (kind == Kind::kTemplate && byte_level_first)) && trim_offsets;
  if (trim) trim_byte_level_offsets(first, add_prefix_space);
  Encoding second_copy;
  if (second != nullptr) {
    second_copy = *second;
    if (trim) trim_byte_level_offsets(second_copy, add_prefix_space);
  }
  const Encoding* texts[2] = {&first, second ? &second_copy : nullptr};

  if (!add_special_tokens && kind != Kind::kTemplate) {
    // As in the reference library: without special tokens the texts are concatenated, and any
    // post-processor still gives the second text type id 1 (no post-processor and RoBERTa's leave
    // it at 0).
    if (second != nullptr) {
      if (kind != Kind::kNone && kind != Kind::kRoberta) std::fill(second_copy.type_ids.begin(), second_copy.type_ids.end(), 1u);
      first.append(second_copy);
    }
    return first;
  }
  const auto& pieces = second ? (pair.empty() ? default_pair() : pair) : (single.empty() ? default_single() : single);
  Encoding out;
  for (const auto& piece : pieces) {
    if (piece.is_sequence) {
      const Encoding* text = texts[piece.sequence];
      if (text == nullptr) continue;
      Encoding part = *text;
      std::fill(part.type_ids.begin(), part.type_ids.end(), piece.type_id);
      out.append(part);
      continue;
    }
    if (!add_special_tokens) continue;
    auto it = special_tokens.find(piece.special_token);
    if (it == special_tokens.end()) {
      throw Error(fmt::format("post-processor: template uses '{}' but defines no ids for it", piece.special_token));
    }
    for (size_t k = 0; k < it->second.ids.size(); ++k) {
      out.ids.push_back(it->second.ids[k]);
      out.type_ids.push_back(piece.type_id);
      out.tokens.push_back(k < it->second.tokens.size() ? it->second.tokens[k] : piece.special_token);
      out.offsets.emplace_back(0, 0);
      out.special_tokens_mask.push_back(1);
      out.attention_mask.push_back(1);
      out.sequence_ids.push_back(-1);
    }
  }
  return out;
}

}  // namespace attnkit::text
