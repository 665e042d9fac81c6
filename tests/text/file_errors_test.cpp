// Bad input files give one attnkit::Error line that names the file (and line) and the problem.
#include <gtest/gtest.h>

#include "attnkit/error.h"
#include "attnkit/text/byte_level.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/vocab_files.h"
#include "reference_support.h"
#include "support/test_files.h"

namespace attnkit::text {
namespace {

namespace fs = std::filesystem;

using attnkit::testing::error_of;

void write_byte_vocab(const fs::path& dir, const std::string& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) vocab[byte_level::bytes_to_token(std::string(1, static_cast<char>(byte)))] = byte;
  vocab["ab"] = 256;
  testing::write_all(dir / "vocab.json", vocab.dump());
  testing::write_all(dir / "merges.txt", merges);
}

TEST(FileErrors, MissingFileOrDirectory) {
  EXPECT_NE(error_of([] { load_tokenizer("/nonexistent/tokenizer.json"); }).find("/nonexistent/tokenizer.json"), std::string::npos);
  const auto dir = testing::scratch_dir();
  EXPECT_NE(error_of([&] { load_tokenizer(dir.string()); }).find("no tokenizer.json"), std::string::npos);
  testing::write_all(dir / "vocab.json", "{}");
  EXPECT_NE(error_of([&] { load_tokenizer((dir / "vocab.json").string()); }).find("merges.txt"), std::string::npos);
}

TEST(FileErrors, MalformedJson) {
  const auto dir = testing::scratch_dir();
  testing::write_all(dir / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  std::string message = error_of([&] { load_tokenizer((dir / "tokenizer.json").string()); });
  EXPECT_NE(message.find("tokenizer.json: malformed JSON"), std::string::npos) << message;
  testing::write_all(dir / "tokenizer.json", R"({"model": {"type": "WordLevel", "vocab": []}})");
  message = error_of([&] { load_tokenizer((dir / "tokenizer.json").string()); });
  EXPECT_NE(message.find("model type \"WordLevel\" is not supported"), std::string::npos) << message;
  testing::write_all(dir / "tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}},
      "pre_tokenizer": {"type": "BertPreTokenizer"}, "normalizer": {"type": "ByteLevel"}})");
  message = error_of([&] { load_tokenizer((dir / "tokenizer.json").string()); });
  EXPECT_NE(message.find("normalizer type \"ByteLevel\""), std::string::npos) << message;
  testing::write_all(dir / "tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": "zero"}}})");
  message = error_of([&] { load_tokenizer((dir / "tokenizer.json").string()); });
  EXPECT_NE(message.find("tokenizer.json: model.vocab: the id of '[UNK]' is \"zero\", not an integer"), std::string::npos)
      << message;
}

TEST(FileErrors, MergesReferringToUnknownTokens) {
  const auto dir = testing::scratch_dir();
  write_byte_vocab(dir, "#version: 0.2\na b\nab c\n");
  std::string message = error_of([&] { load_tokenizer(dir.string()); });
  EXPECT_NE(message.find("merges.txt:3"), std::string::npos) << message;
  EXPECT_NE(message.find("'abc' is not in the vocabulary"), std::string::npos) << message;
  write_byte_vocab(dir, "#version: 0.2\na b\nx\n");
  message = error_of([&] { load_tokenizer(dir.string()); });
  EXPECT_NE(message.find("merges.txt:3: expected two tokens"), std::string::npos) << message;
  write_byte_vocab(dir, "a b\n");
  EXPECT_EQ(load_tokenizer(dir.string()).encode("ab").tokens, std::vector<std::string>{"ab"});
}

TEST(FileErrors, InvalidUtf8AndDuplicatesInVocabTxt) {
  const auto dir = testing::scratch_dir();
  testing::write_all(dir / "vocab.txt", "[UNK]\nab\xFF\n");
  std::string message = error_of([&] { load_tokenizer((dir / "vocab.txt").string()); });
  EXPECT_NE(message.find("vocab.txt:2: invalid UTF-8"), std::string::npos) << message;
  testing::write_all(dir / "vocab.txt", "[UNK]\na\nb\na\n");
  message = error_of([&] { load_tokenizer((dir / "vocab.txt").string()); });
  EXPECT_NE(message.find("vocab.txt:4: token 'a' already appears on line 2"), std::string::npos) << message;
  testing::write_all(dir / "vocab.txt", "a\nb\n");
  message = error_of([&] { load_tokenizer((dir / "vocab.txt").string()); });
  EXPECT_NE(message.find("'[UNK]' is not in the vocabulary"), std::string::npos) << message;
}

TEST(FileErrors, TruncationThatCannotBeMet) {
  Tokenizer tokenizer = make_bert_tokenizer(Vocabulary::from_tokens({"[UNK]", "[CLS]", "[SEP]", "a"}));
  TruncationOptions options;
  options.max_length = 4;
  options.strategy = TruncationStrategy::kOnlySecond;
  tokenizer.set_truncation(options);
  EXPECT_NE(error_of([&] { tokenizer.encode("a a a"); }).find("only-second needs a pair"), std::string::npos);
  EXPECT_NE(error_of([&] { tokenizer.encode_pair("a a a", "a"); }).find("too few"), std::string::npos);
  // Longest-first cuts the longer text first: 4 + 2 tokens into 6 - 3 special = 3 -> 2 + 1.
  options.max_length = 6;
  options.strategy = TruncationStrategy::kLongestFirst;
  tokenizer.set_truncation(options);
  EXPECT_EQ(tokenizer.encode_pair("a a a a", "a a").tokens,
            (std::vector<std::string>{"[CLS]", "a", "a", "[SEP]", "a", "[SEP]"}));
  options.max_length = 1;
  tokenizer.set_truncation(options);
  EXPECT_NE(error_of([&] { tokenizer.encode("a"); }).find("shorter than the 2 special tokens"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::text
