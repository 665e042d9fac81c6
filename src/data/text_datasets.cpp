#include "attnkit/data/text_datasets.h"

#include "attnkit/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/parse.h"
#include "attnkit/text/unicode.h"

namespace attnkit::data {
namespace {

using nlohmann::json;
constexpr size_t kKeptMessages = 10;

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; });
}

// Throws, or with skip_bad_lines counts and remembers, one bad line (or question).
struct BadLines {
  const std::string& path;
  bool skip;
  DataReadStats& stats;

  void report(const std::string& message) {
    if (!skip) throw Error(message);
    ++stats.skipped;
    if (stats.skipped_messages.size() < kKeptMessages) stats.skipped_messages.push_back(message);
  }
  void line(size_t number, const std::string& problem) { report(fmt::format("{}:{}: {}", path, number, problem)); }
};

// Calls parse(line, number) for each data line; parse returns "" or what is wrong with the line.
// Handles the header, blank lines, invalid UTF-8, the line counts and bad lines.
template <typename Parse>
void for_each_data_line(const std::string& path, const DataReadOptions& options, DataReadStats& stats, Parse parse) {
  const std::string content = read_file(path);
  BadLines bad{path, options.skip_bad_lines, stats};
  for_each_line(content, [&](std::string_view line, size_t number) {
    ++stats.lines;
    if (number == 1 && options.header) return;
    if (const size_t at = text::unicode::find_invalid_utf8(line); at != std::string_view::npos) {
      bad.line(number, fmt::format("invalid UTF-8 at byte {} of the line", at + 1));
      return;
    }
    if (is_blank(line)) {
      ++stats.blank_lines;
      return;
    }
    const std::string problem = parse(line, number);
    if (!problem.empty()) bad.line(number, problem);
  });
}

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> columns;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    columns.push_back(line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) return columns;
    start = tab + 1;
  }
}

std::string column_count_problem(size_t expected, size_t got) {
  return fmt::format("expected {} tab-separated columns, got {}", expected, got);
}

std::vector<std::string> split_spaces(std::string_view text) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r')) ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t' && text[j] != '\r') ++j;
    if (j > i) words.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}


std::string quote_snippet(std::string_view text, size_t max_bytes = 40) {
  std::string escaped;
  for (const char c : text.substr(0, max_bytes)) escaped += c == '"' ? std::string("\\\"") : std::string(1, c);
  return "\"" + one_line(escaped) + (text.size() > max_bytes ? "..." : "") + "\"";
}

// A label as read: a name, or (a JSON integer when a label list is given) an id into that list.
struct RawLabel {
  std::string name;
  int64_t id = -1;
};

// Maps label names to ids: through the given list, or a list built from the names read.
class LabelTable {
 public:
  LabelTable(const std::vector<std::string>& given, bool tags) : given_(!given.empty()), tags_(tags), names_(given) {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (!ids_.emplace(names_[i], static_cast<int64_t>(i)).second) {
        throw Error(fmt::format("label list: '{}' appears twice", names_[i]));
      }
    }
  }
  bool given() const { return given_; }

  // "" or what is wrong with the label.
  std::string check(const RawLabel& label) const {
    if (label.id >= 0) return "";
    if (label.name.empty()) return "empty label";
    if (given_ && ids_.count(label.name) == 0) {
      return fmt::format("{} '{}' is not in the {} list ({} {})", tags_ ? "tag" : "label", label.name,
                         tags_ ? "tag" : "label", names_.size(), tags_ ? "tags" : "labels");
    }
    return "";
  }
  void note(const RawLabel& label) {
    if (!given_ && label.id < 0) seen_.insert(label.name);
  }
  // After every label was noted: build the list when none was given.
  void finish() {
    if (given_) return;
    names_.assign(seen_.begin(), seen_.end());
    const bool numeric =
        std::all_of(names_.begin(), names_.end(), [](const std::string& name) { return try_parse_int(name).has_value(); });
    if (numeric) {
      // By value; "1" and "01" are different labels of one value, ordered by their text.
      std::sort(names_.begin(), names_.end(), [](const std::string& a, const std::string& b) {
        const int64_t x = *try_parse_int(a), y = *try_parse_int(b);
        return x != y ? x < y : a < b;
      });
    }
    if (tags_) {
      auto o = std::find(names_.begin(), names_.end(), "O");
      if (o != names_.end()) std::rotate(names_.begin(), o, o + 1);
    }
    for (size_t i = 0; i < names_.size(); ++i) ids_[names_[i]] = static_cast<int64_t>(i);
  }
  int64_t id(const RawLabel& label) const { return label.id >= 0 ? label.id : ids_.at(label.name); }
  const std::vector<std::string>& names() const { return names_; }

 private:
  bool given_;
  bool tags_;
  std::vector<std::string> names_;
  std::map<std::string, int64_t> ids_;
  std::set<std::string> seen_;  // sorted
};

// A JSON label: a string names it; an integer is an id into the given list (or named by its digits).
std::string json_label(const json& value, const LabelTable& table, const char* what, RawLabel& out) {
  if (value.is_string()) {
    out.name = value.get<std::string>();
    return "";
  }
  if (value.is_number_integer()) {
    const int64_t id = value.get<int64_t>();
    if (!table.given()) {
      out.name = std::to_string(id);
      return "";
    }
    if (id < 0 || id >= static_cast<int64_t>(table.names().size())) {
      return fmt::format("{} id {} is outside the {} names given", what, id, table.names().size());
    }
    out.id = id;
    return "";
  }
  return fmt::format("{} must be a string or an integer, got {}", what, value.type_name());
}

std::string parse_json_object(std::string_view line, json& out) {
  try {
    out = json::parse(line);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    return fmt::format("malformed JSON ({})", e.what());
  }
  if (!out.is_object()) return fmt::format("expected a JSON object, got {}", out.type_name());
  return "";
}

bool is_jsonl_path(const std::string& path) { return ends_with(path, ".jsonl") || ends_with(path, ".json"); }

// ---- classification -------------------------------------------------------------------------

ClassificationData finish_classification(std::vector<std::pair<std::string, RawLabel>>& rows, LabelTable& table,
                                         DataReadStats stats) {
  table.finish();
  ClassificationData data;
  data.examples.reserve(rows.size());
  for (auto& [text, label] : rows) data.examples.push_back(ClassificationExample{std::move(text), table.id(label)});
  data.labels = table.names();
  data.stats = std::move(stats);
  data.stats.examples = data.examples.size();
  return data;
}

// ---- tagging --------------------------------------------------------------------------------

struct RawTagged {
  std::vector<std::string> tokens;
  std::vector<RawLabel> tags;
};

std::string check_tagged(const RawTagged& row, const LabelTable& table) {
  if (row.tokens.empty()) return "no tokens";
  if (row.tokens.size() != row.tags.size()) {
    return fmt::format("{} tokens but {} tags", row.tokens.size(), row.tags.size());
  }
  for (size_t i = 0; i < row.tags.size(); ++i) {
    if (std::string problem = table.check(row.tags[i]); !problem.empty()) return fmt::format("token {}: {}", i + 1, problem);
  }
  return "";
}

TaggingData finish_tagging(std::vector<RawTagged>& rows, LabelTable& table, DataReadStats stats) {
  table.finish();
  TaggingData data;
  data.examples.reserve(rows.size());
  for (RawTagged& row : rows) {
    TaggingExample example;
    example.tokens = std::move(row.tokens);
    example.tags.reserve(row.tags.size());
    for (const RawLabel& tag : row.tags) example.tags.push_back(table.id(tag));
    data.examples.push_back(std::move(example));
  }
  data.tags = table.names();
  data.stats = std::move(stats);
  data.stats.examples = data.examples.size();
  return data;
}

// ---- SQuAD ----------------------------------------------------------------------------------

const json& member(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) throw Error(fmt::format("{}: missing \"{}\"", where, key));
  return *it;
}

const json& array_member(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  if (!value.is_array()) throw Error(fmt::format("{}: \"{}\" must be an array, got {}", where, key, value.type_name()));
  return value;
}

std::string string_member(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  if (!value.is_string()) throw Error(fmt::format("{}: \"{}\" must be a string, got {}", where, key, value.type_name()));
  return value.get<std::string>();
}

// Reads one question; throws attnkit::Error with the message to report.
SquadExample read_question(const json& qa, const std::string& path, const std::string& where, const std::string& title,
                           const std::string& context, const std::u32string& context_chars) {
  if (!qa.is_object()) throw Error(fmt::format("{}: {}: expected an object, got {}", path, where, qa.type_name()));
  SquadExample example;
  example.title = title;
  example.context = context;
  const std::string located = path + ": " + where;
  const json& id = member(qa, "id", located);
  if (id.is_string()) {
    example.id = id.get<std::string>();
  } else if (id.is_number_integer()) {
    example.id = std::to_string(id.get<int64_t>());
  } else {
    throw Error(fmt::format("{}: \"id\" must be a string, got {}", located, id.type_name()));
  }
  const std::string question = path + ": question " + example.id;
  example.question = string_member(qa, "question", question);
  if (auto it = qa.find("is_impossible"); it != qa.end()) {
    if (!it->is_boolean()) throw Error(fmt::format("{}: \"is_impossible\" must be true or false", question));
    example.is_impossible = it->get<bool>();
  }
  if (qa.find("answers") == qa.end()) return example;
  const json& answers = array_member(qa, "answers", question);
  for (size_t a = 0; a < answers.size(); ++a) {
    const json& answer = answers[a];
    const std::string which = fmt::format("{}: answer {}", question, a + 1);
    if (!answer.is_object()) throw Error(fmt::format("{}: expected an object, got {}", which, answer.type_name()));
    SquadAnswer parsed;
    parsed.text = string_member(answer, "text", which);
    const json& start = member(answer, "answer_start", which);
    if (!start.is_number_integer() || start.get<int64_t>() < 0) {
      throw Error(fmt::format("{}: \"answer_start\" must be a non-negative integer, got {}", which, start.dump()));
    }
    parsed.start = static_cast<size_t>(start.get<int64_t>());
    const std::u32string answer_chars = text::unicode::decode_utf8(parsed.text, text::unicode::InvalidUtf8::kReplace);
    parsed.length = answer_chars.size();
    if (parsed.length == 0) throw Error(fmt::format("{}: empty answer text", which));
    if (parsed.start + parsed.length > context_chars.size()) {
      throw Error(fmt::format("{} {} at characters {}..{} runs past the end of the context ({} characters)", which,
                              quote_snippet(parsed.text), parsed.start, parsed.start + parsed.length, context_chars.size()));
    }
    const std::u32string_view there(context_chars.data() + parsed.start, parsed.length);
    if (there != answer_chars) {
      throw Error(fmt::format("{} {} does not match the context at characters {}..{}, which reads {}", which,
                              quote_snippet(parsed.text), parsed.start, parsed.start + parsed.length,
                              quote_snippet(text::unicode::encode_utf8(there))));
    }
    example.answers.push_back(std::move(parsed));
  }
  return example;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
ClassificationData read_classification_tsv(const std::string& path, const std::vector<std::string>& labels,
                                           const DataReadOptions& options) {
  LabelTable table(labels, /*tags=*/false);
  DataReadStats stats;
  std::vector<std::pair<std::string, RawLabel>> rows;
  for_each_data_line(path, options, stats, [&](std::string_view line, size_t) -> std::string {
    const auto columns = split_tabs(line);
    if (columns.size() != 2) return column_count_problem(2, columns.size());
    if (is_blank(columns[0])) return "empty text";
    RawLabel label{std::string(columns[1]), -1};
    if (std::string problem = table.check(label); !problem.empty()) return problem;
    table.note(label);
    rows.emplace_back(std::string(columns[0]), std::move(label));
    return "";
  });
  return finish_classification(rows, table, std::move(stats));
}

ClassificationData read_classification_jsonl(const std::string& path, const std::vector<std::string>& labels,
                                             const DataReadOptions& options) {
  LabelTable table(labels, /*tags=*/false);
  DataReadStats stats;
  std::vector<std::pair<std::string, RawLabel>> rows;
  DataReadOptions jsonl = options;
  jsonl.header = false;
  for_each_data_line(path, jsonl, stats, [&](std::string_view line, size_t) -> std::string {
    json object;
    if (std::string problem = parse_json_object(line, object); !problem.empty()) return problem;
    auto text = object.find("text");
    if (text == object.end() || !text->is_string()) return "expected a string \"text\"";
    auto label_value = object.find("label");
    if (label_value == object.end()) return "missing \"label\"";
    RawLabel label;
    if (std::string problem = json_label(*label_value, table, "label", label); !problem.empty()) return problem;
    if (std::string problem = table.check(label); !problem.empty()) return problem;
    std::string content = text->get<std::string>();
    if (is_blank(content)) return "empty text";
    table.note(label);
    rows.emplace_back(std::move(content), std::move(label));
    return "";
  });
  return finish_classification(rows, table, std::move(stats));
}

ClassificationData read_classification(const std::string& path, const std::vector<std::string>& labels,
                                       const DataReadOptions& options) {
  return is_jsonl_path(path) ? read_classification_jsonl(path, labels, options)
                             : read_classification_tsv(path, labels, options);
}

// ---------------------------------------------------------------------------------------------
TaggingData read_tagging_tsv(const std::string& path, const std::vector<std::string>& tags,
                             const DataReadOptions& options) {
  LabelTable table(tags, /*tags=*/true);
  DataReadStats stats;
  std::vector<RawTagged> rows;
  for_each_data_line(path, options, stats, [&](std::string_view line, size_t) -> std::string {
    const auto columns = split_tabs(line);
    if (columns.size() != 2) return column_count_problem(2, columns.size());
    RawTagged row;
    row.tokens = split_spaces(columns[0]);
    for (std::string& tag : split_spaces(columns[1])) row.tags.push_back(RawLabel{std::move(tag), -1});
    if (std::string problem = check_tagged(row, table); !problem.empty()) return problem;
    for (const RawLabel& tag : row.tags) table.note(tag);
    rows.push_back(std::move(row));
    return "";
  });
  return finish_tagging(rows, table, std::move(stats));
}

TaggingData read_tagging_jsonl(const std::string& path, const std::vector<std::string>& tags,
                               const DataReadOptions& options) {
  LabelTable table(tags, /*tags=*/true);
  DataReadStats stats;
  std::vector<RawTagged> rows;
  DataReadOptions jsonl = options;
  jsonl.header = false;
  for_each_data_line(path, jsonl, stats, [&](std::string_view line, size_t) -> std::string {
    json object;
    if (std::string problem = parse_json_object(line, object); !problem.empty()) return problem;
    auto tokens = object.find("tokens");
    auto tag_values = object.find("tags");
    if (tokens == object.end() || !tokens->is_array()) return "expected an array \"tokens\"";
    if (tag_values == object.end() || !tag_values->is_array()) return "expected an array \"tags\"";
    RawTagged row;
    for (size_t i = 0; i < tokens->size(); ++i) {
      const json& token = (*tokens)[i];
      if (!token.is_string()) return fmt::format("token {} must be a string, got {}", i + 1, token.type_name());
      row.tokens.push_back(token.get<std::string>());
    }
    for (size_t i = 0; i < tag_values->size(); ++i) {
      RawLabel tag;
      if (std::string problem = json_label((*tag_values)[i], table, "tag", tag); !problem.empty()) {
        return fmt::format("token {}: {}", i + 1, problem);
      }
      row.tags.push_back(std::move(tag));
    }
    if (std::string problem = check_tagged(row, table); !problem.empty()) return problem;
    for (const RawLabel& tag : row.tags) table.note(tag);
    rows.push_back(std::move(row));
    return "";
  });
  return finish_tagging(rows, table, std::move(stats));
}

TaggingData read_tagging(const std::string& path, const std::vector<std::string>& tags, const DataReadOptions& options) {
  return is_jsonl_path(path) ? read_tagging_jsonl(path, tags, options) : read_tagging_tsv(path, tags, options);
}

std::vector<std::string> tag_names(const std::vector<int64_t>& ids, const std::vector<std::string>& tags) {
  std::vector<std::string> names;
  names.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= static_cast<int64_t>(tags.size())) {
      throw Error(fmt::format("tag_names: tag id {} is outside the {} tags", id, tags.size()));
    }
    names.push_back(tags[static_cast<size_t>(id)]);
  }
  return names;
}

// ---------------------------------------------------------------------------------------------
Seq2SeqData read_seq2seq_tsv(const std::string& path, const DataReadOptions& options) {
  Seq2SeqData data;
  for_each_data_line(path, options, data.stats, [&](std::string_view line, size_t) -> std::string {
    const auto columns = split_tabs(line);
    if (columns.size() != 2) return column_count_problem(2, columns.size());
    if (is_blank(columns[0])) return "empty source";
    if (is_blank(columns[1])) return "empty target";
    data.examples.push_back(Seq2SeqExample{std::string(columns[0]), std::string(columns[1])});
    return "";
  });
  data.stats.examples = data.examples.size();
  return data;
}

// ---------------------------------------------------------------------------------------------
SquadData read_squad_json(const std::string& path, const DataReadOptions& options) {
  const std::string content = read_file(path);
  json root;
  try {
    root = json::parse(content);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    throw Error(fmt::format("{}: malformed JSON ({})", path, e.what()));
  }
  if (!root.is_object()) throw Error(fmt::format("{}: expected a JSON object with \"data\", got {}", path, root.type_name()));
  SquadData data;
  BadLines bad{path, options.skip_bad_lines, data.stats};
  const json& articles = array_member(root, "data", path);
  for (size_t a = 0; a < articles.size(); ++a) {
    const std::string article_at = fmt::format("{}: data[{}]", path, a);
    const json& article = articles[a];
    if (!article.is_object()) throw Error(fmt::format("{}: expected an object, got {}", article_at, article.type_name()));
    std::string title;
    if (auto it = article.find("title"); it != article.end() && it->is_string()) title = it->get<std::string>();
    const json& paragraphs = array_member(article, "paragraphs", article_at);
    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string paragraph_at = fmt::format("{}.paragraphs[{}]", article_at, p);
      const json& paragraph = paragraphs[p];
      if (!paragraph.is_object()) throw Error(fmt::format("{}: expected an object, got {}", paragraph_at, paragraph.type_name()));
      const std::string context = string_member(paragraph, "context", paragraph_at);
      const std::u32string context_chars = text::unicode::decode_utf8(context, text::unicode::InvalidUtf8::kReplace);
      const json& questions = array_member(paragraph, "qas", paragraph_at);
      for (size_t q = 0; q < questions.size(); ++q) {
        ++data.stats.lines;
        const std::string where = fmt::format("data[{}].paragraphs[{}].qas[{}]", a, p, q);
        try {
          data.examples.push_back(read_question(questions[q], path, where, title, context, context_chars));
        } catch (const Error& e) {
          bad.report(e.what());
        }
      }
    }
  }
  data.stats.examples = data.examples.size();
  return data;
}

std::optional<TokenSpan> char_span_to_token_span(const text::Encoding& encoding, size_t char_begin, size_t char_end,
                                                 int32_t sequence_id) {
  if (char_begin >= char_end) return std::nullopt;
  const size_t n = std::min(encoding.ids.size(), std::min(encoding.offsets.size(), encoding.sequence_ids.size()));
  std::optional<size_t> first, last, start, end;
  for (size_t i = 0; i < n; ++i) {
    if (encoding.sequence_ids[i] != sequence_id) continue;
    const auto [begin, finish] = encoding.offsets[i];
    if (begin == finish) continue;  // no characters (added inside the text)
    if (!first) first = i;
    last = i;
    if (!start && finish > char_begin) start = i;  // first token ending after the span begins
    if (begin < char_end) end = i;                  // last token beginning before the span ends
  }
  if (!first || encoding.offsets[*first].first > char_begin || encoding.offsets[*last].second < char_end) {
    return std::nullopt;
  }
  if (!start || !end || *start > *end) return std::nullopt;
  return TokenSpan{*start, *end};
}

SquadFeature make_squad_feature(const text::Tokenizer& tokenizer, const SquadExample& example) {
  SquadFeature feature;
  feature.encoding = tokenizer.encode_pair(example.question, example.context);
  if (!example.answers.empty()) {
    const SquadAnswer& answer = example.answers.front();
    if (auto span = char_span_to_token_span(feature.encoding, answer.start, answer.start + answer.length, 1)) {
      feature.start_position = span->start;
      feature.end_position = span->end;
      feature.has_answer = true;
    }
  }
  return feature;
}

// ---------------------------------------------------------------------------------------------
LanguageModelData read_language_model_data(const std::vector<std::string>& paths, const text::Tokenizer& tokenizer,
                                           const LanguageModelDataOptions& options) {
  if (options.block_size == 0) throw Error("language model data: block_size must be at least 1");
  if (paths.empty()) throw Error("language model data: no text files given");
  text::Tokenizer plain = tokenizer;  // whole lines: no truncation, no padding
  plain.set_truncation(std::nullopt);
  plain.set_padding(std::nullopt);

  LanguageModelData data;
  data.block_size = options.block_size;
  std::vector<int64_t> stream;
  constexpr size_t kChunkLines = 2048;
  std::vector<text::EncodeInput> chunk;
  auto flush = [&] {
    if (chunk.empty()) return;
    for (const text::Encoding& encoding : plain.encode_batch(chunk, options.threads, /*add_special_tokens=*/false)) {
      stream.insert(stream.end(), encoding.ids.begin(), encoding.ids.end());
    }
    chunk.clear();
  };
  for (const std::string& path : paths) {
    const std::string content = read_file(path);
    BadLines bad{path, options.skip_bad_lines, data.stats};
    size_t start = 0;
    size_t number = 0;
    while (start < content.size()) {
      size_t newline = content.find('\n', start);
      const size_t stop = newline == std::string::npos ? content.size() : newline + 1;
      const std::string_view line(content.data() + start, stop - start);
      start = stop;
      ++number;
      ++data.stats.lines;
      if (const size_t at = text::unicode::find_invalid_utf8(line); at != std::string_view::npos) {
        bad.line(number, fmt::format("invalid UTF-8 at byte {} of the line", at + 1));
        continue;
      }
      if (is_blank(line.substr(0, line.size() - (line.back() == '\n' ? 1 : 0)))) ++data.stats.blank_lines;
      chunk.push_back(text::EncodeInput{std::string(line), std::nullopt});
      if (chunk.size() == kChunkLines) flush();
    }
    flush();
    if (options.end_of_text_id) stream.push_back(*options.end_of_text_id);
  }
  const size_t block = options.block_size;
  data.tokens = stream.size();
  if (options.begin_of_window_id) {
    const size_t count = stream.size() / block;
    data.blocks.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      std::vector<int64_t> b{int64_t(*options.begin_of_window_id)};
      b.insert(b.end(), stream.begin() + static_cast<std::ptrdiff_t>(i * block),
               stream.begin() + static_cast<std::ptrdiff_t>(i * block + block));
      data.blocks.push_back(std::move(b));
    }
    data.dropped_tokens = stream.size() - count * block;
    data.stats.examples = count;
    return data;
  }
  const size_t count = stream.size() > 0 ? (stream.size() - 1) / block : 0;
  data.blocks.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    data.blocks.emplace_back(stream.begin() + static_cast<std::ptrdiff_t>(i * block),
                             stream.begin() + static_cast<std::ptrdiff_t>(i * block + block + 1));
  }
  data.dropped_tokens = count == 0 ? stream.size() : stream.size() - (count * block + 1);
  data.stats.examples = count;
  return data;
}

}  // namespace attnkit::data
