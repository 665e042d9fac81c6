#include "attnkit/text/text_tokenizer.h"

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
  const std::vector<int64_t> with = tokenizer.encode_ids("a", true);
  const std::vector<int64_t> without = tokenizer.encode_ids("a", false);
  // Sizes are not compared: padding to a fixed length gives both the same size.
  if (!with.empty() && (without.empty() || with[0] != without[0])) return with[0];
  return std::nullopt;
}

}  // namespace attnkit::text
