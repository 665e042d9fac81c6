#include "attnkit/text/text_tokenizer.h"

#include <algorithm>

#include <array>

namespace attnkit::text {
namespace {

// Tried after the model's own end token when EndTokenRule::fallbacks.
constexpr std::array<std::string_view, 3> kFallbackEndTokens = {"[SEP]", "[EOS]", "<|endoftext|>"};

std::vector<std::string_view> end_token_candidates(const EndTokenRule& rule) {
  std::vector<std::string_view> names{rule.model_token};
  if (rule.fallbacks) names.insert(names.end(), kFallbackEndTokens.begin(), kFallbackEndTokens.end());
  return names;
}

}  // namespace

std::optional<int64_t> end_token_id(const TextTokenizer& tokenizer, const EndTokenRule& rule) {
  if (rule.tokenizer_end_first)
    if (const auto own = tokenizer.special_ids().end) return own;
  for (const std::string_view name : end_token_candidates(rule))
    if (const auto id = tokenizer.id_of(name)) return id;
  return std::nullopt;
}

std::string end_token_names(const EndTokenRule& rule) {
  std::string out;
  for (const std::string_view name : end_token_candidates(rule)) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

std::optional<int64_t> leading_special_token(const TextTokenizer& tokenizer) {
  std::vector<int64_t> with = tokenizer.encode_ids("a", true);
  std::vector<int64_t> without = tokenizer.encode_ids("a", false);
  // Padding to a fixed length pads both: compare what comes before it.
  if (const auto pad = tokenizer.special_ids().pad)
    for (auto* ids : {&with, &without})
      while (!ids->empty() && ids->back() == *pad) ids->pop_back();
  // A lone begin token: the text with special tokens is one token, then the text without them.
  if (with.size() == without.size() + 1 && std::equal(without.begin(), without.end(), with.begin() + 1))
    return with[0];
  return std::nullopt;
}

}  // namespace attnkit::text
