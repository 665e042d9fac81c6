#include "attnkit/text/encoding.h"

#include <fmt/format.h>

#include <algorithm>

#include "attnkit/error.h"

namespace attnkit::text {
namespace {

template <typename T>
void keep(std::vector<T>& values, size_t length, bool from_left) {
  if (values.size() <= length) return;
  if (from_left) {
    values.erase(values.begin(), values.end() - static_cast<std::ptrdiff_t>(length));
  } else {
    values.resize(length);
  }
}

template <typename T>
void extend(std::vector<T>& values, const std::vector<T>& more) {
  values.insert(values.end(), more.begin(), more.end());
}

template <typename T>
void fill(std::vector<T>& values, size_t count, const T& value, bool at_left) {
  values.insert(at_left ? values.begin() : values.end(), count, value);
}

}  // namespace

void Encoding::append(const Encoding& other) {
  extend(ids, other.ids);
  extend(type_ids, other.type_ids);
  extend(tokens, other.tokens);
  extend(offsets, other.offsets);
  extend(special_tokens_mask, other.special_tokens_mask);
  extend(attention_mask, other.attention_mask);
  extend(sequence_ids, other.sequence_ids);
}

void Encoding::truncate(size_t length, bool from_left) {
  keep(ids, length, from_left);
  keep(type_ids, length, from_left);
  keep(tokens, length, from_left);
  keep(offsets, length, from_left);
  keep(special_tokens_mask, length, from_left);
  keep(attention_mask, length, from_left);
  keep(sequence_ids, length, from_left);
}

void truncate_encodings(Encoding& first, Encoding* second, const TruncationOptions& options) {
  const bool from_left = options.direction == Side::kLeft;
  const size_t max_length = options.max_length;
  const size_t total = first.size() + (second ? second->size() : 0);
  if (total <= max_length) return;
  const size_t to_remove = total - max_length;

  if (options.strategy == TruncationStrategy::kLongestFirst) {
    if (second == nullptr) {
      first.truncate(max_length, from_left);
      return;
    }
    // Keep as much of the shorter one as fits in half or more, the rest for the longer one.
    size_t n1 = first.size();
    size_t n2 = second->size();
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    n2 = n1 > max_length ? n1 : std::max(n1, max_length - n1);
    if (n1 + n2 > max_length) {
      n1 = max_length / 2;
      n2 = n1 + max_length % 2;
    }
    if (swap) std::swap(n1, n2);
    first.truncate(n1, from_left);
    second->truncate(n2, from_left);
    return;
  }
  Encoding* target = options.strategy == TruncationStrategy::kOnlyFirst ? &first : second;
  if (target == nullptr) {
    throw Error("truncation: strategy only-second needs a pair of texts");
  }
  if (target->size() <= to_remove) {
    throw Error(fmt::format("truncation: the {} text has {} tokens, too few to remove {} with strategy {}",
                            target == &first ? "first" : "second", target->size(), to_remove,
                            to_string(options.strategy)));
  }
  target->truncate(target->size() - to_remove, from_left);
}

void pad_encoding(Encoding& encoding, size_t length, const PaddingOptions& options) {
  if (options.pad_to_multiple_of > 0 && length % options.pad_to_multiple_of != 0) {
    length += options.pad_to_multiple_of - length % options.pad_to_multiple_of;
  }
  if (encoding.size() >= length) return;
  const size_t count = length - encoding.size();
  const bool left = options.direction == Side::kLeft;
  fill(encoding.ids, count, options.pad_id, left);
  fill(encoding.type_ids, count, options.pad_type_id, left);
  fill(encoding.tokens, count, options.pad_token, left);
  fill(encoding.offsets, count, std::pair<uint32_t, uint32_t>{0, 0}, left);
  fill(encoding.special_tokens_mask, count, uint8_t{1}, left);
  fill(encoding.attention_mask, count, uint8_t{0}, left);
  fill(encoding.sequence_ids, count, int32_t{-1}, left);
}

std::string to_string(TruncationStrategy strategy) {
  switch (strategy) {
    case TruncationStrategy::kLongestFirst: return "longest-first";
    case TruncationStrategy::kOnlyFirst: return "only-first";
    case TruncationStrategy::kOnlySecond: return "only-second";
  }
  return "longest-first";
}

TruncationStrategy truncation_strategy_from_string(const std::string& name) {
  if (name == "longest-first" || name == "LongestFirst") return TruncationStrategy::kLongestFirst;
  if (name == "only-first" || name == "OnlyFirst") return TruncationStrategy::kOnlyFirst;
  if (name == "only-second" || name == "OnlySecond") return TruncationStrategy::kOnlySecond;
  throw Error(fmt::format("truncation strategy '{}' is not one of longest-first, only-first, only-second", name));
}

}  // namespace attnkit::text
