#pragma once
// Encoding: the result of tokenizing one text or one pair, as a model consumes it, plus the
// truncation and padding rules that shape it (Hugging Face tokenizers semantics).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::text {

struct Encoding {
  std::vector<uint32_t> ids;
  std::vector<uint32_t> type_ids;           // 0 for the first text, 1 for the second (BERT pairs)
  std::vector<std::string> tokens;
  // Character range [begin, end) of each token in the text it came from (the first or the second
  // text of a pair); characters are Unicode code points, or single bytes of invalid UTF-8.
  // (0, 0) for tokens added by the post-processor and for padding.
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
  std::vector<uint8_t> special_tokens_mask;  // 1 for added special tokens and padding
  std::vector<uint8_t> attention_mask;       // 0 for padding
  std::vector<int32_t> sequence_ids;         // 0 or 1 for text tokens, -1 for added and padding

  size_t size() const { return ids.size(); }
  void append(const Encoding& other);
  // Keeps `length` tokens, dropping from the end (or the start when from_left).
  void truncate(size_t length, bool from_left = false);
};

enum class TruncationStrategy { kLongestFirst, kOnlyFirst, kOnlySecond };
enum class Side { kRight, kLeft };

struct TruncationOptions {
  size_t max_length = 512;  // including the tokens the post-processor adds
  TruncationStrategy strategy = TruncationStrategy::kLongestFirst;
  Side direction = Side::kRight;
  size_t stride = 0;  // kept for tokenizer.json; overflowing windows are not produced
};

struct PaddingOptions {
  std::optional<size_t> length;  // fixed length; nullopt pads a batch to its longest encoding
  Side direction = Side::kRight;
  size_t pad_to_multiple_of = 0;  // 0: no rounding
  uint32_t pad_id = 0;
  uint32_t pad_type_id = 0;
  std::string pad_token = "[PAD]";
};

// Truncates the encodings of a text (and of its pair) to `max_length` tokens in total, the way the
// Hugging Face library does. Throws attnkit::Error when the strategy cannot reach the length.
void truncate_encodings(Encoding& first, Encoding* second, const TruncationOptions& options);

// Pads `encoding` to at least `length` tokens (rounded up to pad_to_multiple_of).
void pad_encoding(Encoding& encoding, size_t length, const PaddingOptions& options);

std::string to_string(TruncationStrategy strategy);  // "longest-first", "only-first", "only-second"
TruncationStrategy truncation_strategy_from_string(const std::string& name);  // also "LongestFirst"...

}  // namespace attnkit::text
