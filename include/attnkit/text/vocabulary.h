#pragma once
// Vocabulary: the token <-> id table of a model. Immutable once built; copies share the table.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attnkit::text {

class Vocabulary {
 public:
  Vocabulary();
  // Ids are the positions in `tokens` (vocab.txt order). Throws attnkit::Error on a duplicate.
  static Vocabulary from_tokens(std::vector<std::string> tokens);
  // Explicit ids (vocab.json / tokenizer.json). Throws attnkit::Error on a duplicate token or id.
  static Vocabulary from_pairs(const std::vector<std::pair<std::string, uint32_t>>& entries);

  std::optional<uint32_t> find(std::string_view token) const;
  bool contains(std::string_view token) const { return find(token).has_value(); }
  // The token with this id, or nullptr when no token has it.
  const std::string* token(uint32_t id) const;
  size_t size() const;        // number of tokens
  uint32_t id_bound() const;  // one more than the largest id (== size() without gaps)
  // (token, id) in id order.
  std::vector<std::pair<std::string, uint32_t>> entries() const;

 private:
  struct Table {
    std::vector<std::string> tokens;  // by id; empty string where no token has that id
    std::vector<bool> present;
    std::unordered_map<std::string_view, uint32_t> index;  // views into `tokens`
  };
  explicit Vocabulary(std::shared_ptr<const Table> table) : table_(std::move(table)) {}
  std::shared_ptr<const Table> table_;
};

}  // namespace attnkit::text
