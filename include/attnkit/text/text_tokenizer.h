#pragma once
// TextTokenizer: a tokenizer as the commands and tasks use it, whatever its kind. Text to ids (a
// source text, or an encoder-decoder's target text), ids to text, token <-> id, the vocabulary
// size and the special tokens it names. Ids are int64 here, as models take them.
//   Tokenizer        (tokenizer.h)        the Hugging Face pipeline: WordPiece, byte-level BPE, Unigram
//   MarianTokenizer  (marian_tokenizer.h) Marian's source.spm / target.spm + vocab.json
// pretrained.h's load_text_tokenizer / find_text_tokenizer / tokenizer_for_model pick the class
// for a path. The concrete classes keep what only they have (Tokenizer: Encoding with offsets and
// type ids, pairs, batches, truncation and padding, training and saving; MarianTokenizer: pieces).
// end_token_id below is the one rule for which token ends a generated sequence. No LibTorch.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/text/decoder.h"

namespace attnkit::text {

// Which side of a translation pair a text is. Marian cuts a target text with target.spm (its
// text_target); tokenizers with one model encode both sides alike.
enum class TextSide { kSource, kTarget };

// The special tokens a tokenizer's files name; nullopt for those they do not. A tokenizer.json
// names no end or start token (transformers keeps those in tokenizer_config.json): end_token_id
// finds them by name.
struct SpecialTokenIds {
  std::optional<int64_t> end;      // ends a sequence (Marian: eos_token, </s>)
  std::optional<int64_t> pad;      // Tokenizer: its padding settings' id; Marian: pad_token
  std::optional<int64_t> unknown;  // WordPiece's unk_token, Unigram's unk_id; Marian: unk_token
  std::optional<int64_t> start;    // begins a sequence (bos)
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  // The ids of `text`; add_special_tokens adds what the tokenizer puts around a text (BERT's
  // [CLS] ... [SEP], Marian's </s>), with the tokenizer's truncation and padding when it has any.
  std::vector<int64_t> encode_ids(std::string_view text, bool add_special_tokens = true,
                                  TextSide side = TextSide::kSource) const {
    return do_encode_ids(text, add_special_tokens, side);
  }
  // The text of `ids`. Throws attnkit::Error for an id the tokenizer cannot decode (a
  // Tokenizer: outside its vocabulary). TextStyle::kReadable: decoder.h (WordPiece's CJK spaces).
  std::string decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens = true,
                         TextStyle style = TextStyle::kTokenizer) const {
    return do_decode_ids(ids, skip_special_tokens, style);
  }
  virtual std::optional<int64_t> id_of(std::string_view token) const = 0;
  // The token of `id`, or nullptr; valid while the tokenizer lives.
  virtual const std::string* token_of(int64_t id) const = 0;
  virtual size_t vocab_size() const = 0;
  virtual SpecialTokenIds special_ids() const = 0;

 protected:
  TextTokenizer() = default;
  TextTokenizer(const TextTokenizer&) = default;
  TextTokenizer(TextTokenizer&&) = default;
  TextTokenizer& operator=(const TextTokenizer&) = default;
  TextTokenizer& operator=(TextTokenizer&&) = default;

 private:
  // Non-virtual public functions with the defaults, virtual parts without: an implementation
  // cannot give a call other defaults.
  virtual std::vector<int64_t> do_encode_ids(std::string_view text, bool add_special_tokens,
                                             TextSide side) const = 0;
  virtual std::string do_decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens,
                                    TextStyle style) const = 0;
};

// Which token ends a generated sequence: the first of these the tokenizer has.
//   1. its own end token (special_ids().end, Marian's eos_token), when tokenizer_end_first;
//   2. model_token, the model's end token by name (models::DecodingTraits::end_token: "</s>" for
//      an encoder-decoder, "[SEP]" for UniLM, "<|endoftext|>" for a language model);
//   3. with fallbacks: "[SEP]", "[EOS]", "<|endoftext|>" (an encoder-decoder trained here on a
//      BERT- or GPT-2-style vocabulary).
// `attnkit generate` asks (the traits' end token, fallbacks for an encoder-decoder, own end first);
// the translation task ("</s>", fallbacks); `analyze heads` ("</s>", fallbacks, own end not
// asked: it looks the names up, as it always has; docs/architecture.md "Tokenizers").
struct EndTokenRule {
  std::string_view model_token;
  bool fallbacks = false;
  bool tokenizer_end_first = true;
};
std::optional<int64_t> end_token_id(const TextTokenizer& tokenizer, const EndTokenRule& rule);
// The names end_token_id tries, for messages: "</s>, [SEP], [EOS], <|endoftext|>".
std::string end_token_names(const EndTokenRule& rule);

// The begin token the tokenizer puts alone before a single text (Gemma's and Llama 2's <bos>), or
// nullopt when it puts none there (GPT-2, SmolLM2, Llama 3's tokenizer.json without a template)
// or adds more than that one token (BERT's [CLS] text [SEP]): encode_ids("a") with special
// tokens must be that token followed by encode_ids("a") without them (padding ignored).
std::optional<int64_t> leading_special_token(const TextTokenizer& tokenizer);

}  // namespace attnkit::text
