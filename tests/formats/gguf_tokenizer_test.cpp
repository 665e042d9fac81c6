// A GGUF file's tokenizer (include/attnkit/formats/gguf_tokenizer.h) on small files made byte by
// byte here: the tokenizer.json built for a byte-level BPE vocabulary, a SentencePiece-style one
// (merges derived from the scores) and Gemma's variant, the tokenizer it loads as, and the errors
// of missing or inconsistent metadata, each one attnkit::Error line naming the file and the key;
// then the files cut at every byte and with bytes changed, which must never crash. The comparison
// with transformers reading the same files (and the real SmolLM2 and Gemma 3 files) is
// tests/python/test_gguf_tokenizer_hf.py.
#include "attnkit/error.h"
#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_tokenizer.h"
#include "attnkit/text/byte_level.h"
#include "gguf_bytes.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace attnkit::formats {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::scratch_directory;
using testing::write_bytes;
using namespace gguf_bytes;

std::string strings(const std::vector<std::string>& values) {
  std::string payload;
  for (const std::string& v : values) payload += str(v);
  return array(GgufType::STRING, values.size(), payload);
}
std::string int32s(const std::vector<int32_t>& values) {
  std::string payload;
  for (int32_t v : values) payload += le(v);
  return array(GgufType::INT32, values.size(), payload);
}
std::string float32s(const std::vector<float>& values) { return array(GgufType::FLOAT32, values.size(), floats(values)); }
std::string string_kv(std::string_view key, std::string_view value) { return kv(key, GgufType::STRING, str(value)); }
std::string uint32_kv(std::string_view key, uint32_t value) { return kv(key, GgufType::UINT32, u32(value)); }
std::string bool_kv(std::string_view key, bool value) { return kv(key, GgufType::BOOL, u8(value ? 1 : 0)); }

// A byte-level BPE vocabulary (tokenizer.ggml.model "gpt2"): three control tokens, GPT-2's 256
// byte characters, the tokens of the merges of "hello world", a user-defined token, a control token
// outside the byte alphabet (left out) and "€" (written as its bytes' characters).
std::vector<std::string> byte_level_tokens() {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int byte = 0; byte < 256; ++byte) tokens.push_back(text::byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
  for (const char* token : {"he", "ll", "llo", "hello", "\xC4\xA0w", "or", "\xC4\xA0wor", "ld", "\xC4\xA0world", "<think>",
                            "<\xEF\xBD\x9C" "bos\xEF\xBD\x9C>" /* <｜bos｜> */, "\xE2\x82\xAC" /* € */})
    tokens.emplace_back(token);
  return tokens;
}
const std::vector<std::string> kByteLevelTokens = byte_level_tokens();
// Ids of the tokens above.
constexpr uint32_t kHello = 262, kSpaceWorld = 267, kThink = 268, kEuro = 270;
std::vector<int32_t> byte_level_types() {
  std::vector<int32_t> types(kByteLevelTokens.size(), 1);
  types[0] = types[1] = types[2] = types[269] = 3;
  types[kThink] = 4;
  return types;
}
const std::vector<std::string> kByteLevelMerges = {"h e",          "l l",  "ll o",
                                                   "he llo",       "\xC4\xA0 w", "o r",
                                                   "\xC4\xA0w or", "l d",  "\xC4\xA0wor ld"};

std::vector<std::string> byte_level_metadata(const std::string& pre = "smollm") {
  return {string_kv("general.architecture", "llama"),
          string_kv("tokenizer.ggml.model", "gpt2"),
          string_kv("tokenizer.ggml.pre", pre),
          kv("tokenizer.ggml.tokens", GgufType::ARRAY, strings(kByteLevelTokens)),
          kv("tokenizer.ggml.token_type", GgufType::ARRAY, int32s(byte_level_types())),
          kv("tokenizer.ggml.merges", GgufType::ARRAY, strings(kByteLevelMerges)),
          uint32_kv("tokenizer.ggml.bos_token_id", 1),
          uint32_kv("tokenizer.ggml.eos_token_id", 2),
          uint32_kv("tokenizer.ggml.unknown_token_id", 0),
          uint32_kv("tokenizer.ggml.padding_token_id", 2),
          bool_kv("tokenizer.ggml.add_bos_token", true),
          string_kv("tokenizer.chat_template", "{{ messages }}")};
}

// A SentencePiece-style vocabulary (tokenizer.ggml.model "llama") without merges: they come from
// the scores.
const std::vector<std::string> kSentencePieceTokens = {"<unk>", "<s>", "</s>", "<0x0A>", "\xE2\x96\x81" /* ▁ */,
                                                       "a", "b", "ab", "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab", "ba"};
const std::vector<float> kSentencePieceScores = {0, 0, 0, 0, -1, -2, -3, -4, -5, -6, -7};
const std::vector<int32_t> kSentencePieceTypes = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1};

std::vector<std::string> sentencepiece_metadata(const std::string& architecture = "llama") {
  return {string_kv("general.architecture", architecture),
          string_kv("tokenizer.ggml.model", "llama"),
          kv("tokenizer.ggml.tokens", GgufType::ARRAY, strings(kSentencePieceTokens)),
          kv("tokenizer.ggml.scores", GgufType::ARRAY, float32s(kSentencePieceScores)),
          kv("tokenizer.ggml.token_type", GgufType::ARRAY, int32s(kSentencePieceTypes)),
          uint32_kv("tokenizer.ggml.bos_token_id", 1),
          uint32_kv("tokenizer.ggml.eos_token_id", 2),
          uint32_kv("tokenizer.ggml.unknown_token_id", 0)};
}

std::string file_of(std::vector<std::string> metadata) {
  FileParts parts;
  parts.metadata = std::move(metadata);
  return gguf(parts);
}

std::string write_file(const std::string& name, const std::vector<std::string>& metadata) {
  return write_bytes(scratch_directory("formats") / name, file_of(metadata));
}

std::vector<uint32_t> ids_of(const text::Tokenizer& tokenizer, const std::string& text, bool special = true) {
  return tokenizer.encode(text, special).ids;
}

// ---- byte-level BPE -------------------------------------------------------------------------

TEST(GgufTokenizer, ByteLevelJson) {
  const std::string path = write_file("gpt2.gguf", byte_level_metadata());
  const json root = gguf_tokenizer_json(GgufFile::open(path));
  const json& model = root.at("model");
  EXPECT_EQ(model.at("type"), "BPE");
  EXPECT_EQ(model.at("vocab").size(), kByteLevelTokens.size());
  EXPECT_EQ(model.at("vocab").at("\xC4\xA0world"), kSpaceWorld);
  EXPECT_EQ(model.at("vocab").at(text::byte_level::bytes_to_token("\xE2\x82\xAC")), kEuro);  // € as its bytes
  EXPECT_FALSE(model.at("vocab").contains("\xE2\x82\xAC"));
  ASSERT_EQ(model.at("merges").size(), kByteLevelMerges.size());
  EXPECT_EQ(model.at("merges")[6], json::array({"\xC4\xA0w", "or"}));
  EXPECT_EQ(root.at("pre_tokenizer").at("type"), "ByteLevel");
  EXPECT_EQ(root.at("pre_tokenizer").at("use_regex"), true);
  EXPECT_EQ(root.at("decoder").at("type"), "ByteLevel");
  EXPECT_TRUE(root.at("normalizer").is_null());
  // Control tokens are special, the user-defined one is not; <｜bos｜> is not in the byte alphabet.
  std::vector<std::pair<std::string, bool>> added;
  for (const json& token : root.at("added_tokens")) {
    added.emplace_back(token.at("content"), token.at("special"));
    EXPECT_EQ(token.at("normalized"), false);
  }
  const std::vector<std::pair<std::string, bool>> expected = {
      {"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true}, {"<think>", false}};
  EXPECT_EQ(added, expected);
  const json& post = root.at("post_processor");
  EXPECT_EQ(post.at("type"), "TemplateProcessing");
  EXPECT_EQ(post.at("single")[0].at("SpecialToken").at("id"), "<|im_start|>");
  EXPECT_EQ(post.at("special_tokens").at("<|im_start|>").at("ids"), json::array({1}));
}

TEST(GgufTokenizer, ByteLevelEncodesAndDecodes) {
  const std::string path = write_file("gpt2.gguf", byte_level_metadata());
  const text::Tokenizer tokenizer = read_gguf_tokenizer(path);
  EXPECT_EQ(ids_of(tokenizer, "hello world"), (std::vector<uint32_t>{1, kHello, kSpaceWorld}));
  EXPECT_EQ(ids_of(tokenizer, "hello world", false), (std::vector<uint32_t>{kHello, kSpaceWorld}));
  EXPECT_EQ(ids_of(tokenizer, "hello<|im_end|><think> world", false),
            (std::vector<uint32_t>{kHello, 2, kThink, kSpaceWorld}));
  // "€" is a token, but no merge leads to it: its three bytes.
  EXPECT_EQ(ids_of(tokenizer, "\xE2\x82\xAC", false), (std::vector<uint32_t>{3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(tokenizer.decode({kEuro}), "\xE2\x82\xAC");
  EXPECT_EQ(tokenizer.decode({1, kHello, kSpaceWorld, 2}), "hello world");
  EXPECT_EQ(tokenizer.decode({1, kHello, kSpaceWorld, 2}, false), "<|im_start|>hello world<|im_end|>");
}

TEST(GgufTokenizer, SplitRuleOfThePreTokenizer) {
  const std::string path = write_file("llama3.gguf", byte_level_metadata("llama-bpe"));
  const json pre = gguf_tokenizer_json(GgufFile::open(path)).at("pre_tokenizer");
  ASSERT_EQ(pre.at("type"), "Sequence");
  EXPECT_EQ(pre.at("pretokenizers")[0].at("type"), "Split");
  EXPECT_EQ(pre.at("pretokenizers")[0].at("pattern").at("Regex").get<std::string>().rfind("(?i:'s|'t|'re|'ve|'m|'ll|'d)|", 0), 0u);
  EXPECT_EQ(pre.at("pretokenizers")[1].at("use_regex"), false);
  EXPECT_EQ(ids_of(read_gguf_tokenizer(path), "hello world", false), (std::vector<uint32_t>{kHello, kSpaceWorld}));
}

TEST(GgufTokenizer, TokenizerConfig) {
  const std::string path = write_file("gpt2.gguf", byte_level_metadata());
  const json config = gguf_tokenizer_config_json(GgufFile::open(path));
  EXPECT_EQ(config.at("bos_token"), "<|im_start|>");
  EXPECT_EQ(config.at("eos_token"), "<|im_end|>");
  EXPECT_EQ(config.at("unk_token"), "<|endoftext|>");
  EXPECT_EQ(config.at("pad_token"), "<|im_end|>");
  EXPECT_EQ(config.at("add_bos_token"), true);
  EXPECT_EQ(config.at("add_eos_token"), false);
  EXPECT_EQ(config.at("chat_template"), "{{ messages }}");
}

// ---- SentencePiece-style BPE ----------------------------------------------------------------

TEST(GgufTokenizer, SentencePieceMergesFromScores) {
  const std::string path = write_file("spm.gguf", sentencepiece_metadata());
  const json root = gguf_tokenizer_json(GgufFile::open(path));
  const std::string s = "\xE2\x96\x81";
  // Best score first; the two splits of "▁ab" (same score) longer left part first.
  const json expected = json::array({json::array({"a", "b"}), json::array({s, "a"}), json::array({s + "a", "b"}),
                                     json::array({s, "ab"}), json::array({"b", "a"})});
  EXPECT_EQ(root.at("model").at("merges"), expected);
  EXPECT_EQ(root.at("model").at("byte_fallback"), true);
  EXPECT_EQ(root.at("pre_tokenizer").at("type"), "Metaspace");
  EXPECT_EQ(root.at("pre_tokenizer").at("prepend_scheme"), "first");
  // No add_bos_token key: a SentencePiece vocabulary adds BOS.
  EXPECT_EQ(root.at("post_processor").at("single")[0].at("SpecialToken").at("id"), "<s>");

  const text::Tokenizer tokenizer = read_gguf_tokenizer(path);
  EXPECT_EQ(ids_of(tokenizer, "ab ab"), (std::vector<uint32_t>{1, 9, 9}));
  EXPECT_EQ(ids_of(tokenizer, "ba\n", false), (std::vector<uint32_t>{4, 10, 3}));
  EXPECT_EQ(tokenizer.decode({1, 9, 9, 3}), "ab ab\n");
}

TEST(GgufTokenizer, GemmaSpacesAndMergeOrder) {
  std::vector<std::string> metadata = {
      string_kv("general.architecture", "gemma3"), string_kv("tokenizer.ggml.model", "llama"),
      string_kv("tokenizer.ggml.pre", "default"),
      kv("tokenizer.ggml.tokens", GgufType::ARRAY,
         strings({"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "\xE2\x96\x81", "a", "  ", "\xE2\x96\x81" "a"})),
      kv("tokenizer.ggml.scores", GgufType::ARRAY, float32s({0, 0, 0, 0, 0, -5, -1, -2, -9})),
      kv("tokenizer.ggml.token_type", GgufType::ARRAY, int32s({3, 3, 3, 3, 3, 1, 1, 1, 1})),
      uint32_kv("tokenizer.ggml.bos_token_id", 2), uint32_kv("tokenizer.ggml.eos_token_id", 1),
      uint32_kv("tokenizer.ggml.unknown_token_id", 3), uint32_kv("tokenizer.ggml.padding_token_id", 0),
      bool_kv("tokenizer.ggml.add_bos_token", true)};
  const std::string path = write_file("gemma.gguf", metadata);
  const json root = gguf_tokenizer_json(GgufFile::open(path));
  const std::string s = "\xE2\x96\x81";
  EXPECT_EQ(root.at("model").at("vocab").at(s + s), 7);  // the file's "  "
  EXPECT_FALSE(root.at("model").at("vocab").contains("  "));
  // Merge order follows the file's order (▁▁ before ▁a), not the scores.
  EXPECT_EQ(root.at("model").at("merges"), json::array({json::array({s, s}), json::array({s, "a"})}));
  EXPECT_EQ(root.at("normalizer").at("type"), "Replace");
  EXPECT_EQ(root.at("pre_tokenizer").at("behavior"), "MergedWithPrevious");
  const text::Tokenizer tokenizer = read_gguf_tokenizer(path);
  EXPECT_EQ(ids_of(tokenizer, "a  a"), (std::vector<uint32_t>{2, 6, 7, 6}));
  EXPECT_EQ(tokenizer.decode({2, 6, 7, 6}), "a  a");
}

// ---- errors ---------------------------------------------------------------------------------

// Replaces the record of `key` (or appends it when `record` is set and the key is absent; removes
// it when `record` is empty).
std::vector<std::string> with(std::vector<std::string> metadata, const std::string& key, const std::string& record) {
  const std::string prefix = str(key);
  for (auto it = metadata.begin(); it != metadata.end(); ++it) {
    if (it->rfind(prefix, 0) == 0) {
      if (record.empty()) {
        metadata.erase(it);
      } else {
        *it = record;
      }
      return metadata;
    }
  }
  if (!record.empty()) metadata.push_back(record);
  return metadata;
}

void expect_error(const std::vector<std::string>& metadata, const std::string& part1, const std::string& part2 = "") {
  const std::string path = write_bytes(scratch_directory("formats") / "bad.gguf", file_of(metadata));
  const std::string message = error_of([&] { (void)read_gguf_tokenizer(path); });
  EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  EXPECT_NE(message.find(part1), std::string::npos) << message;
  EXPECT_NE(message.find(part2), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // The JSON alone fails the same way.
  const GgufFile file = GgufFile::open(path);
  EXPECT_EQ(error_of([&] { (void)gguf_tokenizer_json(file); }), message);
}

TEST(GgufTokenizerErrors, MissingOrUnknownModel) {
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.model", ""), "'tokenizer.ggml.model'");
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.model", string_kv("tokenizer.ggml.model", "t5")),
               "'tokenizer.ggml.model' is 't5'");
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.model", uint32_kv("tokenizer.ggml.model", 2)),
               "'tokenizer.ggml.model' is UINT32");
}

TEST(GgufTokenizerErrors, UnknownPreTokenizer) {
  expect_error(byte_level_metadata("mystery"), "'tokenizer.ggml.pre' is 'mystery'", "llama-bpe");
  expect_error(with(sentencepiece_metadata(), "tokenizer.ggml.pre", string_kv("tokenizer.ggml.pre", "llama-bpe")),
               "'tokenizer.ggml.pre' is 'llama-bpe'");
}

TEST(GgufTokenizerErrors, Tokens) {
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.tokens", ""), "'tokenizer.ggml.tokens'");
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.tokens", kv("tokenizer.ggml.tokens", GgufType::ARRAY, strings({}))),
               "'tokenizer.ggml.tokens' is an empty array");
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.tokens", kv("tokenizer.ggml.tokens", GgufType::ARRAY, int32s({1, 2}))),
               "'tokenizer.ggml.tokens'");
  std::vector<std::string> invalid = kSentencePieceTokens;
  invalid[5] = "a\xFF";
  expect_error(with(sentencepiece_metadata(), "tokenizer.ggml.tokens", kv("tokenizer.ggml.tokens", GgufType::ARRAY, strings(invalid))),
               "tokenizer.ggml.tokens[5]", "not valid UTF-8");
}

TEST(GgufTokenizerErrors, CountsDiffer) {
  expect_error(with(sentencepiece_metadata(), "tokenizer.ggml.scores",
                    kv("tokenizer.ggml.scores", GgufType::ARRAY, float32s({0, 1}))),
               "'tokenizer.ggml.scores' has 2 values for the 11 tokens");
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.token_type",
                    kv("tokenizer.ggml.token_type", GgufType::ARRAY, int32s({3}))),
               "'tokenizer.ggml.token_type' has 1 values for the 271 tokens");
  std::vector<float> nan_scores = kSentencePieceScores;
  nan_scores[4] = std::numeric_limits<float>::quiet_NaN();
  expect_error(with(sentencepiece_metadata(), "tokenizer.ggml.scores",
                    kv("tokenizer.ggml.scores", GgufType::ARRAY, float32s(nan_scores))),
               "tokenizer.ggml.scores[4] is NaN");
}

TEST(GgufTokenizerErrors, IdsOutOfRange) {
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.bos_token_id", uint32_kv("tokenizer.ggml.bos_token_id", 271)),
               "'tokenizer.ggml.bos_token_id' is 271, not the id of one of the 271 tokens");
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.padding_token_id",
                    kv("tokenizer.ggml.padding_token_id", GgufType::INT32, le<int32_t>(-1))),
               "'tokenizer.ggml.padding_token_id' is -1");
  expect_error(with(sentencepiece_metadata(), "tokenizer.ggml.eos_token_id", string_kv("tokenizer.ggml.eos_token_id", "2")),
               "'tokenizer.ggml.eos_token_id' is STRING");
}

TEST(GgufTokenizerErrors, Merges) {
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.merges",
                    kv("tokenizer.ggml.merges", GgufType::ARRAY, strings({"h e", "he"}))),
               "tokenizer.ggml.merges[1] ('he') is not two tokens separated by one space");
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.merges",
                    kv("tokenizer.ggml.merges", GgufType::ARRAY, strings({"h o"}))),
               "tokenizer.ggml.merges[0] ('h o'): 'ho' is not a token");
  // No merges: a byte-level file without scores has nothing to derive them from.
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.merges", ""), "neither 'tokenizer.ggml.merges' nor 'tokenizer.ggml.scores'");
  expect_error(with(sentencepiece_metadata(), "tokenizer.ggml.scores", ""), "neither 'tokenizer.ggml.merges' nor 'tokenizer.ggml.scores'");
}

TEST(GgufTokenizerErrors, FlagsAndTemplate) {
  expect_error(with(byte_level_metadata(), "tokenizer.ggml.add_bos_token", uint32_kv("tokenizer.ggml.add_bos_token", 1)),
               "'tokenizer.ggml.add_bos_token' is UINT32");
  expect_error(with(byte_level_metadata(), "tokenizer.chat_template", string_kv("tokenizer.chat_template", "{{ \xC3 }}")),
               "'tokenizer.chat_template' is not valid UTF-8");
}

// Every prefix of a valid file, and the file with bytes changed: an attnkit::Error or a tokenizer,
// never a crash (the fuzz target fuzz/gguf_fuzz.cpp does the same at random).
TEST(GgufTokenizerHostile, CutAndChangedFiles) {
  const fs::path dir = scratch_directory("formats");
  for (const std::vector<std::string>& metadata : {byte_level_metadata(), sentencepiece_metadata()}) {
    const std::string bytes = file_of(metadata);
    const auto attempt = [&](const std::string& candidate) {
      const std::string path = write_bytes(dir / "x.gguf", candidate);
      try {
        const text::Tokenizer tokenizer = read_gguf_tokenizer(path);
        (void)tokenizer.encode("hello world ab\n");
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      }
    };
    size_t metadata_end = 24;  // header, then the records (the padding after them may be cut)
    for (const std::string& record : metadata) metadata_end += record.size();
    // Every cut in the header and the first records, then every 7th byte.
    for (size_t size = 0; size < metadata_end; size += size < 256 ? 1 : 7) {
      const std::string path = write_bytes(dir / "x.gguf", bytes.substr(0, size));
      EXPECT_NE(error_of([&] { (void)read_gguf_tokenizer(path); }), "") << size;
    }
    for (size_t size = metadata_end; size <= bytes.size(); ++size) attempt(bytes.substr(0, size));
    std::mt19937 random(42);
    for (int trial = 0; trial < 200; ++trial) {
      std::string changed = bytes;
      for (int k = 0; k < 1 + trial % 3; ++k) changed[random() % changed.size()] = static_cast<char>(random() % 256);
      attempt(changed);
    }
  }
}

// A 4 MiB token: deriving merges looks up only splits into parts of lengths some token has, so
// this takes the token's length, not its square (~10^13 lookups).
TEST(GgufTokenizerHostile, OneHugeToken) {
  const std::string huge(size_t{1} << 22, 'a');
  const std::string path = write_file("huge.gguf", {string_kv("tokenizer.ggml.model", "llama"),
                                                    kv("tokenizer.ggml.tokens", GgufType::ARRAY, strings({"<unk>", "a", "aa", huge})),
                                                    kv("tokenizer.ggml.scores", GgufType::ARRAY, float32s({0, -1, -2, -3}))});
  const json merges = gguf_tokenizer_json(GgufFile::open(path)).at("model").at("merges");
  EXPECT_EQ(merges, json::array({json::array({"a", "a"})}));
}

}  // namespace
}  // namespace attnkit::formats
