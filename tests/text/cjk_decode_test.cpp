// Readable decoding (text/decoder.h TextStyle::kReadable): a WordPiece tokenizer's spaces around
// Chinese characters go ("春 风 。" -> "春风。"), the tokenizer's own (Hugging Face's) text stays
// available, and byte-level text is never changed.
#include <gtest/gtest.h>

#include "attnkit/text/byte_level.h"
#include "attnkit/text/decoder.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/text_stream.h"

namespace attnkit::text {
namespace {

TEST(CjkDecode, JoinCjkRemovesOnlySpacesNextToCjk) {
  EXPECT_EQ(join_cjk("春 风 。"), "春风。");
  EXPECT_EQ(join_cjk("《 春 意 落 空 》 作 者 ： 王 维"), "《春意落空》作者：王维");
  EXPECT_EQ(join_cjk("the cat sat"), "the cat sat");
  EXPECT_EQ(join_cjk("我 love 你"), "我love你");  // as bert4keras writes it
  EXPECT_EQ(join_cjk("ひ ら が な"), "ひらがな");
  EXPECT_EQ(join_cjk("한국 어"), "한국 어");  // Korean separates words by spaces: kept
  EXPECT_EQ(join_cjk(" 春 "), " 春 ");          // leading and trailing spaces are not between two characters
  EXPECT_EQ(join_cjk(""), "");
}

TEST(CjkDecode, WordPieceTokenizerDecodesReadableOrAsHuggingFace) {
  const auto vocab = Vocabulary::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "春", "风", "。", "the", "cat"});
  const Tokenizer tokenizer = make_bert_tokenizer(vocab);
  const auto ids = tokenizer.encode("春风。the cat").ids;
  ASSERT_EQ(ids.size(), 7u);  // [CLS] 春 风 。 the cat [SEP]
  EXPECT_EQ(tokenizer.decode(ids), "春 风 。 the cat");  // Hugging Face's BertTokenizer.decode
  EXPECT_EQ(tokenizer.decode(ids, true, TextStyle::kReadable), "春风。the cat");
  // Streaming gives the same readable text piece by piece.
  TextStream stream(tokenizer, TextStyle::kReadable);
  std::string joined;
  for (uint32_t id : ids) joined += stream.add(id);
  joined += stream.finish();
  EXPECT_EQ(joined, "春风。the cat");
}

TEST(CjkDecode, ByteLevelTextIsNeverChanged) {
  std::vector<std::string> tokens;
  for (int byte = 0; byte < 256; ++byte)
    tokens.push_back(byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
  const Tokenizer tokenizer = make_gpt2_tokenizer(Vocabulary::from_tokens(tokens), {});
  const std::string text = "春 风 。 spaced as written";
  const auto ids = tokenizer.encode(text, false).ids;
  EXPECT_EQ(tokenizer.decode(ids, true, TextStyle::kReadable), text);
}

}  // namespace
}  // namespace attnkit::text
