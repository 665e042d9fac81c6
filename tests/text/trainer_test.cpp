// Vocabulary training: the trained vocabularies load in Hugging Face tokenizers and encode the
// same there; training is deterministic and honours the requested size.
#include <gtest/gtest.h>

#include <algorithm>

#include "attnkit/error.h"
#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/trainer.h"
#include "reference_support.h"

namespace attnkit::text {
namespace {

using testing::fortune_lines;
using testing::fortune_path;

std::vector<std::string> corpus() {
  std::vector<std::string> texts = testing::varied_texts();
  for (const char* file : {"fortunes", "tang300", "computers", "pratchett"}) {
    for (auto& line : fortune_lines(file, 50, 5)) texts.push_back(std::move(line));
  }
  return texts;
}

Tokenizer train_small_bpe(size_t vocab_size = 1500) {
  BpeTrainerOptions options;
  options.vocab_size = vocab_size;
  options.threads = 2;
  return train_byte_level_bpe({fortune_path("computers"), fortune_path("cookie"), fortune_path("tang300")}, options);
}

TEST(Trainer, ByteLevelBpeHasRequestedSizeAndIsDeterministic) {
  Tokenizer first = train_small_bpe();
  Tokenizer second = train_small_bpe();
  EXPECT_EQ(first.vocab_size(), 1500u);
  EXPECT_EQ(tokenizer_to_json_string(first), tokenizer_to_json_string(second));
  const auto& bpe = dynamic_cast<const ByteLevelBpe&>(*first.parts().model);
  EXPECT_EQ(bpe.merges().size(), 1500u - 256u - 1u);  // minus the bytes and <|endoftext|>
  EXPECT_EQ(first.token_to_id("<|endoftext|>"), 0u);
}

TEST(Trainer, ByteLevelBpeRoundTripsAndCompresses) {
  Tokenizer tokenizer = train_small_bpe();
  for (const auto& text : corpus()) EXPECT_EQ(tokenizer.decode(tokenizer.encode(text).ids, false), text);
  size_t bytes = 0;
  size_t tokens = 0;
  for (const auto& text : fortune_lines("computers", 200, 2)) {
    bytes += text.size();
    tokens += tokenizer.encode(text).size();
  }
  // 1244 merges learned on this corpus make English tokens span 2.5 bytes or more on average.
  EXPECT_GT(static_cast<double>(bytes) / static_cast<double>(tokens), 2.5);
}

TEST(Trainer, WordPieceKeepsAlphabetAndSpecialTokens) {
  WordPieceTrainerOptions options;
  options.vocab_size = 2000;
  options.threads = 2;
  Tokenizer tokenizer = train_wordpiece({fortune_path("computers"), fortune_path("cookie")}, options);
  EXPECT_EQ(tokenizer.vocab_size(), 2000u);
  for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) EXPECT_TRUE(tokenizer.token_to_id(special)) << special;
  // Every letter of the corpus is in the vocabulary, so plain English never needs [UNK].
  const uint32_t unk = *tokenizer.token_to_id("[UNK]");
  for (const auto& line : fortune_lines("computers", 100, 3)) {
    for (uint32_t id : tokenizer.encode(line).ids) EXPECT_NE(id, unk) << line;
  }
}

TEST(Trainer, RejectsTooSmallVocabularyAndMissingFiles) {
  BpeTrainerOptions bpe;
  bpe.vocab_size = 100;
  EXPECT_THROW(train_byte_level_bpe({fortune_path("fortunes")}, bpe), Error);
  WordPieceTrainerOptions wordpiece;
  EXPECT_THROW(train_wordpiece({"/nonexistent/corpus.txt"}, wordpiece), Error);
  wordpiece.special_tokens = {"[CLS]"};
  EXPECT_THROW(train_wordpiece({fortune_path("fortunes")}, wordpiece), Error);
}

TEST(TrainerReference, TrainedByteLevelBpeMatchesHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  const auto dir = testing::scratch_dir();
  Tokenizer tokenizer = train_small_bpe(3000);
  save_tokenizer(tokenizer, (dir / "bpe").string());
  const auto texts = corpus();
  std::vector<std::vector<std::string>> inputs;
  for (const auto& text : texts) inputs.push_back({text});
  for (const bool from_classic_files : {false, true}) {
    SCOPED_TRACE(from_classic_files ? "HF built from vocab.json + merges.txt" : "HF loading our tokenizer.json");
    nlohmann::json spec = from_classic_files
                              ? nlohmann::json{{"bpe", {{"vocab", (dir / "bpe" / "vocab.json").string()},
                                                        {"merges", (dir / "bpe" / "merges.txt").string()}}}}
                              : nlohmann::json{{"file", (dir / "bpe" / "tokenizer.json").string()}};
    nlohmann::json reference = testing::run_hf({{"tokenizer", spec}, {"inputs", testing::inputs_json(inputs)}}, dir);
    ASSERT_FALSE(reference.is_null());
    for (size_t i = 0; i < texts.size(); ++i) testing::expect_same_encoding(tokenizer.encode(texts[i]), reference["encodings"][i], texts[i]);
  }
}

}  // namespace
}  // namespace attnkit::text

namespace attnkit::text {
namespace {

TEST(UnigramTrainer, ReachesTheSizeIsDeterministicAndRoundTrips) {
  const auto dir = testing::scratch_dir();
  std::string corpus;
  for (const auto& line : testing::fortune_lines("computers", 1500)) corpus += line + "\n";
  testing::write_all(dir / "corpus.txt", corpus);
  UnigramTrainerOptions options;
  options.vocab_size = 600;
  const Tokenizer first = train_unigram({(dir / "corpus.txt").string()}, options);
  const Tokenizer second = train_unigram({(dir / "corpus.txt").string()}, options);
  EXPECT_EQ(first.vocab_size(), 600u);
  EXPECT_EQ(tokenizer_to_json_string(first), tokenizer_to_json_string(second));
  const Tokenizer loaded = tokenizer_from_json_string(tokenizer_to_json_string(first));
  for (const auto& line : testing::fortune_lines("computers", 200, 7)) {
    const Encoding encoding = loaded.encode(line, false);
    EXPECT_EQ(encoding.ids, first.encode(line, false).ids);
    // NFKC leaves printable ASCII alone, so the Metaspace decoder gives the line back.
    const bool ascii = std::all_of(line.begin(), line.end(), [](char c) { return c >= 0x20 && c < 0x7F; });
    if (ascii && line.find("  ") == std::string::npos && line.front() != ' ' && line.back() != ' ') {
      EXPECT_EQ(loaded.decode(encoding.ids), line);
    }
  }
  EXPECT_EQ(first.encode("[CLS]").ids.front(), *first.token_to_id("[CLS]"));
}

}  // namespace
}  // namespace attnkit::text
