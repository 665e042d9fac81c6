// SentencePiece-style BPE and the pre-tokenizer options the HF peer of the tests (tokenizers
// 0.15.2) cannot check: the unknown-token and byte-fallback rules on hand-made vocabularies (the
// expected ids and offsets are what tokenizers 0.15.2 gives for the same model), ignore_merges
// and Metaspace's split flag (options of tokenizers >= 0.19), and the decoders one by one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attnkit/text/bpe.h"
#include "attnkit/text/byte_level.h"
#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/decoder.h"
#include "attnkit/text/pre_tokenizer.h"
#include "attnkit/text/tokenizer.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/unicode.h"

namespace attnkit::text {
namespace {

using Offsets = std::vector<std::pair<uint32_t, uint32_t>>;

Tokenizer bpe_tokenizer(const nlohmann::json& model_options) {
  nlohmann::json model = {{"type", "BPE"},
                          {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}, {"<0xC3>", 4}, {"<0xA9>", 5}}},
                          {"merges", {"a b"}}};
  model.update(model_options);
  return tokenizer_from_json_string(nlohmann::json{{"pre_tokenizer", nullptr}, {"model", model}}.dump());
}

TEST(SentencePieceBpe, UnknownCharactersFuseOrNotAsHuggingFace) {
  const Tokenizer fused = bpe_tokenizer({{"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}});
  EXPECT_EQ(fused.encode("axyb").ids, (std::vector<uint32_t>{1, 0, 2}));
  EXPECT_EQ(fused.encode("axyb").offsets, (Offsets{{0, 1}, {1, 3}, {3, 4}}));
  // A character that falls back to bytes goes in before a pending unknown one (HF's order).
  EXPECT_EQ(fused.encode("x\u00e9").ids, (std::vector<uint32_t>{4, 5, 0}));
  EXPECT_EQ(fused.encode("x\u00e9").offsets, (Offsets{{0, 1}, {1, 2}, {1, 2}}));
  EXPECT_EQ(fused.encode("axx\u00e9b").ids, (std::vector<uint32_t>{1, 4, 5, 0, 2}));

  const Tokenizer apart = bpe_tokenizer({{"unk_token", "<unk>"}, {"fuse_unk", false}, {"byte_fallback", true}});
  EXPECT_EQ(apart.encode("axyb").ids, (std::vector<uint32_t>{1, 0, 0, 2}));
  EXPECT_EQ(apart.encode("axx\u00e9b").ids, (std::vector<uint32_t>{1, 0, 4, 5, 0, 2}));
  EXPECT_EQ(apart.encode("axx\u00e9b").offsets, (Offsets{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {3, 4}, {4, 5}}));

  // No unknown token: the characters are dropped, and their neighbours merge.
  const Tokenizer dropping = bpe_tokenizer({{"byte_fallback", true}});
  EXPECT_EQ(dropping.encode("axyb").ids, (std::vector<uint32_t>{3}));
  EXPECT_EQ(dropping.encode("axyb").offsets, (Offsets{{0, 2}}));
  EXPECT_FALSE(dropping.special_ids().unknown.has_value());
  EXPECT_EQ(fused.special_ids().unknown, std::optional<int64_t>(0));
}

TEST(SentencePieceBpe, IgnoreMergesTakesWholeVocabularyWords) {
  nlohmann::json model = {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"abc", 3}}}, {"merges", nlohmann::json::array()}};
  const nlohmann::json file = {{"pre_tokenizer", {{"type", "Metaspace"}, {"add_prefix_space", false}}}, {"model", model}};
  EXPECT_EQ(tokenizer_from_json_string(file.dump()).encode("abc").ids, (std::vector<uint32_t>{0, 1, 2}));
  model["ignore_merges"] = true;
  const nlohmann::json ignoring = {{"pre_tokenizer", file["pre_tokenizer"]}, {"model", model}};
  const Tokenizer tokenizer = tokenizer_from_json_string(ignoring.dump());
  EXPECT_EQ(tokenizer.encode("abc").ids, (std::vector<uint32_t>{3}));
  EXPECT_EQ(tokenizer.encode("abca").ids, (std::vector<uint32_t>{0, 1, 2, 0}));
  EXPECT_TRUE(nlohmann::json::parse(tokenizer_to_json_string(tokenizer)).at("model").at("ignore_merges").get<bool>());
}

std::vector<std::string> words_of(const PreTokenizer& pre_tokenizer, const std::u32string& text) {
  std::vector<std::string> out;
  for (const Word& word : pre_tokenize(pre_tokenizer, AlignedText::identity(text))) out.push_back(word.bytes);
  return out;
}

TEST(SentencePieceBpe, MetaspaceSplitFlag) {
  MetaspacePreTokenizer metaspace;
  EXPECT_EQ(words_of(metaspace, U"hi  there"), (std::vector<std::string>{"\u2581hi", "\u2581", "\u2581there"}));
  metaspace.split = false;
  EXPECT_EQ(words_of(metaspace, U"hi  there"), (std::vector<std::string>{"\u2581hi\u2581\u2581there"}));
  metaspace.prepend_scheme = "never";
  EXPECT_EQ(words_of(metaspace, U"hi there"), (std::vector<std::string>{"hi\u2581there"}));
  // Read from and written to tokenizer.json ("split" only when false, as 0.15 files have none).
  const nlohmann::json file = {{"pre_tokenizer", {{"type", "Metaspace"}, {"split", false}}},
                               {"model", {{"type", "BPE"}, {"vocab", {{"\u2581", 0}, {"a", 1}}}, {"merges", nlohmann::json::array()}}}};
  const Tokenizer tokenizer = tokenizer_from_json_string(file.dump());
  EXPECT_EQ(tokenizer.encode("a a").ids, (std::vector<uint32_t>{0, 1, 0, 1}));
  EXPECT_FALSE(nlohmann::json::parse(tokenizer_to_json_string(tokenizer)).at("pre_tokenizer").at("split").get<bool>());
}

// The expected words and texts below are what tokenizers 0.15.2 gives.
TEST(SentencePieceBpe, SplitBehavioursByHand) {
  auto words = [](SplitBehavior behavior, bool invert) {
    return words_of(make_split("-", false, behavior, invert), U"a-b--c-");
  };
  using Words = std::vector<std::string>;
  EXPECT_EQ(words(SplitBehavior::kRemoved, false), (Words{"a", "b", "c"}));
  EXPECT_EQ(words(SplitBehavior::kIsolated, false), (Words{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(words(SplitBehavior::kMergedWithPrevious, false), (Words{"a-", "b-", "-", "c-"}));
  EXPECT_EQ(words(SplitBehavior::kMergedWithNext, false), (Words{"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(words(SplitBehavior::kContiguous, false), (Words{"a", "-", "b", "--", "c", "-"}));
  EXPECT_EQ(words(SplitBehavior::kRemoved, true), (Words{"-", "-", "-", "-"}));
  EXPECT_EQ(words(SplitBehavior::kMergedWithPrevious, true), (Words{"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(words(SplitBehavior::kMergedWithNext, true), (Words{"a-", "b-", "-", "c-"}));
  // Digits: each numeric character alone, or runs of them.
  EXPECT_EQ(words_of(DigitsPreTokenizer{true}, U"ab12\u0663c"), (Words{"ab", "1", "2", "\u0663", "c"}));
  EXPECT_EQ(words_of(DigitsPreTokenizer{false}, U"ab12\u0663c"), (Words{"ab", "12\u0663", "c"}));
}

TEST(SentencePieceBpe, DecodersOneByOne) {
  using Tokens = std::vector<std::string>;
  EXPECT_EQ(decode_tokens(ByteFallbackDecoder{}, Tokens{"<0x68>", "<0x69>", "x", "<0xE4>", "<0xBD>", "<0xA0>"}), "hix\u4f60");
  // Bytes that are no UTF-8: one U+FFFD per byte token; a token that only looks like one stays.
  EXPECT_EQ(decode_tokens(ByteFallbackDecoder{}, Tokens{"<0xE4>", "<0xBD>", "y", "<0xZZ>", "<0x+A>"}), "\ufffd\ufffdy<0xZZ>\n");
  EXPECT_EQ(decode_tokens(StripDecoder{U'x', 2, 1}, Tokens{"xxxaxx", "ax", "xa"}), "xaxaa");
  EXPECT_EQ(decode_tokens(make_replace_decoder("\u2581", false, " "), Tokens{"\u2581a\u2581", "b"}), " a b");
  EXPECT_EQ(decode_tokens(make_replace_decoder("[0-9]+", true, "#"), Tokens{"a12b3", "4"}), "a#b##");
  const Decoder sequence = make_decoder_sequence({make_replace_decoder("\u2581", false, " "), ByteFallbackDecoder{}, FuseDecoder{},
                                                  StripDecoder{U' ', 1, 0}});
  EXPECT_EQ(decode_tokens(sequence, Tokens{"\u2581Hi", "<0x21>", "\u2581\u2581x"}), "Hi!  x");
}

// The parts put together in C++ as docs/tokenizers.md shows (what a GGUF reader would do).
TEST(SentencePieceBpe, PartsPutTogetherInCode) {
  std::vector<std::pair<std::string, uint32_t>> entries;
  for (uint32_t byte = 0; byte < 256; ++byte) entries.emplace_back(byte_level::bytes_to_token(std::string(1, char(byte))), byte);
  entries.emplace_back("he", 256);
  const std::vector<Merge> merges{{"h", "e"}};
  const std::string llama3_regex = "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}|\\s+(?!\\S)|\\s+";
  TokenizerParts parts;
  parts.model = std::make_shared<ByteLevelBpe>(Vocabulary::from_pairs(entries), merges);
  parts.pre_tokenizer = make_sequence({make_split(llama3_regex, /*regex=*/true, SplitBehavior::kIsolated, /*invert=*/false),
                                       ByteLevelPreTokenizer{/*add_prefix_space=*/false, /*use_regex=*/false}});
  parts.decoder = ByteLevelDecoder{};
  const Tokenizer llama3(std::move(parts));
  // "he" merged, "'s", " ", "123", "45" (digits in threes), each byte's token id being the byte.
  EXPECT_EQ(llama3.encode("he's 12345").ids, (std::vector<uint32_t>{256, '\'', 's', ' ', '1', '2', '3', '4', '5'}));
  EXPECT_EQ(llama3.decode(llama3.encode("he's 12345").ids), "he's 12345");

  std::vector<std::pair<std::string, uint32_t>> pieces{{"<unk>", 0}};
  for (uint32_t byte = 0; byte < 256; ++byte) pieces.emplace_back(fmt::format("<0x{:02X}>", byte), 1 + byte);
  for (const char* piece : {"\u2581", "h", "e", "he", "\u2581he"}) pieces.emplace_back(piece, static_cast<uint32_t>(pieces.size()));
  TokenizerParts sp;
  BpeOptions options;
  options.unk_token = "<unk>";
  options.fuse_unk = options.byte_fallback = true;
  sp.model = std::make_shared<Bpe>(Vocabulary::from_pairs(pieces), std::vector<Merge>{{"h", "e"}, {"\u2581", "he"}}, options);
  sp.normalizer = Normalizer({PrependNormalizer{"\u2581"}, make_replace(" ", false, "\u2581")}, /*is_sequence=*/true);
  sp.pre_tokenizer = NoPreTokenizer{};
  sp.decoder = make_decoder_sequence({make_replace_decoder("\u2581", false, " "), ByteFallbackDecoder{}, FuseDecoder{},
                                      StripDecoder{U' ', 1, 0}});
  const Tokenizer llama2(std::move(sp));
  // "▁he▁x": "▁he", "▁", and x (no piece) as its byte <0x78>.
  EXPECT_EQ(llama2.encode("he x").ids, (std::vector<uint32_t>{261, 257, 1 + 0x78}));
  EXPECT_EQ(llama2.decode(llama2.encode("he x").ids), "he x");
}

}  // namespace
}  // namespace attnkit::text
