#pragma once
// Text data sets for fine-tuning and language modelling, read from the usual file layouts:
//   classification  TSV "text<TAB>label"           JSONL {"text": "...", "label": "pos" | 3}
//   tagging         TSV "tok tok tok<TAB>TAG TAG TAG"  JSONL {"tokens": [...], "tags": [...]}
//   span extraction SQuAD JSON: data -> paragraphs -> {context, qas -> {id, question, answers
//                   [{text, answer_start}], is_impossible}}
//   seq2seq         TSV "source<TAB>target"
//   language model  plain text files, tokenized and packed into blocks of block_size + 1 tokens
// Lines end with "\n" or "\r\n" and must be UTF-8. Bad data throws attnkit::Error naming the
// file and line ("data.tsv:17: expected 2 tab-separated columns, got 3"), or for SQuAD the file
// and question id. With skip_bad_lines the reader skips such a line (a whole question for SQuAD)
// instead, counts it in the returned stats and keeps its first messages: nothing is dropped
// silently. Blank lines (only whitespace) are not data; they are counted, not errors. A file that
// cannot be opened is always an error.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/text/encoding.h"
#include "attnkit/text/tokenizer.h"

namespace attnkit::data {

struct DataReadOptions {
  bool skip_bad_lines = false;  // skip and count bad lines (SQuAD: questions) instead of throwing
  bool header = false;          // TSV only: the first line is a header, not data
};

struct DataReadStats {
  size_t lines = 0;        // lines looked at (SQuAD: questions), header and blank lines included
  size_t blank_lines = 0;  // whitespace-only lines, not data
  size_t examples = 0;     // examples kept
  size_t skipped = 0;      // bad lines (SQuAD: questions) skipped with skip_bad_lines
  std::vector<std::string> skipped_messages;  // the first 10 of them, "FILE:LINE: what is wrong"
};

// ---------------------------------------------------------------------------------------------
// Labels: `labels` fixes the id of each label (its position; any other label in the file is an
// error). Left empty, the ids follow the sorted distinct labels of the file (numeric order when
// all are integers; for tags "O" comes first) and the list is returned: pass it on when reading
// the validation and test files. A JSON integer label is an id into `labels` when one is given,
// otherwise the label named by its decimal digits.
struct ClassificationExample {
  std::string text;
  int64_t label = 0;
};
struct ClassificationData {
  std::vector<ClassificationExample> examples;
  std::vector<std::string> labels;  // id -> label
  DataReadStats stats;
};
ClassificationData read_classification_tsv(const std::string& path, const std::vector<std::string>& labels = {},
                                           const DataReadOptions& options = {});
ClassificationData read_classification_jsonl(const std::string& path, const std::vector<std::string>& labels = {},
                                             const DataReadOptions& options = {});
// By extension: .jsonl or .json as JSONL, anything else as TSV.
ClassificationData read_classification(const std::string& path, const std::vector<std::string>& labels = {},
                                       const DataReadOptions& options = {});

struct TaggingExample {
  std::vector<std::string> tokens;
  std::vector<int64_t> tags;  // one per token
};
struct TaggingData {
  std::vector<TaggingExample> examples;
  std::vector<std::string> tags;  // id -> tag
  DataReadStats stats;
};
// TSV tokens and tags are separated by single spaces (runs of whitespace count as one).
TaggingData read_tagging_tsv(const std::string& path, const std::vector<std::string>& tags = {},
                             const DataReadOptions& options = {});
TaggingData read_tagging_jsonl(const std::string& path, const std::vector<std::string>& tags = {},
                               const DataReadOptions& options = {});
TaggingData read_tagging(const std::string& path, const std::vector<std::string>& tags = {},
                         const DataReadOptions& options = {});
// Tag names of tag ids (for tagging_scores); Error for an id outside `tags`.
std::vector<std::string> tag_names(const std::vector<int64_t>& ids, const std::vector<std::string>& tags);

struct Seq2SeqExample {
  std::string source;
  std::string target;
};
struct Seq2SeqData {
  std::vector<Seq2SeqExample> examples;
  DataReadStats stats;
};
// Both columns must be non-empty.
Seq2SeqData read_seq2seq_tsv(const std::string& path, const DataReadOptions& options = {});

// ---------------------------------------------------------------------------------------------
// SQuAD. Character positions are Unicode code points (Python string indices), the unit of
// answer_start and of text::Encoding offsets.
struct SquadAnswer {
  std::string text;
  size_t start = 0;   // answer_start, in characters of the context
  size_t length = 0;  // characters of text
};
struct SquadExample {
  std::string id;
  std::string title;
  std::string question;
  std::string context;
  std::vector<SquadAnswer> answers;  // may be empty (unanswerable or unlabelled)
  bool is_impossible = false;        // SQuAD 2.0
};
struct SquadData {
  std::vector<SquadExample> examples;
  DataReadStats stats;  // lines/examples/skipped count questions
};
// Checks every answer: answer_start + its length must lie within the context and the context's
// characters there must equal the answer text, else Error "FILE: question ID: answer 1 ...".
// Structural problems (not JSON, missing or mistyped fields) name the JSON path, e.g.
// "FILE: data[0].paragraphs[3].qas[1]: missing \"id\"". With skip_bad_lines a bad question is
// skipped and counted; a malformed file, article or paragraph is still an error.
SquadData read_squad_json(const std::string& path, const DataReadOptions& options = {});

// Token positions [start, end] (both inclusive, as start/end logits index them) of the tokens of
// `encoding` with the given sequence id that cover characters [char_begin, char_end) of that
// sequence's text. nullopt when the span is empty or not inside the encoded part of the text
// (truncated away), as Hugging Face's run_qa labels it: the first such token must begin at or
// before char_begin and the last must end at or after char_end.
struct TokenSpan {
  size_t start = 0;
  size_t end = 0;
  bool operator==(const TokenSpan& other) const { return start == other.start && end == other.end; }
};
std::optional<TokenSpan> char_span_to_token_span(const text::Encoding& encoding, size_t char_begin, size_t char_end,
                                                 int32_t sequence_id);

// One model input for extractive QA: encode_pair(question, context) with the tokenizer's own
// truncation and padding; the labels are the first answer's token span, or (0, 0) (the [CLS]
// position) when there is no answer or it was truncated away.
struct SquadFeature {
  text::Encoding encoding;
  size_t start_position = 0;
  size_t end_position = 0;
  bool has_answer = false;  // false: labels point at position 0
};
SquadFeature make_squad_feature(const text::Tokenizer& tokenizer, const SquadExample& example);

// ---------------------------------------------------------------------------------------------
// Language modelling. Each file is read line by line (lines keep their "\n", so byte-level
// tokenizers see the newlines), every line is encoded without special tokens, and the ids of all
// files are concatenated, with end_of_text_id after each file when set. The stream t[0..N) is cut
// into blocks of block_size + 1 tokens that overlap by one: block i = t[i*B .. i*B + B], so with
// inputs = block[0..B) and targets = block[1..B] every token after the first is predicted once.
// The tail that fills no block is dropped and counted. Invalid UTF-8 is a bad line.
// With begin_of_window_id (a pretrained model whose tokenizer starts every text with a token, e.g.
// Gemma's and Llama 2's <bos>) each block is that id followed by the next block_size tokens of
// the stream, t[i*B .. i*B + B), so inputs = [bos, t[i*B], ...] and every token of the stream is
// still predicted once, the first of each block from the begin token alone.
struct LanguageModelDataOptions {
  size_t block_size = 128;
  std::optional<uint32_t> end_of_text_id;    // e.g. GPT-2's "<|endoftext|>"
  std::optional<uint32_t> begin_of_window_id;  // e.g. Gemma's "<bos>"
  bool skip_bad_lines = false;
  int threads = 1;  // encoding threads (0: all cores)
};
struct LanguageModelData {
  size_t block_size = 0;
  std::vector<std::vector<int64_t>> blocks;  // each block_size + 1 ids
  size_t tokens = 0;                         // N
  size_t dropped_tokens = 0;                 // tokens in no block
  DataReadStats stats;                       // over all files
};
// Throws attnkit::Error for block_size 0, no paths, or a file that cannot be read.
LanguageModelData read_language_model_data(const std::vector<std::string>& paths, const text::Tokenizer& tokenizer,
                                           const LanguageModelDataOptions& options = {});

}  // namespace attnkit::data
