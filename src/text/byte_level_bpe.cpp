#include "attnkit/text/byte_level_bpe.h"

#include <fmt/format.h>

#include "attnkit/error.h"
#include "attnkit/text/byte_level.h"
#include "bpe_merge.h"

namespace attnkit::text {
std::optional<std::string> invalid_merge_reason(const Vocabulary& vocabulary, const Merge& merge) {
  for (const std::string* part : {&merge.left, &merge.right}) {
    if (!vocabulary.contains(*part)) return fmt::format("'{}' is not in the vocabulary", *part);
  }
  if (!vocabulary.contains(merge.left + merge.right)) {
    return fmt::format("the merged token '{}' is not in the vocabulary", merge.left + merge.right);
  }
  return std::nullopt;
}

ByteLevelBpe::ByteLevelBpe(Vocabulary vocabulary, std::vector<Merge> merges, ByteLevelBpeOptions options)
    : vocabulary_(std::move(vocabulary)), merges_(std::move(merges)), options_(options), cache_key_(detail::new_bpe_cache_key()) {
  for (int byte = 0; byte < 256; ++byte) {
    std::string token = byte_level::bytes_to_token(std::string(1, static_cast<char>(byte)));
    auto id = vocabulary_.find(token);
    if (!id) throw Error(fmt::format("byte-level BPE: the vocabulary has no token '{}' for byte {}", token, byte));
    byte_ids_[byte] = *id;
  }
  merge_table_ = std::make_unique<detail::BpeMergeTable>(vocabulary_, merges_, "byte-level BPE");
}

ByteLevelBpe::~ByteLevelBpe() = default;

void ByteLevelBpe::tokenize(std::string_view word, std::vector<ModelToken>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = vocabulary_.find(byte_level::bytes_to_token(word))) {
      out.push_back({*id, 0, static_cast<uint32_t>(word.size())});
      return;
    }
  }
  detail::tokenize_cached(cache_key_, options_.cache_capacity, word, out,
                          [this](std::string_view w, std::vector<ModelToken>& o) { merge_word(w, o); });
}

void ByteLevelBpe::merge_word(std::string_view word, std::vector<ModelToken>& out) const {
  std::vector<detail::BpeSymbol> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(word[i])], static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1),
                  static_cast<int32_t>(i) - 1, i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  detail::merge_bpe_symbols(symbols, *merge_table_, out);
}

}  // namespace attnkit::text
