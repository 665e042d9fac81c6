// Chinese whole-word masking (task.word_list, train/pretraining.h): a BERT tokenizer splits CJK
// text into one token per character; the word list groups runs of them into words by greedy
// longest match, and masking selects and masks every character of a word together. Checked: a
// listed word is never masked in part over many batches, characters of no listed word stay single
// units, the longest listed word wins over its prefixes, the 80/10/10 split holds over word units
// within binomial bounds, "##" grouping still composes, and bad word lists are one-line errors.
#include "attnkit/error.h"
#include "attnkit/models/task_model.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/unicode.h"
#include "attnkit/train/pretraining.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "support/statistics.h"
#include "support/test_files.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::expect_binomial;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;
namespace fs = std::filesystem;
using Ids = std::vector<int64_t>;
using Units = std::vector<std::pair<size_t, size_t>>;


// [PAD] [UNK] [CLS] [SEP] [MASK] (0-4), then the characters 中 国 人 民 银 行 长 江 大 桥 我 们 (5-16),
// then "play", "##ing" (17, 18).
const char* const kCharacters[] = {"中", "国", "人", "民", "银", "行", "长", "江", "大", "桥", "我", "们"};

struct Fixture {
  fs::path dir;
  text::Tokenizer tokenizer;
  MaskingVocabulary vocabulary;
};

Fixture fixture(const std::string& area, const std::string& word_list) {
  const auto dir = scratch_directory(area);
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const char* c : kCharacters) vocab += std::string(c) + "\n";
  vocab += "play\n##ing\n";
  write_bytes(dir / "vocab.txt", vocab);
  write_bytes(dir / "words.txt", word_list);
  auto tokenizer = text::load_tokenizer((dir / "vocab.txt").string());
  auto vocabulary = masking_vocabulary(tokenizer);
  vocabulary.words = read_word_list((dir / "words.txt").string(), tokenizer);
  return {dir, std::move(tokenizer), std::move(vocabulary)};
}

Ids encode(const text::Tokenizer& tokenizer, const std::string& text) {
  const auto encoding = tokenizer.encode(text, false);
  return Ids(encoding.ids.begin(), encoding.ids.end());
}

// jieba's dict.txt format ("word freq tag"), with words the tokenizer cannot spell (dropped).
const char* const kWordList =
    "中国 1000 ns\n"
    "中国人 300 n\n"
    "中国人民银行 50 nt\n"
    "人民 900 n\n"
    "银行 800 n\n"
    "长江 500 ns\n"
    "长江大桥 40 ns\n"
    "大桥 100 n\n"
    "北京 900 ns\n"   // 北 and 京 are not tokens: dropped
    "B超 3 n\n"       // not all CJK: dropped
    "我 5000 r\n";    // one character: a unit anyway

TEST(ChineseWholeWord, TheTokenizerSplitsEveryCharacterAndTheListKeepsWhatCanMatch) {
  const auto f = fixture("cww_read", kWordList);
  EXPECT_EQ(encode(f.tokenizer, "中国人民银行"), (Ids{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(f.vocabulary.words.lines, 11u);
  EXPECT_EQ(f.vocabulary.words.words.size(), 8u);  // less 北京, B超, 我
  EXPECT_EQ(f.vocabulary.words.longest, 6u);
  EXPECT_EQ(static_cast<uint32_t>(f.vocabulary.character[5]), 0x4E2Du);  // 中
  EXPECT_EQ(f.vocabulary.character[4], 0) << "[MASK] is no character";
  EXPECT_EQ(f.vocabulary.character[17], 0) << "play is no character";
}

TEST(ChineseWholeWord, LongestMatchBeatsShorterPrefixes) {
  const auto f = fixture("cww_longest", kWordList);
  auto units_of = [&](const std::string& text) {
    const Ids ids = encode(f.tokenizer, text);
    Units units = masking_units(ids, f.vocabulary, true);
    std::vector<std::string> words;
    for (const auto& [first, last] : units) {
      std::string word;
      for (size_t i = first; i < last; ++i) word += *f.tokenizer.id_to_token(static_cast<uint32_t>(ids[i]));
      words.push_back(word);
    }
    return words;
  };
  using Words = std::vector<std::string>;
  // 中国人民银行 is listed: it beats 中国人, 中国 (its prefixes).
  EXPECT_EQ(units_of("中国人民银行"), (Words{"中国人民银行"}));
  // Without the full name: 中国人 (longest), then 民 alone (民银 is no word), then 银行.
  EXPECT_EQ(units_of("中国人民银"), (Words{"中国人", "民", "银"}));
  EXPECT_EQ(units_of("长江大桥我们"), (Words{"长江大桥", "我", "们"}));
  // Greedy, not optimal: 大桥 would be a word, but 长江 starts first and takes 江.
  EXPECT_EQ(units_of("长江桥"), (Words{"长江", "桥"}));
  // Characters of no listed word are single units. The ids carry no whitespace: "中 国" is the
  // run 中 国 as "中国" is; a special token or any other token ends a run.
  EXPECT_EQ(units_of("我们国人"), (Words{"我", "们", "国", "人"}));
  EXPECT_EQ(units_of("中 国"), (Words{"中国"}));
  // "##" pieces still join the token before them; latin tokens end a run of characters.
  EXPECT_EQ(units_of("中国playing银行"), (Words{"中国", "play##ing", "银行"}));
  const Ids ids{2, 5, 6, 3, 5, 6, 0};  // [CLS] 中 国 [SEP] 中 国 [PAD]
  EXPECT_EQ(masking_units(ids, f.vocabulary, true), (Units{{1, 3}, {4, 6}}));
  // Without whole_word every token is a unit, word list or not.
  EXPECT_EQ(masking_units(ids, f.vocabulary, false), (Units{{1, 2}, {2, 3}, {4, 5}, {5, 6}}));
  EXPECT_NE(error_of([&] { masking_units({5, 99}, f.vocabulary, true); }).find("outside the vocabulary"),
            std::string::npos);
}

// The word list a Debian user has: jieba's dict.txt (package python3-jieba; 349,046 lines of "word
// freq tag"). Skipped where the package is not installed. The expected cuts were worked out
// independently (greedy longest match over dict.txt in a few lines of Python): longest match is
// not jieba's own segmentation, e.g. 很难避免 becomes 很 / 难避 / 免 (jieba: 很难 / 避免).
TEST(ChineseWholeWord, JiebasDictionaryFromDebianSegmentsARealSentence) {
  const fs::path dict = "/usr/lib/python3/dist-packages/jieba/dict.txt";
  if (!fs::exists(dict)) GTEST_SKIP() << dict << " absent (Debian package python3-jieba)";
  const std::string text = "这种规模的项目中很难避免遇到与你意见不和，中华人民共和国成立了。";
  const auto dir = scratch_directory("cww_jieba");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  std::set<std::string> seen;
  for (const char32_t c : text::unicode::decode_utf8(text, text::unicode::InvalidUtf8::kReplace)) {
    std::string character;
    text::unicode::append_utf8(character, c);
    if (seen.insert(character).second) vocab += character + "\n";
  }
  write_bytes(dir / "vocab.txt", vocab);
  const auto tokenizer = text::load_tokenizer((dir / "vocab.txt").string());
  auto vocabulary = masking_vocabulary(tokenizer);
  vocabulary.words = read_word_list(dict.string(), tokenizer);
  EXPECT_EQ(vocabulary.words.lines, 349046u);
  const Ids ids = encode(tokenizer, text);
  std::string cut;
  for (const auto& [first, last] : masking_units(ids, vocabulary, true)) {
    if (!cut.empty()) cut += "/";
    for (size_t i = first; i < last; ++i) cut += *tokenizer.id_to_token(static_cast<uint32_t>(ids[i]));
  }
  EXPECT_EQ(cut, "这种/规模/的/项目/中/很/难避/免/遇到/与/你/意见/不/和/，/中华人民共和国/成立/了/。");
}

TEST(ChineseWholeWord, WordsAreMaskedWholeAndTheSplitHoldsOverWordUnits) {
  const auto f = fixture("cww_stats", kWordList);
  // Rows of random phrases; where each phrase lies, and whether it is one listed word.
  const std::vector<std::string> phrases{"中国人民银行", "中国", "人民", "银行", "长江大桥", "我", "们", "国",
                                         "桥", "play", "playing"};
  const std::vector<bool> listed{true, true, true, true, true, false, false, false, false, false, false};
  // Phrases that stand next to each other could merge into a longer listed word (中国 + 人 ...): a
  // [SEP] after each keeps them apart, as the sentence boundaries of real text do not, but here
  // every unit must be known in advance.
  std::mt19937 rng(7);
  MaskingOptions options;  // 15%, 80/10/10
  options.whole_word = true;
  int64_t words = 0, selected = 0, partial = 0, characters_selected = 0, masked = 0, random = 0, kept = 0;
  int64_t single_units = 0, single_selected = 0;
  for (uint64_t batch = 0; batch < 60; ++batch) {
    std::vector<Ids> rows(8);
    std::vector<std::vector<std::pair<size_t, size_t>>> spans(rows.size());
    std::vector<std::vector<bool>> is_word(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      rows[r].push_back(2);
      for (int k = 0; k < 24; ++k) {
        const size_t p = rng() % phrases.size();
        const Ids ids = encode(f.tokenizer, phrases[p]);
        spans[r].emplace_back(rows[r].size(), rows[r].size() + ids.size());
        is_word[r].push_back(listed[p]);
        rows[r].insert(rows[r].end(), ids.begin(), ids.end());
        rows[r].push_back(3);
      }
    }
    std::vector<const Ids*> pointers;
    for (const auto& r : rows) pointers.push_back(&r);
    const auto out = mask_tokens(pointers, f.vocabulary, options, 5, batch);
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t s = 0; s < spans[r].size(); ++s) {
        const auto [first, last] = spans[r][s];
        int64_t labelled = 0;
        for (size_t i = first; i < last; ++i) {
          if (out.labels[r][i] == models::kIgnoreLabel) {
            ASSERT_EQ(out.inputs[r][i], rows[r][i]);
            continue;
          }
          ASSERT_EQ(out.labels[r][i], rows[r][i]);
          ++labelled;
          ++characters_selected;
          if (out.inputs[r][i] == f.vocabulary.mask_id) ++masked;
          else if (out.inputs[r][i] != rows[r][i]) ++random;
          else ++kept;
        }
        if (is_word[r][s] || last - first == 1) {  // one unit: a listed word, a character, "play"
          ++words;
          selected += labelled > 0;
          partial += labelled > 0 && labelled < static_cast<int64_t>(last - first);
        }
        if (!is_word[r][s] && last - first == 1 && f.vocabulary.character[rows[r][first]]) {
          ++single_units;
          single_selected += labelled > 0;
        }
      }
  }
  EXPECT_EQ(partial, 0) << "a listed word was masked in part";
  ASSERT_GT(words, 10000);
  expect_binomial(selected, words, 0.15, "words selected");
  expect_binomial(single_selected, single_units, 0.15, "unlisted characters selected (one by one)");
  expect_binomial(masked, characters_selected, 0.8, "[MASK]");
  // A random draw equals the original 1 time in 14 ordinary tokens.
  expect_binomial(random, characters_selected, 0.1 * 13.0 / 14.0, "random");
  EXPECT_GT(kept, 0);
}

TEST(ChineseWholeWord, UnlistedCharactersAreMaskedOneByOne) {
  // 我们 is not listed: over many draws its two characters are selected independently (both, one
  // or neither), while the listed 银行 is always both or neither.
  const auto f = fixture("cww_unlisted", kWordList);
  const Ids row{2, 15, 16, 3, 9, 10, 3};  // [CLS] 我 们 [SEP] 银 行 [SEP]
  std::vector<Ids> rows(4000, row);
  std::vector<const Ids*> pointers;
  for (const auto& r : rows) pointers.push_back(&r);
  MaskingOptions options;
  options.probability = 0.5;
  options.whole_word = true;
  const auto out = mask_tokens(pointers, f.vocabulary, options, 3, 0);
  int64_t unlisted_split = 0, listed_split = 0;
  for (const auto& labels : out.labels) {
    unlisted_split += (labels[1] == models::kIgnoreLabel) != (labels[2] == models::kIgnoreLabel);
    listed_split += (labels[4] == models::kIgnoreLabel) != (labels[5] == models::kIgnoreLabel);
  }
  EXPECT_EQ(listed_split, 0);
  expect_binomial(unlisted_split, 4000, 0.5, "one of 我 们 selected");  // 2 p (1 - p) = 0.5
}

TEST(ChineseWholeWord, BadWordListsAreOneLineErrors) {
  const auto dir = scratch_directory("cww_errors");
  write_bytes(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n中\n国\nw\n");
  const auto tokenizer = text::load_tokenizer((dir / "vocab.txt").string());
  const auto read = [&](const fs::path& path) { read_word_list(path.string(), tokenizer); };
  EXPECT_EQ(error_of([&] { read(dir / "absent.txt"); }),
            fmt::format("task.word_list: {}: cannot read: No such file or directory", (dir / "absent.txt").string()));
  write_bytes(dir / "empty.txt", "\n  \n");
  EXPECT_EQ(error_of([&] { read(dir / "empty.txt"); }),
            fmt::format("task.word_list: {} lists no word (an empty file)", (dir / "empty.txt").string()));
  write_bytes(dir / "gbk.txt", "中国\n\xD6\xD0\xB9\xFA 3 ns\n");  // 中国 in GBK
  EXPECT_EQ(error_of([&] { read(dir / "gbk.txt"); }),
            fmt::format("task.word_list: {}:2: invalid UTF-8 (the word list must be UTF-8)", (dir / "gbk.txt").string()));
  write_bytes(dir / "useless.txt", "北京\nw\n中\n");
  EXPECT_EQ(error_of([&] { read(dir / "useless.txt"); }),
            fmt::format("task.word_list: none of the 3 words of {} is two or more CJK characters that the tokenizer "
                        "has as tokens", (dir / "useless.txt").string()));
  write_bytes(dir / "bom.txt", "\xEF\xBB\xBF中国\n");
  EXPECT_EQ(read_word_list((dir / "bom.txt").string(), tokenizer).words.size(), 1u);

  // Through the task: checked before the data is read (the data file need not exist), and a word
  // list implies whole-word masking even with a tokenizer that has no "##" pieces.
  RunConfig config;
  config.task.name = "mlm";
  config.task.data = (dir / "absent-data.txt").string();
  config.task.tokenizer = (dir / "vocab.txt").string();
  config.task.word_list = (dir / "empty.txt").string();
  EXPECT_EQ(error_of([&] { make_task(config); }),
            fmt::format("task.word_list: {} lists no word (an empty file)", (dir / "empty.txt").string()));
  config.task.word_list = (dir / "bom.txt").string();
  EXPECT_NE(error_of([&] { make_task(config); }).find("absent-data.txt"), std::string::npos)
      << "a good word list passes on to reading the data";
  config.task.word_list.clear();
  config.task.whole_word = true;
  EXPECT_EQ(error_of([&] { make_task(config); }),
            "task.whole_word: the tokenizer has no WordPiece \"##\" pieces to group into words");
}

TEST(ChineseWholeWord, AnMlmTaskWithAWordListTrainsAStep) {
  const auto dir = scratch_directory("cww_task");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const char* c : kCharacters) vocab += std::string(c) + "\n";
  write_bytes(dir / "vocab.txt", vocab);
  write_bytes(dir / "words.txt", kWordList);
  std::string text;
  for (int i = 0; i < 60; ++i) text += "中国人民银行长江大桥我们中国人\n";
  write_bytes(dir / "train.txt", text);
  RunConfig config;
  config.task.name = "mlm";
  config.task.data = (dir / "train.txt").string();
  config.task.tokenizer = (dir / "vocab.txt").string();
  config.task.word_list = (dir / "words.txt").string();
  config.task.batch_size = 4;
  config.task.truncate = 16;
  config.model.hidden = 16;
  config.model.layers = 1;
  config.model.heads = 2;
  config.trainer.quiet = true;
  auto task = make_task(config);
  const auto loss = task->train_loss(0, 0, 1);
  EXPECT_TRUE(std::isfinite(loss.loss.item<double>()));
  EXPECT_GT(loss.tokens, 0);
}

}  // namespace
}  // namespace attnkit::train
