#pragma once
// SentencePiece-style BPE (Llama 2, Mistral, Gemma, TinyLlama): HF tokenizers' BPE model on
// characters. A word's characters start as one symbol each; a character outside the vocabulary
// becomes its UTF-8 bytes as <0xNN> tokens (byte_fallback), else the unknown token (runs of
// unknown characters fused into one when fuse_unk), else nothing; then adjacent symbols are
// merged, lowest merge rank first (leftmost on ties). With ignore_merges, a word that is itself a
// vocabulary token is emitted whole (the option of tokenizers >= 0.19).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/model.h"

namespace attnkit::text {

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  size_t cache_capacity = 10000;  // words per thread; 0 disables the cache
};

class Bpe final : public Model {
 public:
  // Throws attnkit::Error naming the merge when a merge refers to a token not in the vocabulary,
  // or when unk_token is not in it.
  Bpe(Vocabulary vocabulary, std::vector<Merge> merges, BpeOptions options = {});
  ~Bpe() override;

  void tokenize(std::string_view word, std::vector<ModelToken>& out) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }
  const std::vector<Merge>& merges() const { return merges_; }
  const BpeOptions& options() const { return options_; }
  std::optional<uint32_t> unk_id() const { return unk_id_; }

 private:
  void merge_word(std::string_view word, std::vector<ModelToken>& out) const;

  Vocabulary vocabulary_;
  std::vector<Merge> merges_;
  BpeOptions options_;
  std::optional<uint32_t> unk_id_;
  std::optional<uint32_t> byte_ids_[256];  // the <0xNN> tokens, where the vocabulary has them
  std::unique_ptr<const detail::BpeMergeTable> merge_table_;
  uint64_t cache_key_;
};

}  // namespace attnkit::text
