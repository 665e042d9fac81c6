#pragma once
// The parts the two BPE models share (internal to src/text): the merge table, the merge loop
// (lowest rank first, leftmost on ties, as HF's Word::merge_all) and each thread's word caches.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/model.h"

namespace attnkit::text::detail {

struct BpeMergeResult {
  uint32_t rank;
  uint32_t id;
};

class BpeMergeTable {
 public:
  // Throws attnkit::Error ("<what>: merge N ('a b'): reason") for a merge the vocabulary cannot take.
  BpeMergeTable(const Vocabulary& vocabulary, const std::vector<Merge>& merges, const char* what);
  const BpeMergeResult* find(uint32_t left, uint32_t right) const {
    auto it = table_.find((static_cast<uint64_t>(left) << 32) | right);
    return it == table_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<uint64_t, BpeMergeResult> table_;  // (left id << 32 | right id) -> result
};

// A symbol of the word being merged: a doubly linked list over the initial positions.
struct BpeSymbol {
  uint32_t id;
  uint32_t begin;  // byte range in the word
  uint32_t end;    // begin == end marks a symbol merged into its left neighbour
  int32_t prev;
  int32_t next;
};

// Merges `symbols` (linked in order, prev/next set) and appends the resulting tokens to `out`.
void merge_bpe_symbols(std::vector<BpeSymbol>& symbols, const BpeMergeTable& table, std::vector<ModelToken>& out);

// Each thread keeps the word caches of the last few models it used, keyed by a per-process model
// number (never an address, which a later model could reuse).
struct BpeWordCache {
  uint64_t model = 0;
  std::string key;  // lookup buffer, reused
  std::unordered_map<std::string, std::vector<ModelToken>> words;
};
BpeWordCache& bpe_thread_cache(uint64_t model);
uint64_t new_bpe_cache_key();

// Tokenizes `word` through the calling thread's cache of model `cache_key` (capacity words at
// most; 0: no cache), calling `merge(word, out)` on a miss.
template <typename MergeFn>
void tokenize_cached(uint64_t cache_key, size_t capacity, std::string_view word, std::vector<ModelToken>& out, MergeFn&& merge) {
  if (capacity == 0) {
    merge(word, out);
    return;
  }
  BpeWordCache& cache = bpe_thread_cache(cache_key);
  cache.key.assign(word.data(), word.size());
  auto it = cache.words.find(cache.key);
  if (it != cache.words.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out.size();
  merge(word, out);
  if (cache.words.size() < capacity) {
    cache.words.emplace(cache.key, std::vector<ModelToken>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

}  // namespace attnkit::text::detail
