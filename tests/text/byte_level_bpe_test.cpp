// Byte-level BPE: the byte <-> unicode map, GPT-2's pre-tokenisation rule on hand-worked cases,
// merge order, and the round trip decode(encode(x)) == x for any byte string.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <set>

#include "attnkit/text/byte_level.h"
#include "attnkit/text/pre_tokenizer.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/unicode.h"

namespace attnkit::text {
namespace {

using Words = std::vector<std::string>;

TEST(ByteLevelMap, IsABijectionOntoPrintableCharacters) {
  std::set<char32_t> seen;
  for (int byte = 0; byte < 256; ++byte) {
    char32_t c = byte_level::byte_to_char(static_cast<uint8_t>(byte));
    EXPECT_TRUE(seen.insert(c).second) << byte;
    EXPECT_FALSE(unicode::is_whitespace(c) || unicode::is_other(c)) << byte;
    EXPECT_EQ(byte_level::char_to_byte(c), static_cast<uint8_t>(byte));
  }
  EXPECT_EQ(byte_level::bytes_to_token(" hi\n"), "Ġhi\xC4\x8A");  // space -> U+0120, newline -> U+010A
  EXPECT_EQ(byte_level::byte_to_char('A'), U'A');
  EXPECT_FALSE(byte_level::char_to_byte(U'€'));
}

Words gpt2_pieces(const std::string& text) {
  std::u32string chars = unicode::decode_utf8(text, unicode::InvalidUtf8::kKeepBytes);
  Words out;
  for (auto [begin, end] : split_gpt2(chars)) out.push_back(unicode::encode_utf8(chars.substr(begin, end - begin)));
  return out;
}

TEST(Gpt2PreTokenizer, HandWorkedCases) {
  EXPECT_EQ(gpt2_pieces("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(gpt2_pieces("I'm here, you've 42 cats!!"), (Words{"I", "'m", " here", ",", " you", "'ve", " 42", " cats", "!!"}));
  // The last space of a run goes to the next word; a trailing run stays whole.
  EXPECT_EQ(gpt2_pieces("a   b  "), (Words{"a", "  ", " b", "  "}));
  EXPECT_EQ(gpt2_pieces("x\t\ty"), (Words{"x", "\t", "\t", "y"}));
  // Only U+0020 may lead a word; contractions are lower-case only.
  EXPECT_EQ(gpt2_pieces("a\xC2\xA0" "b 'S 's"), (Words{"a", "\xC2\xA0", "b", " '", "S", " '", "s"}));
  EXPECT_EQ(gpt2_pieces("abc123def"), (Words{"abc", "123", "def"}));
  EXPECT_EQ(gpt2_pieces("中文 😀😀x"), (Words{"中文", " 😀😀", "x"}));
  // An invalid byte is a symbol of its own class ("other"), like punctuation.
  EXPECT_EQ(gpt2_pieces("a\xFF!b"), (Words{"a", "\xFF!", "b"}));
}

Tokenizer tiny_bpe() {
  std::vector<std::string> tokens;
  for (int byte = 0; byte < 256; ++byte) tokens.push_back(byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
  for (const char* merged : {"bc", "ab", "abc", "Ġa"}) tokens.push_back(merged);
  std::vector<Merge> merges = {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"Ġ", "a"}};
  return make_gpt2_tokenizer(Vocabulary::from_tokens(tokens), merges);
}

TEST(ByteLevelBpe, MergesLowestRankFirst) {
  Tokenizer tokenizer = tiny_bpe();
  // "b c" (rank 0) beats "a b" (rank 1), then "a bc" (rank 2) joins the rest.
  EXPECT_EQ(tokenizer.encode("abc").tokens, (Words{"abc"}));
  EXPECT_EQ(tokenizer.encode("abab").tokens, (Words{"ab", "ab"}));
  // "a b" (rank 1) is applied before "Ġ a" (rank 3), which then no longer applies.
  EXPECT_EQ(tokenizer.encode(" abd").tokens, (Words{"Ġ", "ab", "d"}));
  EXPECT_EQ(tokenizer.encode(" ad").tokens, (Words{"Ġa", "d"}));
}

// A vocabulary without some byte tokens (SmolLM2's lacks 21): those bytes are left out, as in HF
// tokenizers, and the symbols around them become neighbours that may merge.
TEST(ByteLevelBpe, BytesWithoutATokenAreLeftOut) {
  std::vector<std::string> tokens;
  for (int byte = 0; byte < 256; ++byte) {
    if (byte != 0x04 && byte != 0xF1) tokens.push_back(byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
  }
  tokens.push_back("ab");
  const Tokenizer tokenizer = make_gpt2_tokenizer(Vocabulary::from_tokens(tokens), {{"a", "b"}});
  EXPECT_EQ(tokenizer.encode("ab").tokens, (Words{"ab"}));
  EXPECT_EQ(tokenizer.encode("\x04").tokens, Words{});
  EXPECT_EQ(tokenizer.encode("a\x04\x04" "b").tokens, (Words{"a", "b"}));  // GPT-2's rule: three words
  const std::string b90 = byte_level::bytes_to_token("\x90"), b80 = byte_level::bytes_to_token("\x80");
  EXPECT_EQ(tokenizer.encode("\xF1\x90\x80\x80x").tokens, (Words{b90, b80, b80, "x"}));  // U+50000, x
  // Without the regex split the word is "a\x04\x04b": a and b become neighbours and merge.
  nlohmann::json json = nlohmann::json::parse(tokenizer_to_json_string(tokenizer));
  json["pre_tokenizer"]["use_regex"] = false;
  EXPECT_EQ(tokenizer_from_json(json).encode("a\x04\x04" "b").tokens, (Words{"ab"}));
}

// RoBERTa's pipeline (make_roberta_tokenizer, what a vocab.json with <s> and </s> loads as): the
// <s> A </s></s> B </s> template with type ids 0, <mask> never split and taking the space before
// it, and a tokenizer.json that writes and reads back RobertaProcessing.
TEST(ByteLevelBpe, RobertaTemplateAndSpecials) {
  std::vector<std::string> tokens = {"<s>", "<pad>", "</s>", "<unk>", "<mask>"};
  for (int byte = 0; byte < 256; ++byte) tokens.push_back(byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
  tokens.push_back("ab");
  const Tokenizer tokenizer = make_roberta_tokenizer(Vocabulary::from_tokens(tokens), {{"a", "b"}});
  const uint32_t ab = 261, space = 5 + ' ';
  const Encoding single = tokenizer.encode("ab <mask>");
  EXPECT_EQ(single.ids, (std::vector<uint32_t>{0, ab, 4, 2}));
  const Encoding pair = tokenizer.encode_pair("ab", " ab");
  EXPECT_EQ(pair.ids, (std::vector<uint32_t>{0, ab, 2, 2, space, ab, 2}));
  EXPECT_EQ(pair.type_ids, std::vector<uint32_t>(7, 0));
  EXPECT_EQ(tokenizer.encode_pair("ab", "ab", false).type_ids, std::vector<uint32_t>(2, 0));
  const std::string json = tokenizer_to_json_string(tokenizer);
  EXPECT_NE(json.find("\"RobertaProcessing\""), std::string::npos);
  const Tokenizer back = tokenizer_from_json_string(json);
  EXPECT_EQ(back.encode_pair("ab", " ab").ids, pair.ids);
  EXPECT_EQ(tokenizer_to_json_string(back), json);
}

TEST(ByteLevelBpe, RoundTripsArbitraryBytes) {
  Tokenizer tokenizer = tiny_bpe();
  std::mt19937 random(1234);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 40);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int i = length(random); i > 0; --i) text.push_back(static_cast<char>(byte(random)));
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text).ids, false), text);
  }
  for (const std::string text : {"\xC3\x28", "\xE2\x82", "\xF0\x9F\x98", "\xED\xA0\x80", "abc\x80\xBF", "\xC0\xAF", "\xFF\xFE"}) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text).ids, false), text);
  }
}

TEST(ByteLevelBpe, OffsetsCoverWholeCharactersOfSplitBytes) {
  Tokenizer tokenizer = tiny_bpe();
  Encoding encoding = tokenizer.encode("a😀");
  // The emoji's four bytes are four tokens; each points at character 1.
  using Span = std::pair<uint32_t, uint32_t>;
  EXPECT_EQ(encoding.offsets, (std::vector<Span>{{0, 1}, {1, 2}, {1, 2}, {1, 2}, {1, 2}}));
}

}  // namespace
}  // namespace attnkit::text
