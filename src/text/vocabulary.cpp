#include "attnkit/text/vocabulary.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "attnkit/error.h"

namespace attnkit::text {

Vocabulary::Vocabulary() : table_(std::make_shared<Table>()) {}

Vocabulary Vocabulary::from_tokens(std::vector<std::string> tokens) {
  std::vector<std::pair<std::string, uint32_t>> entries;
  entries.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) entries.emplace_back(std::move(tokens[i]), static_cast<uint32_t>(i));
  return from_pairs(entries);
}

Vocabulary Vocabulary::from_pairs(const std::vector<std::pair<std::string, uint32_t>>& entries) {
  auto table = std::make_shared<Table>();
  // Ids index a table, so the largest one sizes it: a file claiming id 4000000000 for one token
  // must not allocate 4e9 slots (nor wrap around at 2^32 - 1). Gaps are allowed, but at most
  // kMaxIdGap ids beyond the number of tokens.
  constexpr uint64_t kMaxIdGap = uint64_t{1} << 20;
  const uint64_t limit = uint64_t{entries.size()} + kMaxIdGap;
  uint64_t wide_bound = 0;
  for (const auto& [token, id] : entries) {
    if (uint64_t{id} >= limit)
      throw Error(fmt::format("vocabulary: id {} of '{}' is too large for {} tokens (ids must be below {})", id,
                              token, entries.size(), limit));
    wide_bound = std::max(wide_bound, uint64_t{id} + 1);
  }
  const auto bound = static_cast<uint32_t>(wide_bound);
  table->tokens.resize(bound);
  table->present.resize(bound, false);
  for (const auto& [token, id] : entries) {
    if (table->present[id]) {
      throw Error(fmt::format("vocabulary: id {} is given to both '{}' and '{}'", id, table->tokens[id], token));
    }
    table->tokens[id] = token;
    table->present[id] = true;
  }
  table->index.reserve(entries.size());
  for (uint32_t id = 0; id < bound; ++id) {
    if (!table->present[id]) continue;
    auto [it, inserted] = table->index.emplace(table->tokens[id], id);
    if (!inserted) {
      throw Error(fmt::format("vocabulary: token '{}' appears twice (ids {} and {})", table->tokens[id], it->second, id));
    }
  }
  return Vocabulary(std::move(table));
}

std::optional<uint32_t> Vocabulary::find(std::string_view token) const {
  auto it = table_->index.find(token);
  if (it == table_->index.end()) return std::nullopt;
  return it->second;
}

const std::string* Vocabulary::token(uint32_t id) const {
  if (id >= table_->tokens.size() || !table_->present[id]) return nullptr;
  return &table_->tokens[id];
}

size_t Vocabulary::size() const { return table_->index.size(); }

uint32_t Vocabulary::id_bound() const { return static_cast<uint32_t>(table_->tokens.size()); }

std::vector<std::pair<std::string, uint32_t>> Vocabulary::entries() const {
  std::vector<std::pair<std::string, uint32_t>> out;
  out.reserve(size());
  for (uint32_t id = 0; id < table_->tokens.size(); ++id) {
    if (table_->present[id]) out.emplace_back(table_->tokens[id], id);
  }
  return out;
}

}  // namespace attnkit::text
