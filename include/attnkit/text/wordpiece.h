#pragma once
// WordPiece (BERT): greedy longest-match-first over a word, later pieces carrying the "##" prefix;
// the unknown token for a word longer than max_input_chars_per_word or with any unmatched rest.
#include <string>

#include "attnkit/text/model.h"

namespace attnkit::text {

struct WordPieceOptions {
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  size_t max_input_chars_per_word = 100;
};

class WordPiece final : public Model {
 public:
  // Throws attnkit::Error when the unknown token is not in the vocabulary.
  WordPiece(Vocabulary vocabulary, WordPieceOptions options = {});

  void tokenize(std::string_view word, std::vector<ModelToken>& out) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }
  const WordPieceOptions& options() const { return options_; }

 private:
  Vocabulary vocabulary_;
  WordPieceOptions options_;
  uint32_t unk_id_;
};

}  // namespace attnkit::text
