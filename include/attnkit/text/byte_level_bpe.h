#pragma once
// Byte-level BPE (GPT-2): a word's bytes start as one symbol each (the byte_level character's
// token), then adjacent symbols are merged, lowest merge rank first (leftmost on ties), until no
// ranked pair is left. Results are cached per word, in a cache of each thread's own (no lock or
// shared cache line on the hot path, so batch encoding scales with threads). A byte whose token
// the vocabulary lacks is left out, as Hugging Face tokenizers does (SmolLM2's vocabulary has no
// token for 21 of the bytes); with all 256 byte tokens every byte string is encodable.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/text/model.h"

namespace attnkit::text {
namespace detail {
class BpeMergeTable;  // src/text/bpe_merge.h
}

struct Merge {
  std::string left;
  std::string right;
};

struct ByteLevelBpeOptions {
  // When the whole word is a vocabulary token, emit it without merging (HF "ignore_merges").
  bool ignore_merges = false;
  size_t cache_capacity = 10000;  // words per thread; 0 disables the cache
};

// Why `merge` cannot be used with `vocabulary` (unknown part or unknown result), or nullopt.
std::optional<std::string> invalid_merge_reason(const Vocabulary& vocabulary, const Merge& merge);

class ByteLevelBpe final : public Model {
 public:
  // Throws attnkit::Error naming the merge when a merge refers to a token not in the vocabulary.
  ByteLevelBpe(Vocabulary vocabulary, std::vector<Merge> merges, ByteLevelBpeOptions options = {});
  ~ByteLevelBpe() override;

  void tokenize(std::string_view word, std::vector<ModelToken>& out) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }
  const std::vector<Merge>& merges() const { return merges_; }
  const ByteLevelBpeOptions& options() const { return options_; }

 private:
  void merge_word(std::string_view word, std::vector<ModelToken>& out) const;

  Vocabulary vocabulary_;
  std::vector<Merge> merges_;
  ByteLevelBpeOptions options_;
  uint32_t byte_ids_[256];  // kNoByteToken where the vocabulary lacks the byte's token
  std::unique_ptr<const detail::BpeMergeTable> merge_table_;

  uint64_t cache_key_;  // this model's key into each thread's caches (unique per process)
};

}  // namespace attnkit::text
