// Hand-worked cases for BERT's basic tokenizer rules (normaliser + pre-tokenizer) and WordPiece.
#include <gtest/gtest.h>

#include "attnkit/error.h"
#include "attnkit/text/normalizer.h"
#include "attnkit/text/pre_tokenizer.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/unicode.h"
#include "attnkit/text/wordpiece.h"

namespace attnkit::text {
namespace {

std::vector<std::string> basic_words(const std::string& text, bool lowercase = true) {
  AlignedText input = AlignedText::identity(unicode::decode_utf8(text, unicode::InvalidUtf8::kReplace));
  AlignedText normalized = normalize(BertNormalizer{true, true, std::nullopt, lowercase}, input);
  std::vector<std::string> words;
  for (const Word& word : pre_tokenize(BertPreTokenizer{}, normalized)) words.push_back(word.bytes);
  return words;
}

using Words = std::vector<std::string>;

TEST(BertBasicTokenizer, CleansControlCharactersAndWhitespace) {
  // NUL, BEL, U+FFFD, the soft hyphen (format) and U+0085 (control) vanish; tab, newline and
  // no-break space separate words.
  using namespace std::string_literals;
  EXPECT_EQ(basic_words("a\x00"s + "b\x07" "c\xEF\xBF\xBD" "d\te\nf\xC2\xA0g\xC2\xADh\xC2\x85i"),
            (Words{"abcd", "e", "f", "ghi"}));
  EXPECT_EQ(basic_words("  \t\r\n  "), Words{});
}

TEST(BertBasicTokenizer, SplitsEveryCjkIdeograph) {
  EXPECT_EQ(basic_words("ab中文cd"), (Words{"ab", "中", "文", "cd"}));
  // Kana and Hangul are not CJK ideographs: they stay in their word.
  EXPECT_EQ(basic_words("こんにちは世界"), (Words{"こんにちは", "世", "界"}));
}

TEST(BertBasicTokenizer, SplitsPunctuationIncludingAsciiSymbols) {
  EXPECT_EQ(basic_words("Hello,world!!"), (Words{"hello", ",", "world", "!", "!"}));
  // ASCII symbols count as punctuation; the euro sign (a currency symbol outside ASCII) does not.
  EXPECT_EQ(basic_words("a$b+c^d`e|f€g"), (Words{"a", "$", "b", "+", "c", "^", "d", "`", "e", "|", "f€g"}));
  EXPECT_EQ(basic_words("«quote»—dash"), (Words{"«", "quote", "»", "—", "dash"}));
}

TEST(BertBasicTokenizer, LowercasesAndStripsAccentsOnlyWhenUncased) {
  EXPECT_EQ(basic_words("Héllo Ünïcödé ÅNGSTRÖM"), (Words{"hello", "unicode", "angstrom"}));
  EXPECT_EQ(basic_words("Cafe\xCC\x81"), (Words{"cafe"}));  // combining acute accent dropped
  EXPECT_EQ(basic_words("Héllo Ünïcödé", /*lowercase=*/false), (Words{"Héllo", "Ünïcödé"}));
}

TEST(BertBasicTokenizer, OffsetsPointIntoTheOriginalText) {
  AlignedText input = AlignedText::identity(unicode::decode_utf8("Ça, 中x", unicode::InvalidUtf8::kReplace));
  AlignedText normalized = normalize(BertNormalizer{}, input);
  auto words = pre_tokenize(BertPreTokenizer{}, normalized);
  ASSERT_EQ(words.size(), 4u);
  // "ça" came from characters 0..2 although NFD made it three characters before stripping.
  EXPECT_EQ(words[0].bytes, "ca");
  EXPECT_EQ(words[0].byte_origin, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(words[1].byte_origin, (std::vector<uint32_t>{2}));
  EXPECT_EQ(words[2].byte_origin, (std::vector<uint32_t>{4, 4, 4}));  // three UTF-8 bytes of 中
  EXPECT_EQ(words[3].byte_origin, (std::vector<uint32_t>{5}));
}

Vocabulary tiny_vocabulary() {
  return Vocabulary::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "aff",
                                  "able", "a", "##a", "b", "##b", "hello", "!", "##ll", "he", "中", "##é"});
}

std::vector<std::string> piece_tokens(const WordPiece& model, const std::string& word) {
  std::vector<ModelToken> tokens;
  model.tokenize(word, tokens);
  std::vector<std::string> out;
  for (const auto& token : tokens) out.push_back(*model.vocabulary().token(token.id));
  return out;
}

TEST(WordPiece, GreedyLongestMatchFirst) {
  WordPiece model(tiny_vocabulary());
  EXPECT_EQ(piece_tokens(model, "unaffable"), (Words{"un", "##aff", "##able"}));
  EXPECT_EQ(piece_tokens(model, "abab"), (Words{"a", "##b", "##a", "##b"}));
  EXPECT_EQ(piece_tokens(model, "hello"), (Words{"hello"}));
  EXPECT_EQ(piece_tokens(model, "aé"), (Words{"a", "##é"}));
}

TEST(WordPiece, UnknownWhenAnyRestIsUnmatchedOrTheWordIsTooLong) {
  WordPiece model(tiny_vocabulary());
  EXPECT_EQ(piece_tokens(model, "unaffablex"), (Words{"[UNK]"}));  // prefix matched, rest not
  EXPECT_EQ(piece_tokens(model, "xyz"), (Words{"[UNK]"}));
  EXPECT_EQ(piece_tokens(model, std::string(100, 'a')).size(), 100u);
  EXPECT_EQ(piece_tokens(model, std::string(101, 'a')), (Words{"[UNK]"}));
  // The limit counts characters, not bytes: 60 two-byte characters are fine.
  std::string accents = "a";
  for (int i = 0; i < 60; ++i) accents += "é";
  EXPECT_EQ(piece_tokens(model, accents).size(), 61u);
}

TEST(WordPiece, RequiresTheUnknownToken) {
  EXPECT_THROW(WordPiece(Vocabulary::from_tokens({"a", "b"})), Error);
}

TEST(BertTokenizer, SpecialTokensAreNeverSplitAndPairsGetTypeIds) {
  Tokenizer tokenizer = make_bert_tokenizer(tiny_vocabulary());
  Encoding encoding = tokenizer.encode_pair("[MASK] Hello!", "unaffable 中");
  EXPECT_EQ(encoding.tokens, (Words{"[CLS]", "[MASK]", "hello", "!", "[SEP]", "un", "##aff", "##able", "中", "[SEP]"}));
  EXPECT_EQ(encoding.type_ids, (std::vector<uint32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(encoding.special_tokens_mask, (std::vector<uint8_t>{1, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  using Span = std::pair<uint32_t, uint32_t>;
  EXPECT_EQ(encoding.offsets, (std::vector<Span>{{0, 0}, {0, 6}, {7, 12}, {12, 13}, {0, 0}, {0, 2}, {2, 5}, {5, 9}, {10, 11}, {0, 0}}));
  // A lower-case "[mask]" is ordinary text.
  EXPECT_EQ(tokenizer.encode("[mask]", false).tokens, (Words{"[UNK]", "[UNK]", "[UNK]"}));
}

TEST(BertTokenizer, InvalidUtf8IsReplacedThenCleaned) {
  Tokenizer tokenizer = make_bert_tokenizer(tiny_vocabulary());
  Encoding encoding = tokenizer.encode("he\xFFll\xC3", false);
  EXPECT_EQ(encoding.tokens, (Words{"he", "##ll"}));
  // Each invalid byte counts as one character of the original text.
  using Span = std::pair<uint32_t, uint32_t>;
  EXPECT_EQ(encoding.offsets, (std::vector<Span>{{0, 2}, {3, 5}}));
}

TEST(BertTokenizer, DecodeJoinsPiecesAndCleansUpSpaces) {
  Tokenizer tokenizer = make_bert_tokenizer(tiny_vocabulary());
  auto ids = tokenizer.encode("Hello! unaffable").ids;
  EXPECT_EQ(tokenizer.decode(ids), "hello! unaffable");
  EXPECT_EQ(tokenizer.decode(ids, /*skip_special_tokens=*/false), "[CLS] hello! unaffable [SEP]");
  EXPECT_THROW(tokenizer.decode({999}), Error);
}

}  // namespace
}  // namespace attnkit::text
