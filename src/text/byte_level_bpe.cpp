#include "attnkit/text/byte_level_bpe.h"

#include <fmt/format.h>

#include <cstdint>

#include "attnkit/error.h"
#include "attnkit/text/byte_level.h"
#include "bpe_merge.h"

namespace attnkit::text {
namespace {
constexpr uint32_t kNoByteToken = UINT32_MAX;  // byte_ids_ of a byte without a token
}  // namespace

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
    const auto id = vocabulary_.find(byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
    byte_ids_[byte] = id.value_or(kNoByteToken);
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
  std::vector<detail::BpeSymbol> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const uint32_t id = byte_ids_[static_cast<uint8_t>(word[i])];
    if (id == kNoByteToken) continue;  // no token for this byte: left out, its neighbours become adjacent
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1), index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  detail::merge_bpe_symbols(symbols, *merge_table_, out);
}

}  // namespace attnkit::text
