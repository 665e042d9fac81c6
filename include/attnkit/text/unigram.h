#pragma once
// Unigram (SentencePiece, as ALBERT, XLNet and T5 use it): the segmentation of a word with the
// highest total log-probability (Viterbi over the pieces' scores), as the Hugging Face library does:
//   * a character no piece starts with becomes the unknown piece, scored min(score) - 10;
//   * consecutive unknown pieces are fused into one;
//   * with byte_fallback, an unknown piece is spelled as its UTF-8 bytes <0xXX> when all of them
//     are in the vocabulary (each byte token covers the whole unknown piece).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/text/model.h"

namespace attnkit::text {

struct UnigramPiece {
  std::string piece;
  double score = 0.0;
};

class Unigram final : public Model {
 public:
  // Ids are the positions in `pieces`. Throws attnkit::Error for a duplicate piece, an unk_id out
  // of range or a score that is not finite.
  Unigram(std::vector<UnigramPiece> pieces, std::optional<uint32_t> unk_id, bool byte_fallback);

  void tokenize(std::string_view word, std::vector<ModelToken>& out) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }
  const std::vector<UnigramPiece>& pieces() const { return pieces_; }
  std::optional<uint32_t> unk_id() const { return unk_id_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct Node {
    int32_t piece = -1;  // id of the piece ending here, or -1
    uint32_t edges_begin = 0;
    uint32_t edges_end = 0;
  };
  // Child of `node` on `byte`, or 0 (the root, never a child) when none.
  uint32_t child(uint32_t node, unsigned char byte) const;

  std::vector<UnigramPiece> pieces_;
  Vocabulary vocabulary_;
  std::optional<uint32_t> unk_id_;
  bool byte_fallback_;
  double unk_score_ = 0.0;
  std::vector<Node> nodes_;  // nodes_[0]: the root
  std::vector<unsigned char> edge_bytes_;
  std::vector<uint32_t> edge_nodes_;
  uint32_t root_children_[256] = {};
  int32_t byte_ids_[256];  // id of <0xXX>, or -1
};

}  // namespace attnkit::text
