// text/token_windows: a text cut into fixed-length windows of token ids (analyze collapse --data).
#include "attnkit/text/token_windows.h"

#include "attnkit/text/pretrained.h"
#include "attnkit/text/vocabulary.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <sstream>

namespace {

using attnkit::testing::error_of;
using namespace attnkit::text;

// No [CLS]/[SEP] in the vocabulary, so a line's ids are its words': the 2, cat 3, sat 4, on 5, mat 6.
Tokenizer words() {
  return make_bert_tokenizer(Vocabulary::from_tokens({"[PAD]", "[UNK]", "the", "cat", "sat", "on", "mat"}));
}

TokenWindows windows_of(const std::string& text, int64_t length, int64_t max_windows) {
  std::istringstream in(text);
  return token_windows(in, words(), length, max_windows, "text.txt");
}

TEST(TokenWindows, ExactMultipleFillsEveryWindow) {
  const auto w = windows_of("the cat sat on\n\n  \nmat the cat sat\n", 4, 5);  // blank lines skipped
  EXPECT_EQ(w.count, 2);
  EXPECT_EQ(w.length, 4);
  EXPECT_EQ(w.ids, (std::vector<int64_t>{2, 3, 4, 5, 6, 2, 3, 4}));
}

TEST(TokenWindows, PartialLastWindowIsDroppedAndLinesJoin) {
  const auto w = windows_of("the cat sat\non mat the cat sat\non", 3, 10);  // 9 tokens
  EXPECT_EQ(w.count, 3);
  EXPECT_EQ(w.ids, (std::vector<int64_t>{2, 3, 4, 5, 6, 2, 3, 4, 5}));
  const auto cut = windows_of("the cat sat on mat", 2, 10);  // 5 tokens: the fifth is dropped
  EXPECT_EQ(cut.count, 2);
  EXPECT_EQ(cut.ids, (std::vector<int64_t>{2, 3, 4, 5}));
}

TEST(TokenWindows, StopsAtMaxWindows) {
  const auto w = windows_of("the cat\nsat on\nmat mat\n", 2, 2);
  EXPECT_EQ(w.count, 2);
  EXPECT_EQ(w.ids, (std::vector<int64_t>{2, 3, 4, 5}));
}

TEST(TokenWindows, TextShorterThanAWindowIsAnError) {
  EXPECT_EQ(error_of([] { windows_of("the cat sat\n", 4, 2); }),
            "text.txt: 3 tokens, fewer than one window of 4 tokens");
  EXPECT_EQ(error_of([] { windows_of("\n\n", 1, 2); }), "text.txt: 0 tokens, fewer than one window of 1 tokens");
  EXPECT_NE(error_of([] { windows_of("the cat", 0, 2); }).find("length >= 1"), std::string::npos);
  EXPECT_NE(error_of([] { windows_of("the cat", 1, 0); }).find("count >= 1"), std::string::npos);
}

TEST(TokenWindows, ReadsFilesAndNamesAMissingOne) {
  const auto dir = attnkit::testing::scratch_directory("text");
  const auto path = attnkit::testing::write_bytes(dir / "corpus.txt", "the cat sat on mat\n");
  const auto w = read_token_windows(path, words(), 5, 3);
  EXPECT_EQ(w.count, 1);
  EXPECT_EQ(w.ids, (std::vector<int64_t>{2, 3, 4, 5, 6}));
  const std::string missing = (dir / "missing.txt").string();
  EXPECT_EQ(error_of([&] { read_token_windows(missing, words(), 5, 3); }), missing + ": cannot open (No such file or directory)");
}

}  // namespace
