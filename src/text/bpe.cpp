#include "attnkit/text/bpe.h"

#include <fmt/format.h>

#include <algorithm>

#include "attnkit/error.h"
#include "bpe_merge.h"

namespace attnkit::text {

Bpe::Bpe(Vocabulary vocabulary, std::vector<Merge> merges, BpeOptions options)
    : vocabulary_(std::move(vocabulary)), merges_(std::move(merges)), options_(std::move(options)),
      cache_key_(detail::new_bpe_cache_key()) {
  if (options_.unk_token) {
    unk_id_ = vocabulary_.find(*options_.unk_token);
    if (!unk_id_) throw Error(fmt::format("BPE model: unk_token '{}' is not in the vocabulary", *options_.unk_token));
  }
  for (int byte = 0; byte < 256; ++byte) byte_ids_[byte] = vocabulary_.find(fmt::format("<0x{:02X}>", byte));
  merge_table_ = std::make_unique<detail::BpeMergeTable>(vocabulary_, merges_, "BPE model");
}

Bpe::~Bpe() = default;

void Bpe::tokenize(std::string_view word, std::vector<ModelToken>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = vocabulary_.find(word)) {
      out.push_back({*id, 0, static_cast<uint32_t>(word.size())});
      return;
    }
  }
  detail::tokenize_cached(cache_key_, options_.cache_capacity, word, out,
                          [this](std::string_view w, std::vector<ModelToken>& o) { merge_word(w, o); });
}

void Bpe::merge_word(std::string_view word, std::vector<ModelToken>& out) const {
  std::vector<detail::BpeSymbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](uint32_t id, size_t begin, size_t end) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, static_cast<uint32_t>(begin), static_cast<uint32_t>(end), index - 1, -1});
  };
  // A pending unknown symbol (HF's `unk`): added before the next known character, or at the end.
  std::optional<detail::BpeSymbol> unknown;
  // HF's Word keeps only lengths, so a symbol's range is where the previous one ended: track it.
  size_t position = 0;
  for (size_t i = 0; i < word.size();) {
    const auto lead = static_cast<unsigned char>(word[i]);
    size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    length = std::min(length, word.size() - i);
    const std::string_view character = word.substr(i, length);
    i += length;
    if (auto id = vocabulary_.find(character)) {
      if (unknown) {
        add(unknown->id, position, position + (unknown->end - unknown->begin));
        position += unknown->end - unknown->begin;
        unknown.reset();
      }
      add(*id, position, position + length);
      position += length;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (const char byte : character) all = all && byte_ids_[static_cast<unsigned char>(byte)].has_value();
      if (all) {
        // As HF: the bytes go in before a pending unknown symbol, which stays pending.
        for (const char byte : character) {
          add(*byte_ids_[static_cast<unsigned char>(byte)], position, position + 1);
          ++position;
        }
        continue;
      }
    }
    if (!unk_id_) continue;  // no unknown token: the character is dropped
    if (unknown && options_.fuse_unk) {
      unknown->end += length;
    } else {
      if (unknown) {
        add(unknown->id, position, position + (unknown->end - unknown->begin));
        position += unknown->end - unknown->begin;
      }
      unknown = detail::BpeSymbol{*unk_id_, 0, static_cast<uint32_t>(length), -1, -1};
    }
  }
  if (unknown) add(unknown->id, position, position + (unknown->end - unknown->begin));
  detail::merge_bpe_symbols(symbols, *merge_table_, out);
}

}  // namespace attnkit::text
