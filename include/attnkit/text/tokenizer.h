#pragma once
// Tokenizer: the full pipeline of a Hugging Face-style tokenizer.
//   text -> added tokens split out -> normaliser -> pre-tokenizer -> model -> post-processor
//        -> truncation -> padding                                  (encode, encode_pair, encode_batch)
//   ids  -> tokens -> decoder                                       (decode)
// A Tokenizer is immutable while encoding and safe to share between threads. It is a
// TextTokenizer (text_tokenizer.h): commands that only need ids and text take it through that.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/text/added_vocabulary.h"
#include "attnkit/text/decoder.h"
#include "attnkit/text/encoding.h"
#include "attnkit/text/model.h"
#include "attnkit/text/normalizer.h"
#include "attnkit/text/post_processor.h"
#include "attnkit/text/pre_tokenizer.h"
#include "attnkit/text/text_tokenizer.h"

namespace attnkit::text {

struct TokenizerParts {
  std::shared_ptr<const Model> model;  // WordPiece, ByteLevelBpe or Unigram
  std::optional<Normalizer> normalizer;
  PreTokenizer pre_tokenizer;
  PostProcessor post_processor;
  Decoder decoder;
  AddedVocabulary added_tokens;
  std::optional<TruncationOptions> truncation;
  std::optional<PaddingOptions> padding;
};

// One input of a batch: a text, or a pair when `second` is set.
struct EncodeInput {
  std::string first;
  std::optional<std::string> second;
};

class Tokenizer : public TextTokenizer {
 public:
  // Throws attnkit::Error when the parts do not fit together (no model, byte-level BPE without
  // the byte-level pre-tokenizer, a template naming unknown tokens).
  explicit Tokenizer(TokenizerParts parts);

  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  Encoding encode_pair(std::string_view first, std::string_view second, bool add_special_tokens = true) const;
  // Encodes every input on `threads` threads (0: all cores); padding to the longest applies here.
  std::vector<Encoding> encode_batch(const std::vector<EncodeInput>& inputs, int threads = 0,
                                     bool add_special_tokens = true) const;
  // Text of `ids` (raw bytes for byte-level models). Throws attnkit::Error for an unknown id.
  // TextStyle::kReadable joins CJK characters without the WordPiece spaces (decoder.h).
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens = true,
                     TextStyle style = TextStyle::kTokenizer) const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(uint32_t id) const;
  size_t vocab_size() const override;  // model vocabulary plus added tokens outside it

  // TextTokenizer: encode(text).ids, decode, token_to_id / id_to_token with int64 ids; special
  // ids: the unknown token of WordPiece (unk_token) and Unigram (unk_id), the padding settings'
  // pad id; no end or start token (tokenizer.json names none). Both sides encode alike.
  std::optional<int64_t> id_of(std::string_view token) const override;
  const std::string* token_of(int64_t id) const override;
  SpecialTokenIds special_ids() const override;

  void set_truncation(std::optional<TruncationOptions> truncation);
  void set_padding(std::optional<PaddingOptions> padding);
  const TokenizerParts& parts() const { return parts_; }

 private:
  std::vector<int64_t> do_encode_ids(std::string_view text, bool add_special_tokens, TextSide side) const override;
  std::string do_decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens, TextStyle style) const override;
  Encoding encode_text(std::string_view text, int32_t sequence_id) const;
  Encoding finish(Encoding first, Encoding* second, bool add_special_tokens) const;

  TokenizerParts parts_;
  bool byte_level_ = false;
};

}  // namespace attnkit::text
