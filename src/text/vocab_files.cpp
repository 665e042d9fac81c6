#include "attnkit/text/vocab_files.h"

#include <cstdint>

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/text/unicode.h"
#include "text_file.h"
#include "vocabulary_json.h"

namespace attnkit::text {
namespace {

// A vocab.txt line without its trailing whitespace, as the reference loader reads it.
std::string trim_end(std::string_view line) {
  std::u32string chars = unicode::decode_utf8(line, unicode::InvalidUtf8::kReplace);
  while (!chars.empty() && unicode::is_whitespace(chars.back())) chars.pop_back();
  return unicode::encode_utf8(chars);
}

}  // namespace

Vocabulary read_vocab_txt(const std::string& path) {
  std::vector<std::pair<std::string, uint32_t>> entries;
  std::unordered_map<std::string, size_t> first_line;
  detail::for_each_line(path, [&](std::string_view line, size_t number) {
    std::string token = trim_end(line);
    auto [it, inserted] = first_line.emplace(token, number);
    if (!inserted) throw Error(fmt::format("{}:{}: token '{}' already appears on line {}", path, number, token, it->second));
    entries.emplace_back(std::move(token), static_cast<uint32_t>(number - 1));
  });
  if (entries.empty()) throw Error(fmt::format("{}: the vocabulary is empty", path));
  return Vocabulary::from_pairs(entries);
}

void write_vocab_txt(const Vocabulary& vocabulary, const std::string& path) {
  std::string content;
  uint32_t expected = 0;
  for (const auto& [token, id] : vocabulary.entries()) {
    if (id != expected) throw Error(fmt::format("{}: vocab.txt cannot hold a vocabulary without id {}", path, expected));
    if (token.find('\n') != std::string::npos) throw Error(fmt::format("{}: token {} contains a newline", path, id));
    content += token;
    content += '\n';
    ++expected;
  }
  detail::write_file(path, content);
}

Vocabulary read_vocab_json(const std::string& path) {
  const std::string content = read_file(path);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(content);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    throw Error(fmt::format("{}: malformed JSON: {}", path, e.what()));
  }
  if (!json.is_object()) throw Error(fmt::format("{}: expected a JSON object of token -> id", path));
  std::vector<std::pair<std::string, uint32_t>> entries;
  entries.reserve(json.size());
  for (const auto& [token, id] : json.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX)
      throw Error(fmt::format("{}: the id of '{}' is {}, not an integer in [0, 2^32)", path, token, id.dump()));
    entries.emplace_back(token, id.get<uint32_t>());
  }
  try {
    return Vocabulary::from_pairs(entries);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
}

void write_vocab_json(const Vocabulary& vocabulary, const std::string& path) {
  detail::write_file(path, detail::vocabulary_to_json(vocabulary).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict));
}

std::vector<Merge> read_merges_txt(const std::string& path, const Vocabulary& vocabulary) {
  std::vector<Merge> merges;
  detail::for_each_line(path, [&](std::string_view line, size_t number) {
    if (line.rfind("#version", 0) == 0) return;
    size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      throw Error(fmt::format("{}:{}: expected two tokens separated by one space, got '{}'", path, number, line));
    }
    Merge merge{std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
    if (auto reason = invalid_merge_reason(vocabulary, merge)) {
      throw Error(fmt::format("{}:{}: merge '{}': {}", path, number, line, *reason));
    }
    merges.push_back(std::move(merge));
  });
  return merges;
}

void write_merges_txt(const std::vector<Merge>& merges, const std::string& path) {
  std::string content = "#version: 0.2\n";
  for (const auto& merge : merges) {
    if (merge.left.find_first_of(" \n") != std::string::npos || merge.right.find_first_of(" \n") != std::string::npos) {
      throw Error(fmt::format("{}: merge '{}' + '{}' contains a space or newline, which merges.txt cannot hold", path,
                              merge.left, merge.right));
    }
    content += merge.left;
    content += ' ';
    content += merge.right;
    content += '\n';
  }
  detail::write_file(path, content);
}

}  // namespace attnkit::text
