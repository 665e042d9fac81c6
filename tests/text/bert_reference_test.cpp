// WordPiece (BERT pipeline) against Hugging Face tokenizers, on vocabularies attnkit trains from
// the fortunes corpora (English, uncased and cased; classical Chinese): ids, token type ids,
// offsets, truncation strategies, padding and decoding. Both directions of tokenizer.json are
// checked: Hugging Face loads ours, and we load the one Hugging Face builds from our vocab.txt.
#include <gtest/gtest.h>

#include <map>

#include "attnkit/text/pretrained.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/trainer.h"
#include "reference_support.h"

namespace attnkit::text {
namespace {

using testing::fortune_lines;
using testing::fortune_path;

namespace fs = std::filesystem;

std::vector<std::string> english_corpus() {
  std::vector<std::string> texts = testing::varied_texts();
  for (const char* file : {"fortunes", "science", "linux", "literature", "computers"}) {
    for (auto& line : fortune_lines(file, 40, 5)) texts.push_back(std::move(line));
  }
  return texts;
}

std::vector<std::string> chinese_corpus() {
  std::vector<std::string> texts = testing::varied_texts();
  for (const char* file : {"chinese", "tang300", "song100"}) {
    for (auto& line : fortune_lines(file, 60, 3)) texts.push_back(std::move(line));
  }
  return texts;
}

std::vector<std::vector<std::string>> singles_and_pairs(const std::vector<std::string>& texts) {
  std::vector<std::vector<std::string>> inputs;
  for (size_t i = 0; i < texts.size(); ++i) {
    inputs.push_back({texts[i]});
    if (i % 3 == 0) inputs.push_back({texts[i], texts[(i * 7 + 1) % texts.size()]});
  }
  return inputs;
}

Encoding encode_input(const Tokenizer& tokenizer, const std::vector<std::string>& input, bool add_special_tokens = true) {
  return input.size() == 1 ? tokenizer.encode(input[0], add_special_tokens)
                           : tokenizer.encode_pair(input[0], input[1], add_special_tokens);
}

std::string describe(const std::vector<std::string>& input) {
  return input.size() == 1 ? input[0] : input[0] + " || " + input[1];
}

// Vocabularies are trained once per test process; each test saves them into its own directory.
class BertReference : public ::testing::Test {
 protected:
  static const Tokenizer& trained(const std::string& name) {
    static std::map<std::string, Tokenizer> cache;
    auto it = cache.find(name);
    if (it != cache.end()) return it->second;
    WordPieceTrainerOptions options;
    options.threads = 2;
    std::vector<std::string> files;
    if (name == "chinese") {
      options.vocab_size = 9000;
      files = {fortune_path("chinese"), fortune_path("tang300"), fortune_path("fortunes")};
    } else {
      options.vocab_size = 3000;
      options.lowercase = name == "uncased";
      files = {fortune_path("computers"), fortune_path("people"), fortune_path("literature"), fortune_path("linux")};
    }
    return cache.emplace(name, train_wordpiece(files, options)).first->second;
  }
  // Saves `tokenizer` into this test's directory DIR/NAME; returns DIR/NAME.
  static fs::path saved(const Tokenizer& tokenizer, const std::string& name) {
    const fs::path dir = testing::scratch_dir() / name;
    save_tokenizer(tokenizer, dir.string());
    return dir;
  }
  static fs::path saved_trained(const std::string& name) { return saved(trained(name), "trained_" + name); }

  // Encodes `inputs` with `tokenizer` and with Hugging Face loading `tokenizer_json`; compares.
  void expect_matches_reference(const Tokenizer& tokenizer, const fs::path& tokenizer_json,
                                const std::vector<std::vector<std::string>>& inputs, bool add_special_tokens = true) {
    const auto dir = testing::scratch_dir();
    nlohmann::json request{{"tokenizer", {{"file", tokenizer_json.string()}}},
                           {"inputs", testing::inputs_json(inputs)},
                           {"add_special_tokens", add_special_tokens}};
    nlohmann::json reference = testing::run_hf(request, dir);
    ASSERT_FALSE(reference.is_null());
    ASSERT_EQ(reference["encodings"].size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      testing::expect_same_encoding(encode_input(tokenizer, inputs[i], add_special_tokens), reference["encodings"][i],
                                    describe(inputs[i]));
    }
  }
};

TEST_F(BertReference, UncasedTrainedVocabularyMatchesHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  const Tokenizer& tokenizer = trained("uncased");
  expect_matches_reference(tokenizer, saved_trained("uncased") / "tokenizer.json", singles_and_pairs(english_corpus()));
}

TEST_F(BertReference, WithoutSpecialTokensMatchesHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  const Tokenizer& tokenizer = trained("uncased");
  expect_matches_reference(tokenizer, saved_trained("uncased") / "tokenizer.json", singles_and_pairs(testing::varied_texts()),
                           /*add_special_tokens=*/false);
}

TEST_F(BertReference, CasedTrainedVocabularyMatchesHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  const Tokenizer& tokenizer = trained("cased");
  expect_matches_reference(tokenizer, saved_trained("cased") / "tokenizer.json", singles_and_pairs(english_corpus()));
}

TEST_F(BertReference, ChineseCharacterVocabularyMatchesHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  const Tokenizer& tokenizer = trained("chinese");
  expect_matches_reference(tokenizer, saved_trained("chinese") / "tokenizer.json", singles_and_pairs(chinese_corpus()));
}

TEST_F(BertReference, LoadsTokenizerJsonThatHuggingFaceBuiltFromVocabTxt) {
  ATTNKIT_REQUIRE_REFERENCES();
  const auto dir = testing::scratch_dir();
  const auto inputs = singles_and_pairs(english_corpus());
  nlohmann::json request{
      {"tokenizer", {{"wordpiece", {{"vocab", (saved_trained("uncased") / "vocab.txt").string()}, {"lowercase", true}}}}},
      {"save", (dir / "hf_built.json").string()},
      {"inputs", testing::inputs_json(inputs)}};
  nlohmann::json reference = testing::run_hf(request, dir);
  ASSERT_FALSE(reference.is_null());
  Tokenizer from_hf_json = read_tokenizer_json((dir / "hf_built.json").string());
  Tokenizer from_vocab_txt = load_tokenizer((saved_trained("uncased") / "vocab.txt").string());
  for (size_t i = 0; i < inputs.size(); ++i) {
    testing::expect_same_encoding(encode_input(from_hf_json, inputs[i]), reference["encodings"][i], describe(inputs[i]));
    testing::expect_same_encoding(encode_input(from_vocab_txt, inputs[i]), reference["encodings"][i], describe(inputs[i]));
  }
}

// Truncation and padding are stored in tokenizer.json, so Hugging Face applies the same settings.
struct ShapeCase {
  std::string name;
  std::optional<TruncationOptions> truncation;
  std::optional<PaddingOptions> padding;
  int long_text = -1;  // -1: all pairs; 0 or 1: only pairs whose first/second text is the long one
};

TEST_F(BertReference, TruncationAndPaddingMatchHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  const Tokenizer& base = trained("uncased");
  const uint32_t pad_id = *base.token_to_id("[PAD]");
  auto truncation = [](size_t length, TruncationStrategy strategy, Side side = Side::kRight) {
    TruncationOptions options;
    options.max_length = length;
    options.strategy = strategy;
    options.direction = side;
    return options;
  };
  auto padding = [&](std::optional<size_t> length, Side side, size_t multiple) {
    PaddingOptions options;
    options.length = length;
    options.direction = side;
    options.pad_to_multiple_of = multiple;
    options.pad_id = pad_id;
    return options;
  };
  const std::vector<ShapeCase> cases = {
      {"longest_first_12", truncation(12, TruncationStrategy::kLongestFirst), std::nullopt},
      {"longest_first_7_left", truncation(7, TruncationStrategy::kLongestFirst, Side::kLeft), std::nullopt},
      {"longest_first_40", truncation(40, TruncationStrategy::kLongestFirst), std::nullopt},
      {"only_first_30", truncation(30, TruncationStrategy::kOnlyFirst), std::nullopt, 0},
      {"only_second_30", truncation(30, TruncationStrategy::kOnlySecond), std::nullopt, 1},
      {"fixed_pad_48_right", truncation(48, TruncationStrategy::kLongestFirst), padding(48, Side::kRight, 0)},
      {"fixed_pad_40_left_multiple_16", std::nullopt, padding(40, Side::kLeft, 16)},
  };
  // Pairs of a long and a short text (both orders) and of two long texts.
  const auto lines = fortune_lines("literature", 24, 3);
  std::vector<std::string> long_lines;
  for (size_t i = 0; i + 1 < lines.size(); i += 2) long_lines.push_back(lines[i] + " " + lines[i + 1] + " " + lines[i] + " " + lines[i + 1]);
  std::vector<std::vector<std::string>> long_first, long_second, both_long;
  for (size_t i = 0; i + 1 < long_lines.size(); ++i) {
    const std::string short_text = long_lines[i + 1].substr(0, 24);
    long_first.push_back({long_lines[i], short_text});
    long_second.push_back({short_text, long_lines[i]});
    both_long.push_back({long_lines[i], long_lines[i + 1]});
  }
  for (const auto& shape : cases) {
    SCOPED_TRACE(shape.name);
    std::vector<std::vector<std::string>> inputs = shape.long_text == 0 ? long_first : shape.long_text == 1 ? long_second : both_long;
    if (shape.long_text < 0) {
      inputs.insert(inputs.end(), long_first.begin(), long_first.end());
      inputs.insert(inputs.end(), long_second.begin(), long_second.end());
      inputs.push_back({long_lines[0]});
    }
    Tokenizer tokenizer = base;
    tokenizer.set_truncation(shape.truncation);
    tokenizer.set_padding(shape.padding);
    const fs::path dir = saved(tokenizer, "shape_" + shape.name);
    // The tokenizer.json written with these settings reads back with them.
    Tokenizer reloaded = read_tokenizer_json((dir / "tokenizer.json").string());
    ASSERT_EQ(reloaded.parts().truncation.has_value(), shape.truncation.has_value());
    ASSERT_EQ(reloaded.parts().padding.has_value(), shape.padding.has_value());
    expect_matches_reference(reloaded, dir / "tokenizer.json", inputs);
  }
}

TEST_F(BertReference, BatchPaddingToLongestMatchesHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  Tokenizer tokenizer = trained("uncased");
  PaddingOptions padding;
  padding.pad_id = *tokenizer.token_to_id("[PAD]");
  tokenizer.set_padding(padding);
  const fs::path dir = saved(tokenizer, "batch_longest");
  const auto texts = testing::varied_texts();
  std::vector<EncodeInput> batch;
  for (const auto& text : texts) batch.push_back({text, std::nullopt});
  const auto ours = tokenizer.encode_batch(batch, 2);
  const auto scratch = testing::scratch_dir();
  std::vector<std::vector<std::string>> singles;
  for (const auto& text : texts) singles.push_back({text});
  nlohmann::json request{{"tokenizer", {{"file", (dir / "tokenizer.json").string()}}},
                         {"inputs", testing::inputs_json(singles)},
                         {"batch", true}};
  nlohmann::json reference = testing::run_hf(request, scratch);
  ASSERT_FALSE(reference.is_null());
  for (size_t i = 0; i < texts.size(); ++i) testing::expect_same_encoding(ours[i], reference["encodings"][i], texts[i]);
}

TEST_F(BertReference, DecodeMatchesHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  const Tokenizer& tokenizer = trained("uncased");
  const auto texts = english_corpus();
  nlohmann::json id_lists = nlohmann::json::array();
  for (const auto& text : texts) id_lists.push_back(tokenizer.encode(text).ids);
  for (bool skip : {true, false}) {
    SCOPED_TRACE(skip ? "skip special tokens" : "keep special tokens");
    const auto dir = testing::scratch_dir();
    nlohmann::json request{{"tokenizer", {{"file", (saved_trained("uncased") / "tokenizer.json").string()}}},
                           {"decode", id_lists},
                           {"skip_special_tokens", skip}};
    nlohmann::json reference = testing::run_hf(request, dir);
    ASSERT_FALSE(reference.is_null());
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(tokenizer.decode(id_lists[i].get<std::vector<uint32_t>>(), skip), reference["decoded"][i].get<std::string>()) << texts[i];
    }
  }
}

}  // namespace
}  // namespace attnkit::text
