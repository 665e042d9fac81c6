// Regression tests for inputs found by fuzzing the tokenizer files (fuzz/, docs/robustness.md):
// each once crashed, hung or exhausted memory; now each is one attnkit::Error line naming the file.
#include <gtest/gtest.h>

#include "attnkit/error.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/vocab_files.h"
#include "reference_support.h"
#include "support/test_files.h"

namespace attnkit::text {
namespace {

using attnkit::testing::error_of;

// An id of 2^32 - 1 made the table size wrap to 0 (a write out of bounds); a huge id allocated a
// table of billions of entries for one token.
TEST(Hardening, VocabJsonHugeIds) {
  const auto dir = testing::scratch_dir();
  const std::string path = (dir / "vocab.json").string();
  for (const std::string id : {"4294967295", "4000000000", "3000000"}) {
    testing::write_all(path, "{\"a\": 0, \"b\": " + id + "}");
    const std::string message = error_of([&] { read_vocab_json(path); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("too large"), std::string::npos) << message;
  }
  // Beyond uint32: no silent wrap to a small id.
  testing::write_all(path, R"({"a": 0, "b": 4294967297})");
  std::string message = error_of([&] { read_vocab_json(path); });
  EXPECT_NE(message.find("not an integer in [0, 2^32)"), std::string::npos) << message;
  // Gaps within the limit are fine (Hugging Face allows them).
  testing::write_all(path, R"({"a": 0, "b": 1000})");
  EXPECT_EQ(read_vocab_json(path).find("b"), 1000u);
}

TEST(Hardening, TokenizerJsonVocabIds) {
  const auto dir = testing::scratch_dir();
  const std::string path = (dir / "tokenizer.json").string();
  for (const std::string id : {"-1", "4294967295", "1.5", "4294967296"}) {
    testing::write_all(path, R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": )" + id + "}}}");
    const std::string message = error_of([&] { read_tokenizer_json(path); });
    EXPECT_NE(message.find(path), std::string::npos) << id << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// nlohmann's get<uint32_t>() converted 1e41 (undefined behaviour, UBSan: "outside the range of
// representable values"), -1 or 1.5 without a check: fuzz/regressions/tokenizer_json/crash-ad39....
TEST(Hardening, TokenizerJsonIntegersOutsideTheirRange) {
  const auto dir = testing::scratch_dir();
  const std::string path = (dir / "tokenizer.json").string();
  const std::string model =
      R"("pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1}})";
  for (const std::string bad : {"1e41", "-1", "1.5", "4294967296"}) {
    for (const std::string& rest :
         {R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "a", "type_id": )" + bad + "}}], \"pair\": [], \"special_tokens\": {}}",
          R"("post_processor": {"type": "BertProcessing", "cls": ["a", )" + bad + R"(], "sep": ["a", 1]})",
          R"("post_processor": {"type": "TemplateProcessing", "single": [], "pair": [], "special_tokens": {"a": {"ids": [)" + bad + R"(], "tokens": ["a"]}}})",
          R"("added_tokens": [{"id": )" + bad + R"(, "content": "a"}])"}) {
      testing::write_all(path, "{" + model + ", " + rest + "}");
      const std::string message = error_of([&] { read_tokenizer_json(path); });
      EXPECT_NE(message.find(path), std::string::npos) << rest << ": " << message;
      EXPECT_NE(message.find("expected an integer in [0, 4294967295]"), std::string::npos) << rest << ": " << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

// A duplicate vocabulary key kept only its last id, so the post-processor's [SEP] (id 3) was in
// neither the vocabulary nor the added tokens and encode's own output failed in decode:
// fuzz/regressions/tokenizer_json/crash-....
TEST(Hardening, TokenizerJsonPostProcessorIdsMustDecode) {
  const auto dir = testing::scratch_dir();
  const std::string path = (dir / "tokenizer.json").string();
  testing::write_all(path, R"({"pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]},
    "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "[CLS]": 2, "[SEP]": 3, "[SEP]": 4}}})");
  const std::string message = error_of([&] { read_tokenizer_json(path); });
  EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  EXPECT_NE(message.find("special token '[SEP]' has id 3"), std::string::npos) << message;
}

}  // namespace
}  // namespace attnkit::text
