// Streaming a growing token sequence as text (text/text_stream.h): the pieces add up to the
// decoded text and never split a UTF-8 character, even when byte-level tokens do.
#include <gtest/gtest.h>

#include "attnkit/text/byte_level.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/text_stream.h"
#include "attnkit/text/unicode.h"

namespace attnkit::text {
namespace {

TEST(TextStream, CompleteUtf8Prefix) {
  EXPECT_EQ(complete_utf8_prefix(""), 0u);
  EXPECT_EQ(complete_utf8_prefix("ab"), 2u);
  EXPECT_EQ(complete_utf8_prefix("a\xC3"), 1u);              // é cut after its lead byte
  EXPECT_EQ(complete_utf8_prefix("a\xC3\xA9"), 3u);          // é whole
  EXPECT_EQ(complete_utf8_prefix("a\xE4\xB8"), 1u);          // 中 missing its last byte
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x98\x80"), 4u);   // 😀 whole
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x98"), 0u);
}

// One token per byte: every multi-byte character arrives split.
Tokenizer byte_tokenizer() {
  std::vector<std::string> tokens;
  for (int byte = 0; byte < 256; ++byte)
    tokens.push_back(byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
  return make_gpt2_tokenizer(Vocabulary::from_tokens(tokens), {});
}

TEST(TextStream, PiecesAddUpAndNeverSplitACharacter) {
  const auto tokenizer = byte_tokenizer();
  const std::string text = "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80!";
  const auto ids = tokenizer.encode(text, false).ids;
  ASSERT_EQ(ids.size(), text.size());
  TextStream stream(tokenizer);
  std::string joined;
  for (uint32_t id : ids) {
    const std::string piece = stream.add(id);
    EXPECT_EQ(unicode::find_invalid_utf8(piece), std::string::npos) << joined;
    joined += piece;
  }
  joined += stream.finish();
  EXPECT_EQ(joined, text);
  TextStream empty(tokenizer);
  EXPECT_EQ(empty.finish(), "");
}

}  // namespace
}  // namespace attnkit::text
