#include "pair_merger.h"

#include <queue>
#include <unordered_map>

namespace attnkit::text::detail {
namespace {

uint64_t key_of(uint32_t left, uint32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }

struct Entry {
  uint64_t count;
  uint64_t pair;
  // Max-heap: higher count first, then the lower pair key.
  bool operator<(const Entry& other) const { return count != other.count ? count < other.count : pair > other.pair; }
};

}  // namespace

std::vector<LearnedMerge> learn_merges(SymbolWords corpus, std::vector<std::string>& symbols, size_t max_symbols,
                                       uint64_t min_frequency,
                                       const std::function<std::string(const std::string&, const std::string&)>& combine) {
  std::unordered_map<std::string, uint32_t> symbol_ids;
  for (uint32_t id = 0; id < symbols.size(); ++id) symbol_ids.emplace(symbols[id], id);

  std::unordered_map<uint64_t, uint64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;  // may list a word more than once
  for (uint32_t w = 0; w < corpus.words.size(); ++w) {
    const auto& word = corpus.words[w];
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      uint64_t key = key_of(word[i], word[i + 1]);
      pair_counts[key] += corpus.counts[w];
      pair_words[key].push_back(w);
    }
  }
  std::priority_queue<Entry> queue;
  for (const auto& [pair, count] : pair_counts) queue.push({count, pair});

  std::vector<LearnedMerge> merges;
  std::vector<uint32_t> last_visit(corpus.words.size(), UINT32_MAX);
  std::vector<uint32_t> merged_word;
  std::unordered_map<uint64_t, bool> touched;  // new pairs whose counts rose in this step
  while (symbols.size() < max_symbols && !queue.empty()) {
    Entry top = queue.top();
    queue.pop();
    auto counted = pair_counts.find(top.pair);
    const uint64_t current = counted == pair_counts.end() ? 0 : counted->second;
    if (current != top.count) {
      if (current > 0) queue.push({current, top.pair});
      continue;
    }
    if (current < min_frequency || current == 0) break;

    const uint32_t left = static_cast<uint32_t>(top.pair >> 32);
    const uint32_t right = static_cast<uint32_t>(top.pair & 0xFFFFFFFFu);
    const std::string name = combine(symbols[left], symbols[right]);
    uint32_t result;
    if (auto it = symbol_ids.find(name); it != symbol_ids.end()) {
      result = it->second;
    } else {
      result = static_cast<uint32_t>(symbols.size());
      symbols.push_back(name);
      symbol_ids.emplace(name, result);
    }
    merges.push_back({left, right, result});

    const uint32_t step = static_cast<uint32_t>(merges.size());
    touched.clear();
    const std::vector<uint32_t> affected = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    for (uint32_t w : affected) {
      if (last_visit[w] == step) continue;
      last_visit[w] = step;
      auto& word = corpus.words[w];
      const uint64_t count = corpus.counts[w];
      merged_word.clear();
      bool changed = false;
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          merged_word.push_back(result);
          ++i;
          changed = true;
        } else {
          merged_word.push_back(word[i]);
        }
      }
      if (!changed) continue;
      for (size_t i = 0; i + 1 < word.size(); ++i) pair_counts[key_of(word[i], word[i + 1])] -= count;
      for (size_t i = 0; i + 1 < merged_word.size(); ++i) {
        uint64_t key = key_of(merged_word[i], merged_word[i + 1]);
        pair_counts[key] += count;
        if (merged_word[i] == result || merged_word[i + 1] == result) {
          pair_words[key].push_back(w);
          touched[key] = true;
        }
      }
      word.swap(merged_word);
    }
    for (const auto& [pair, unused] : touched) queue.push({pair_counts[pair], pair});
  }
  return merges;
}

}  // namespace attnkit::text::detail
