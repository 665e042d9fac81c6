#include "bpe_merge.h"

#include <fmt/format.h>

#include <atomic>
#include <queue>

#include "attnkit/error.h"

namespace attnkit::text::detail {
namespace {

std::atomic<uint64_t> next_cache_key{1};

struct Candidate {
  uint32_t rank;
  int32_t position;
  uint32_t id;
  bool operator>(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : position > other.position;
  }
};

}  // namespace

BpeMergeTable::BpeMergeTable(const Vocabulary& vocabulary, const std::vector<Merge>& merges, const char* what) {
  table_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& merge = merges[rank];
    if (auto reason = invalid_merge_reason(vocabulary, merge)) {
      throw Error(fmt::format("{}: merge {} ('{} {}'): {}", what, rank + 1, merge.left, merge.right, *reason));
    }
    const uint64_t key = (static_cast<uint64_t>(*vocabulary.find(merge.left)) << 32) | *vocabulary.find(merge.right);
    // The first (lowest-ranked) occurrence of a pair wins, as in the reference implementations.
    table_.emplace(key, BpeMergeResult{static_cast<uint32_t>(rank), *vocabulary.find(merge.left + merge.right)});
  }
}

void merge_bpe_symbols(std::vector<BpeSymbol>& symbols, const BpeMergeTable& table, std::vector<ModelToken>& out) {
  if (symbols.empty()) return;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t position) {
    if (position < 0) return;
    int32_t next = symbols[position].next;
    if (next < 0) return;
    if (const BpeMergeResult* merge = table.find(symbols[position].id, symbols[next].id)) {
      queue.push({merge->rank, position, merge->id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    BpeSymbol& left = symbols[top.position];
    if (left.begin == left.end || left.next < 0) continue;
    BpeSymbol& right = symbols[left.next];
    const BpeMergeResult* current = table.find(left.id, right.id);
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

BpeWordCache& bpe_thread_cache(uint64_t model) {
  constexpr size_t kModelsPerThread = 4;
  thread_local std::vector<std::unique_ptr<BpeWordCache>> caches;
  for (size_t i = 0; i < caches.size(); ++i) {
    if (caches[i]->model == model) {
      if (i != 0) std::swap(caches[i], caches[0]);  // most recent first
      return *caches[0];
    }
  }
  if (caches.size() < kModelsPerThread) {
    caches.push_back(std::make_unique<BpeWordCache>());
  } else {
    caches.back()->words.clear();
  }
  std::swap(caches.back(), caches.front());
  caches.front()->model = model;
  return *caches.front();
}

uint64_t new_bpe_cache_key() { return next_cache_key++; }

}  // namespace attnkit::text::detail
