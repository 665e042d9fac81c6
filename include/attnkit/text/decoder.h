#pragma once
// Decoders: turn tokens back into text.
//   WordPieceDecoder: join with spaces, glue "##" pieces to their left neighbour, and (cleanup)
//                     remove the spaces BERT's tokenization put before punctuation and contractions.
//   ByteLevelDecoder: concatenate and map the byte-level characters back to the original bytes,
//                     so decode(encode(x)) == x for any byte string.
//   MetaspaceDecoder: concatenate, the replacement character back to ' ' (dropped in the first
//                     token when a prefix space was added).
// The SentencePiece-BPE decoders of tokenizer.json (Llama 2, Mistral, Gemma), run as HF runs them:
// each turns the list of token strings into a new list, and the final list is concatenated.
//   ReplaceDecoder:      a literal (or an Oniguruma regex) replaced in every token.
//   ByteFallbackDecoder: runs of <0xNN> tokens become the text of their bytes (U+FFFD per token
//                        when the bytes are not valid UTF-8).
//   FuseDecoder:         all tokens joined into one.
//   StripDecoder:        up to `start` leading and `stop` trailing `content` characters cut from
//                        every token.
//   SequenceDecoder:     several decoders in order.
#include <cstddef>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace attnkit::text {

struct WordPieceDecoder {
  std::string prefix = "##";
  bool cleanup = true;
};

struct ByteLevelDecoder {};

struct MetaspaceDecoder {
  char32_t replacement = U'\u2581';
  bool add_prefix_space = true;
  std::string prepend_scheme = "always";
};

class OnigRegex;  // src/text/onig_regex.h
struct ReplaceDecoder {
  std::string pattern;  // UTF-8
  bool regex = false;   // false: `pattern` is a literal string
  std::string content;
  std::shared_ptr<const OnigRegex> compiled;  // set by make_replace_decoder for a regex
};
// Throws attnkit::Error naming the regex when it does not compile.
ReplaceDecoder make_replace_decoder(std::string pattern, bool regex, std::string content);

struct ByteFallbackDecoder {};
struct FuseDecoder {};
struct StripDecoder {
  char32_t content = U' ';
  size_t start = 0;
  size_t stop = 0;
};

struct DecoderSteps;  // below: the list a SequenceDecoder holds
struct SequenceDecoder {
  std::shared_ptr<const DecoderSteps> steps;
};

using Decoder = std::variant<WordPieceDecoder, ByteLevelDecoder, MetaspaceDecoder, ReplaceDecoder, ByteFallbackDecoder,
                             FuseDecoder, StripDecoder, SequenceDecoder>;

struct DecoderSteps {
  std::vector<Decoder> steps;
};
SequenceDecoder make_decoder_sequence(std::vector<Decoder> steps);

std::string decode_tokens(const Decoder& decoder, const std::vector<std::string>& tokens);

// How decoded text is written: as the tokenizer (and Hugging Face's decode) writes it, or readable:
// the spaces a WordPiece decoder puts around CJK characters removed ("春 风 。" -> "春风。"), as
// bert4keras's decoder writes Chinese. Other decoders' spaces are the text's own and stay.
enum class TextStyle { kTokenizer, kReadable };

// The space-joined text of a WordPiece decoder without the ASCII spaces next to a CJK character
// (ideographs, CJK symbols and punctuation, kana, fullwidth forms).
std::string join_cjk(const std::string& text);

}  // namespace attnkit::text
