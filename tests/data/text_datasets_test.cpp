// Text data sets: the file layouts, label tables, errors with file and line (or question id),
// skip_bad_lines accounting, SQuAD character -> token mapping and LM block packing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "support/test_files.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/vocabulary.h"
#include "attnkit/data/text_datasets.h"

namespace attnkit::data {
namespace {

namespace fs = std::filesystem;

using attnkit::testing::error_of;

fs::path datasets_scratch_dir() { return attnkit::testing::scratch_directory("train_test_scratch"); }

std::string write_file(const fs::path& path, const std::string& content) {
  return attnkit::testing::write_bytes(path, content);
}

using Strings = std::vector<std::string>;

// ---------------------------------------------------------------------------------------------
TEST(ClassificationData, TsvWithInferredOrGivenLabels) {
  const fs::path dir = datasets_scratch_dir();
  const std::string path = write_file(dir / "train.tsv", "text\tlabel\ngreat movie\tpos\r\nawful\tneg\n\n  \nmeh\tneutral\n");
  DataReadOptions with_header;
  with_header.header = true;
  const ClassificationData data = read_classification(path, {}, with_header);
  EXPECT_EQ(data.labels, (Strings{"neg", "neutral", "pos"}));  // sorted
  ASSERT_EQ(data.examples.size(), 3u);
  EXPECT_EQ(data.examples[0].text, "great movie");
  EXPECT_EQ(data.examples[0].label, 2);
  EXPECT_EQ(data.examples[2].label, 1);
  EXPECT_EQ(data.stats.lines, 6u);
  EXPECT_EQ(data.stats.blank_lines, 2u);
  EXPECT_EQ(data.stats.examples, 3u);
  EXPECT_EQ(data.stats.skipped, 0u);

  // A given list fixes the ids; a label outside it is an error, or a counted skip.
  const Strings labels = {"pos", "neg"};
  EXPECT_EQ(error_of([&] { read_classification_tsv(path, labels, with_header); }),
            path + ":6: label 'neutral' is not in the label list (2 labels)");
  DataReadOptions skipping = with_header;
  skipping.skip_bad_lines = true;
  const ClassificationData kept = read_classification_tsv(path, labels, skipping);
  ASSERT_EQ(kept.examples.size(), 2u);
  EXPECT_EQ(kept.examples[0].label, 0);
  EXPECT_EQ(kept.examples[1].label, 1);
  EXPECT_EQ(kept.stats.skipped, 1u);
  ASSERT_EQ(kept.stats.skipped_messages.size(), 1u);
  EXPECT_EQ(kept.stats.skipped_messages[0], path + ":6: label 'neutral' is not in the label list (2 labels)");

  // Without header = true the header line is data with the label "label".
  EXPECT_EQ(read_classification_tsv(path).labels, (Strings{"label", "neg", "neutral", "pos"}));
  // Integer labels sort numerically.
  const std::string numbers = write_file(dir / "numbers.tsv", "a\t10\nb\t2\nc\t0\n");
  EXPECT_EQ(read_classification_tsv(numbers).labels, (Strings{"0", "2", "10"}));
}

TEST(ClassificationData, BadLinesNameFileAndLine) {
  const fs::path dir = datasets_scratch_dir();
  std::string path = write_file(dir / "bad.tsv", "fine\tpos\ntoo\tmany\tcolumns\n");
  EXPECT_EQ(error_of([&] { read_classification_tsv(path); }), path + ":2: expected 2 tab-separated columns, got 3");
  path = write_file(dir / "utf8.tsv", "fine\tpos\nfine\tpos\nbad \xff byte\tneg\n");
  EXPECT_EQ(error_of([&] { read_classification_tsv(path); }), path + ":3: invalid UTF-8 at byte 5 of the line");
  path = write_file(dir / "empty.tsv", "\tpos\n");
  EXPECT_EQ(error_of([&] { read_classification_tsv(path); }), path + ":1: empty text");
  EXPECT_NE(error_of([&] { read_classification_tsv((dir / "none.tsv").string()); }).find("none.tsv: cannot open"),
            std::string::npos);

  // skip_bad_lines keeps going and counts every bad line.
  path = write_file(dir / "mixed.tsv", "a\tx\nb\nc\ty\nd\t\te\n\xc3\tz\n");
  DataReadOptions skipping;
  skipping.skip_bad_lines = true;
  const ClassificationData data = read_classification_tsv(path, {}, skipping);
  EXPECT_EQ(data.examples.size(), 2u);
  EXPECT_EQ(data.stats.skipped, 3u);
  EXPECT_EQ(data.stats.lines, 5u);
  ASSERT_EQ(data.stats.skipped_messages.size(), 3u);
  EXPECT_EQ(data.stats.skipped_messages[0], path + ":2: expected 2 tab-separated columns, got 1");
  EXPECT_EQ(data.stats.skipped_messages[1], path + ":4: expected 2 tab-separated columns, got 3");
  EXPECT_EQ(data.stats.skipped_messages[2].rfind(path + ":5: invalid UTF-8", 0), 0u);
}

TEST(ClassificationData, Jsonl) {
  const fs::path dir = datasets_scratch_dir();
  std::string path = write_file(dir / "train.jsonl", "{\"text\": \"good\", \"label\": \"pos\"}\n\n{\"text\": \"bad\", \"label\": \"neg\"}\n");
  ClassificationData data = read_classification(path);
  EXPECT_EQ(data.labels, (Strings{"neg", "pos"}));
  ASSERT_EQ(data.examples.size(), 2u);
  EXPECT_EQ(data.examples[0].label, 1);
  EXPECT_EQ(data.stats.blank_lines, 1u);
  // Integer labels index a given list.
  path = write_file(dir / "ids.jsonl", "{\"text\": \"good\", \"label\": 1}\n{\"text\": \"bad\", \"label\": 0}\n");
  data = read_classification_jsonl(path, {"neg", "pos"});
  EXPECT_EQ(data.examples[0].label, 1);
  EXPECT_EQ(error_of([&] { read_classification_jsonl(path, {"only"}); }),
            path + ":1: label id 1 is outside the 1 names given");
  path = write_file(dir / "broken.jsonl", "{\"text\": \"good\", \"label\": 1}\n{\"text\": \"bad\", \"label\": }\n");
  EXPECT_EQ(error_of([&] { read_classification_jsonl(path); }).rfind(path + ":2: malformed JSON", 0), 0u);
  path = write_file(dir / "fields.jsonl", "{\"label\": 1}\n");
  EXPECT_EQ(error_of([&] { read_classification_jsonl(path); }), path + ":1: expected a string \"text\"");
}

// ---------------------------------------------------------------------------------------------
TEST(TaggingData, TsvAndJsonl) {
  const fs::path dir = datasets_scratch_dir();
  std::string path = write_file(dir / "ner.tsv", "John lives in Paris\tB-PER O O B-LOC\nMary\tB-PER\n");
  TaggingData data = read_tagging(path);
  EXPECT_EQ(data.tags, (Strings{"O", "B-LOC", "B-PER"}));  // "O" first, then sorted
  ASSERT_EQ(data.examples.size(), 2u);
  EXPECT_EQ(data.examples[0].tokens, (Strings{"John", "lives", "in", "Paris"}));
  EXPECT_EQ(data.examples[0].tags, (std::vector<int64_t>{2, 0, 0, 1}));
  EXPECT_EQ(tag_names(data.examples[0].tags, data.tags), (Strings{"B-PER", "O", "O", "B-LOC"}));
  EXPECT_THROW(tag_names({3}, data.tags), Error);

  path = write_file(dir / "short.tsv", "John lives\tB-PER\n");
  EXPECT_EQ(error_of([&] { read_tagging_tsv(path); }), path + ":1: 2 tokens but 1 tags");
  path = write_file(dir / "unknown.tsv", "John\tB-PER\nParis\tB-LOC\n");
  EXPECT_EQ(error_of([&] { read_tagging_tsv(path, {"O", "B-PER"}); }),
            path + ":2: token 1: tag 'B-LOC' is not in the tag list (2 tags)");

  path = write_file(dir / "ner.jsonl", "{\"tokens\": [\"EU\", \"rejects\"], \"tags\": [\"B-ORG\", \"O\"]}\n"
                                       "{\"tokens\": [\"Peter\"], \"tags\": [1]}\n");
  EXPECT_EQ(error_of([&] { read_tagging(path); }), "");  // integer tags named by their digits
  data = read_tagging_jsonl(path, {"O", "B-PER", "B-ORG"});
  ASSERT_EQ(data.examples.size(), 2u);
  EXPECT_EQ(data.examples[0].tags, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(data.examples[1].tags, (std::vector<int64_t>{1}));
  path = write_file(dir / "bad.jsonl", "{\"tokens\": [\"EU\"], \"tags\": [\"B-ORG\", \"O\"]}\n");
  EXPECT_EQ(error_of([&] { read_tagging_jsonl(path); }), path + ":1: 1 tokens but 2 tags");
}

TEST(Seq2SeqData, Tsv) {
  const fs::path dir = datasets_scratch_dir();
  std::string path = write_file(dir / "pairs.tsv", "hello\tbonjour\nthank you\tmerci\n");
  const Seq2SeqData data = read_seq2seq_tsv(path);
  ASSERT_EQ(data.examples.size(), 2u);
  EXPECT_EQ(data.examples[1].source, "thank you");
  EXPECT_EQ(data.examples[1].target, "merci");
  path = write_file(dir / "bad.tsv", "hello\tbonjour\nhello\t \n");
  EXPECT_EQ(error_of([&] { read_seq2seq_tsv(path); }), path + ":2: empty target");
}

// ---------------------------------------------------------------------------------------------
// Context characters (é is one character, two bytes):
//   Beyoncé sang at Super Bowl 50 in Santa Clara.
//   0      7    12 15    21   26 29 32    38    44 45
constexpr const char* kContext = "Beyonc\u00e9 sang at Super Bowl 50 in Santa Clara.";

std::string squad_json(const std::string& qas) {
  return std::string(R"({"version": "1.1", "data": [{"title": "SB50", "paragraphs": [{"context": ")") + kContext +
         R"(", "qas": [)" + qas + "]}]}]}";
}

const char* kGoodQuestions =
    R"({"id": "q-start", "question": "Who sang?", "answers": [{"text": "Beyonc\u00e9", "answer_start": 0}]},)"
    R"({"id": "q-end", "question": "Where?", "answers": [{"text": "Santa Clara.", "answer_start": 33}]},)"
    R"({"id": "q-middle", "question": "Which game?", "answers": [{"text": "Super Bowl 50", "answer_start": 16},)"
    R"( {"text": "Super Bowl", "answer_start": 16}]},)"
    R"({"id": "q-none", "question": "Who lost?", "answers": [], "is_impossible": true})";

text::Tokenizer squad_tokenizer() {
  return text::make_bert_tokenizer(text::Vocabulary::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "beyonce", "sang", "at", "super", "bowl", "50", "in", "santa", "clara",
       ".", "who", "where", "which", "game", "lost", "?"}));
}

TEST(SquadData, ReadsAndChecksAnswers) {
  const fs::path dir = datasets_scratch_dir();
  const std::string path = write_file(dir / "train.json", squad_json(kGoodQuestions));
  const SquadData data = read_squad_json(path);
  ASSERT_EQ(data.examples.size(), 4u);
  EXPECT_EQ(data.stats.lines, 4u);
  const SquadExample& start = data.examples[0];
  EXPECT_EQ(start.id, "q-start");
  EXPECT_EQ(start.title, "SB50");
  EXPECT_EQ(start.context, kContext);
  ASSERT_EQ(start.answers.size(), 1u);
  EXPECT_EQ(start.answers[0].start, 0u);
  EXPECT_EQ(start.answers[0].length, 7u);  // characters, not bytes
  EXPECT_EQ(data.examples[1].answers[0].start + data.examples[1].answers[0].length, 45u);  // the context's end
  EXPECT_EQ(data.examples[2].answers.size(), 2u);
  EXPECT_TRUE(data.examples[3].is_impossible);
  EXPECT_TRUE(data.examples[3].answers.empty());
}

TEST(SquadData, MisalignedAnswersNameFileAndQuestion) {
  const fs::path dir = datasets_scratch_dir();
  // 17 is the byte offset of "Super", not its character offset.
  std::string path = write_file(dir / "shifted.json", squad_json(
      R"({"id": "q-shifted", "question": "Which game?", "answers": [{"text": "Super Bowl 50", "answer_start": 17}]})"));
  EXPECT_EQ(error_of([&] { read_squad_json(path); }),
            path + ": question q-shifted: answer 1 \"Super Bowl 50\" does not match the context at characters "
                   "17..30, which reads \"uper Bowl 50 \"");
  path = write_file(dir / "past.json", squad_json(
      R"({"id": "q-past", "question": "Where?", "answers": [{"text": "Clara.", "answer_start": 40}]})"));
  EXPECT_EQ(error_of([&] { read_squad_json(path); }),
            path + ": question q-past: answer 1 \"Clara.\" at characters 40..46 runs past the end of the context "
                   "(45 characters)");
  path = write_file(dir / "missing.json", squad_json(R"({"id": "q-missing", "answers": []})"));
  EXPECT_EQ(error_of([&] { read_squad_json(path); }), path + ": question q-missing: missing \"question\"");
  path = write_file(dir / "noid.json", squad_json(R"({"question": "Who?"})"));
  EXPECT_EQ(error_of([&] { read_squad_json(path); }), path + ": data[0].paragraphs[0].qas[0]: missing \"id\"");
  path = write_file(dir / "broken.json", "{\"data\": [");
  EXPECT_EQ(error_of([&] { read_squad_json(path); }).rfind(path + ": malformed JSON", 0), 0u);

  // skip_bad_lines skips the bad question only, and counts it.
  path = write_file(dir / "mixed.json", squad_json(std::string(kGoodQuestions) + "," +
      R"({"id": "q-shifted", "question": "Which game?", "answers": [{"text": "Super Bowl 50", "answer_start": 17}]})"));
  DataReadOptions skipping;
  skipping.skip_bad_lines = true;
  const SquadData data = read_squad_json(path, skipping);
  EXPECT_EQ(data.examples.size(), 4u);
  EXPECT_EQ(data.stats.skipped, 1u);
  ASSERT_EQ(data.stats.skipped_messages.size(), 1u);
  EXPECT_NE(data.stats.skipped_messages[0].find("question q-shifted"), std::string::npos);
}

TEST(SquadData, CharacterOffsetsMapToTokens) {
  const fs::path dir = datasets_scratch_dir();
  const SquadData data = read_squad_json(write_file(dir / "train.json", squad_json(kGoodQuestions)));
  text::Tokenizer tokenizer = squad_tokenizer();
  // [CLS] where ? [SEP] beyonce sang at super bowl 50 in santa clara . [SEP]
  //   0     1   2   3     4      5   6    7    8   9 10   11    12  13  14
  const text::Encoding encoding = tokenizer.encode_pair("Where?", kContext);
  ASSERT_EQ(encoding.tokens.size(), 15u);
  ASSERT_EQ(encoding.tokens[4], "beyonce");
  EXPECT_EQ(char_span_to_token_span(encoding, 0, 7, 1), (TokenSpan{4, 4}));     // the very start
  EXPECT_EQ(char_span_to_token_span(encoding, 33, 45, 1), (TokenSpan{11, 13}));  // to the very end
  EXPECT_EQ(char_span_to_token_span(encoding, 16, 29, 1), (TokenSpan{7, 9}));
  EXPECT_EQ(char_span_to_token_span(encoding, 23, 26, 1), (TokenSpan{8, 8}));    // inside "Bowl"
  EXPECT_EQ(char_span_to_token_span(encoding, 7, 8, 1), std::nullopt);           // only a space
  EXPECT_EQ(char_span_to_token_span(encoding, 0, 7, 0), std::nullopt);           // the question has no such span
  EXPECT_EQ(char_span_to_token_span(encoding, 40, 50, 1), std::nullopt);         // past the text

  // Features: the first answer's tokens; [CLS] (0, 0) when unanswerable or truncated away.
  SquadFeature feature = make_squad_feature(tokenizer, data.examples[1]);
  EXPECT_TRUE(feature.has_answer);
  EXPECT_EQ(feature.start_position, 11u);
  EXPECT_EQ(feature.end_position, 13u);
  feature = make_squad_feature(tokenizer, data.examples[0]);
  EXPECT_EQ(feature.start_position, 5u);  // [CLS] who sang ? [SEP] beyonce: position 5
  EXPECT_EQ(feature.encoding.tokens[feature.start_position], "beyonce");
  EXPECT_FALSE(make_squad_feature(tokenizer, data.examples[3]).has_answer);

  text::TruncationOptions truncation;
  truncation.max_length = 10;  // [CLS] where ? [SEP] + 5 context tokens + [SEP]
  truncation.strategy = text::TruncationStrategy::kOnlySecond;
  tokenizer.set_truncation(truncation);
  feature = make_squad_feature(tokenizer, data.examples[1]);  // "Santa Clara." was cut off
  EXPECT_FALSE(feature.has_answer);
  EXPECT_EQ(feature.start_position, 0u);
  EXPECT_EQ(feature.end_position, 0u);
  EXPECT_TRUE(make_squad_feature(tokenizer, data.examples[0]).has_answer);
}

// ---------------------------------------------------------------------------------------------
TEST(LanguageModelData, PacksOverlappingBlocks) {
  const fs::path dir = datasets_scratch_dir();
  const text::Tokenizer tokenizer = text::make_bert_tokenizer(
      text::Vocabulary::from_tokens({"[PAD]", "[UNK]", "the", "cat", "sat", "on", "mat", ".", "[EOT]"}));
  const std::string first = write_file(dir / "a.txt", "the cat sat\non the mat.\n\n");
  const std::string second = write_file(dir / "b.txt", "the cat");
  // ids: the 2, cat 3, sat 4, on 5, mat 6, . 7 -> stream 2 3 4 5 2 6 7 | 2 3 (9 tokens)
  LanguageModelDataOptions options;
  options.block_size = 4;
  LanguageModelData data = read_language_model_data({first, second}, tokenizer, options);
  EXPECT_EQ(data.tokens, 9u);
  ASSERT_EQ(data.blocks.size(), 2u);  // (9 - 1) / 4
  EXPECT_EQ(data.blocks[0], (std::vector<int64_t>{2, 3, 4, 5, 2}));
  EXPECT_EQ(data.blocks[1], (std::vector<int64_t>{2, 6, 7, 2, 3}));  // starts where block 0 ended
  EXPECT_EQ(data.dropped_tokens, 0u);
  EXPECT_EQ(data.stats.lines, 4u);
  EXPECT_EQ(data.stats.blank_lines, 1u);

  options.end_of_text_id = 8;  // after each file: 2 3 4 5 2 6 7 8 2 3 8 (11 tokens)
  data = read_language_model_data({first, second}, tokenizer, options);
  EXPECT_EQ(data.tokens, 11u);
  ASSERT_EQ(data.blocks.size(), 2u);  // (11 - 1) / 4
  EXPECT_EQ(data.blocks[1], (std::vector<int64_t>{2, 6, 7, 8, 2}));
  EXPECT_EQ(data.dropped_tokens, 2u);  // "3 8" fill no block

  // A begin token before each block of 4 stream tokens: every token predicted once, the first of
  // each block from the begin token alone.
  options.end_of_text_id.reset();
  options.begin_of_window_id = 1;
  data = read_language_model_data({first, second}, tokenizer, options);  // 2 3 4 5 | 2 6 7 2 | 3
  ASSERT_EQ(data.blocks.size(), 2u);  // 9 / 4
  EXPECT_EQ(data.blocks[0], (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(data.blocks[1], (std::vector<int64_t>{1, 2, 6, 7, 2}));
  EXPECT_EQ(data.dropped_tokens, 1u);
  EXPECT_EQ(data.stats.examples, 2u);
  options.begin_of_window_id.reset();

  options.end_of_text_id = 8;
  options.block_size = 64;
  data = read_language_model_data({first}, tokenizer, options);
  EXPECT_TRUE(data.blocks.empty());
  EXPECT_EQ(data.dropped_tokens, data.tokens);

  const std::string bad = write_file(dir / "bad.txt", "the cat\nthe \xff mat\nsat\n");
  options.block_size = 2;
  options.end_of_text_id.reset();
  EXPECT_EQ(error_of([&] { read_language_model_data({bad}, tokenizer, options); }),
            bad + ":2: invalid UTF-8 at byte 5 of the line");
  options.skip_bad_lines = true;
  data = read_language_model_data({bad}, tokenizer, options);
  EXPECT_EQ(data.tokens, 3u);  // the cat sat
  EXPECT_EQ(data.stats.skipped, 1u);
  EXPECT_THROW(read_language_model_data({}, tokenizer, options), Error);
  options.block_size = 0;
  EXPECT_THROW(read_language_model_data({bad}, tokenizer, options), Error);
}

}  // namespace
}  // namespace attnkit::data
