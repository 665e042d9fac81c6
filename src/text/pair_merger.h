#pragma once
// The merge loop shared by the WordPiece and BPE trainers (internal to src/text): repeatedly
// replace the most frequent adjacent symbol pair of a weighted word list with a new symbol.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::text::detail {

struct SymbolWords {
  std::vector<std::vector<uint32_t>> words;  // each word as symbol ids
  std::vector<uint64_t> counts;              // how often each word occurs
};

struct LearnedMerge {
  uint32_t left;
  uint32_t right;
  uint32_t result;
};

// Learns merges until `symbols` holds `max_symbols` entries or the best pair occurs fewer than
// `min_frequency` times. `combine(left, right)` names a merged symbol; a name already present is
// reused. New names are appended to `symbols`.
std::vector<LearnedMerge> learn_merges(SymbolWords corpus, std::vector<std::string>& symbols, size_t max_symbols,
                                       uint64_t min_frequency,
                                       const std::function<std::string(const std::string&, const std::string&)>& combine);

}  // namespace attnkit::text::detail
