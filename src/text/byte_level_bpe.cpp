#include "attnkit/text/byte_level_bpe.h"

#include <fmt/format.h>

#include <atomic>
#include <memory>
#include <queue>

#include "attnkit/error.h"
#include "attnkit/text/byte_level.h"

namespace attnkit::text {
namespace {

// Each thread keeps the word caches of the last few models it used, keyed by a per-process model
// number (never an address, which a later model could reuse).
struct WordCache {
  uint64_t model = 0;
  std::string key;  // lookup buffer, reused
  std::unordered_map<std::string, std::vector<ModelToken>> words;
};

WordCache& thread_cache(uint64_t model) {
  constexpr size_t kModelsPerThread = 4;
  thread_local std::vector<std::unique_ptr<WordCache>> caches;
  for (size_t i = 0; i < caches.size(); ++i) {
    if (caches[i]->model == model) {
      if (i != 0) std::swap(caches[i], caches[0]);  // most recent first
      return *caches[0];
    }
  }
  if (caches.size() < kModelsPerThread) {
    caches.push_back(std::make_unique<WordCache>());
  } else {
    caches.back()->words.clear();
  }
  std::swap(caches.back(), caches.front());
  caches.front()->model = model;
  return *caches.front();
}

std::atomic<uint64_t> next_cache_key{1};

uint64_t pair_key(uint32_t left, uint32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }

// A symbol of the word being merged: a doubly linked list over the initial byte positions.
struct Symbol {
  uint32_t id;
  uint32_t begin;
  uint32_t end;  // begin == end marks a symbol merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Candidate {
  uint32_t rank;
  int32_t position;
  uint32_t id;
  bool operator>(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : position > other.position;
  }
};

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
    : vocabulary_(std::move(vocabulary)), merges_(std::move(merges)), options_(options), cache_key_(next_cache_key++) {
  for (int byte = 0; byte < 256; ++byte) {
    std::string token = byte_level::bytes_to_token(std::string(1, static_cast<char>(byte)));
    auto id = vocabulary_.find(token);
    if (!id) throw Error(fmt::format("byte-level BPE: the vocabulary has no token '{}' for byte {}", token, byte));
    byte_ids_[byte] = *id;
  }
  merge_table_.reserve(merges_.size());
  for (size_t rank = 0; rank < merges_.size(); ++rank) {
    const Merge& merge = merges_[rank];
    if (auto reason = invalid_merge_reason(vocabulary_, merge)) {
      throw Error(fmt::format("byte-level BPE: merge {} ('{} {}'): {}", rank + 1, merge.left, merge.right, *reason));
    }
    uint64_t key = pair_key(*vocabulary_.find(merge.left), *vocabulary_.find(merge.right));
    // The first (lowest-ranked) occurrence of a pair wins, as in the reference implementations.
    merge_table_.emplace(key, MergeResult{static_cast<uint32_t>(rank), *vocabulary_.find(merge.left + merge.right)});
  }
}

ByteLevelBpe::~ByteLevelBpe() = default;

const ByteLevelBpe::MergeResult* ByteLevelBpe::find_merge(uint32_t left, uint32_t right) const {
  auto it = merge_table_.find(pair_key(left, right));
  return it == merge_table_.end() ? nullptr : &it->second;
}

void ByteLevelBpe::tokenize(std::string_view word, std::vector<ModelToken>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = vocabulary_.find(byte_level::bytes_to_token(word))) {
      out.push_back({*id, 0, static_cast<uint32_t>(word.size())});
      return;
    }
  }
  if (options_.cache_capacity == 0) {
    merge_word(word, out);
    return;
  }
  WordCache& cache = thread_cache(cache_key_);
  cache.key.assign(word.data(), word.size());
  auto it = cache.words.find(cache.key);
  if (it != cache.words.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cache.words.size() < options_.cache_capacity) {
    cache.words.emplace(cache.key, std::vector<ModelToken>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

void ByteLevelBpe::merge_word(std::string_view word, std::vector<ModelToken>& out) const {
  std::vector<Symbol> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(word[i])], static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1),
                  static_cast<int32_t>(i) - 1, i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t position) {
    if (position < 0) return;
    int32_t next = symbols[position].next;
    if (next < 0) return;
    if (const MergeResult* merge = find_merge(symbols[position].id, symbols[next].id)) {
      queue.push({merge->rank, position, merge->id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.position];
    if (left.begin == left.end || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const MergeResult* current = find_merge(left.id, right.id);
    if (current == nullptr || current->id != top.id || current->rank != top.rank) continue;  // stale
    left.id = top.id;
    left.end = right.end;
    right.end = right.begin;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.position;
    consider(left.prev);
    consider(top.position);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back({symbols[i].id, symbols[i].begin, symbols[i].end});
}

}  // namespace attnkit::text
