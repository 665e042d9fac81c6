#pragma once
// Marian's tokenizer (transformers' MarianTokenizer, the Opus-MT checkpoints' files): source.spm
// and target.spm (SentencePiece models) + vocab.json (piece -> model id, one vocabulary for both
// sides). Encoding: a leading language code ">>xx<<" is kept as one token, the rest is cut into
// pieces by source.spm, each piece mapped through vocab.json (<unk> when absent), then </s>
// appended. Decoding: ids -> pieces through vocab.json, special tokens (<pad>, </s>, <unk>)
// skipped or kept as they are, runs of pieces joined by target.spm (SentencePiece's own
// DecodePieces), '▁' -> ' ', stripped, then transformers' clean-up of spaces before punctuation
// and contractions.
// SentencePiece itself (Debian's libsentencepiece, the C++ library the Python package wraps,
// loaded privately through libattnkit_sentencepiece.so: its bundled protobuf must not meet
// LibTorch's) does the cutting and joining, so normalisation (the model's precompiled charsmap), whitespace
// rules, Viterbi ties and byte fallback are the ones MarianTokenizer gets. Not supported:
// separate_vocabs (target_vocab_file), sacremoses punctuation normalisation (MarianTokenizer
// skips it too when sacremoses is not installed).
// A TextTokenizer (text_tokenizer.h): a target-side text is encode_target's; special ids: end
// (eos_token), pad, unknown; no start token.
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/text/text_tokenizer.h"

namespace attnkit::text {

class MarianTokenizer : public TextTokenizer {
 public:
  // Reads DIR/source.spm, DIR/target.spm, DIR/vocab.json (and DIR/tokenizer_config.json for
  // unk/eos/pad names and separate_vocabs when present). Throws attnkit::Error (one line, naming
  // the file) for a missing or malformed file.
  explicit MarianTokenizer(const std::string& directory);
  ~MarianTokenizer() override;
  MarianTokenizer(MarianTokenizer&&) noexcept;
  MarianTokenizer& operator=(MarianTokenizer&&) noexcept;

  // Whether `directory` holds Marian's tokenizer files (source.spm and vocab.json).
  static bool found_in(const std::string& directory);

  std::vector<int64_t> encode(std::string_view text, bool add_eos = true) const;
  // A target-side text (MarianTokenizer's text_target): cut by target.spm, no language code.
  std::vector<int64_t> encode_target(std::string_view text, bool add_eos = true) const;
  // The pieces before the id mapping (target: cut by target.spm).
  std::vector<std::string> pieces(std::string_view text, bool target = false) const;
  // Throws attnkit::Error for an id outside the vocabulary.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;
  std::optional<int64_t> token_to_id(const std::string& token) const;
  int64_t eos_id() const { return eos_id_; }
  int64_t pad_id() const { return pad_id_; }
  size_t vocab_size() const override { return id_to_token_.size(); }

  std::optional<int64_t> id_of(std::string_view token) const override;
  const std::string* token_of(int64_t id) const override;
  SpecialTokenIds special_ids() const override;

 private:
  std::vector<int64_t> do_encode_ids(std::string_view text, bool add_eos, TextSide side) const override;
  std::string do_decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens, TextStyle) const override;

  struct Processor;  // a SentencePiece model of libattnkit_sentencepiece.so
  std::string directory_;
  std::unique_ptr<Processor> source_, target_;
  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<int64_t, std::string> id_to_token_;
  std::string unk_, eos_, pad_;
  int64_t unk_id_ = 0, eos_id_ = 0, pad_id_ = 0;
};

}  // namespace attnkit::text
