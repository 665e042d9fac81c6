// `attnkit data corpus` (include/attnkit/data/corpus.h): Debian's fortunes as LM corpora.
#include "attnkit/data/corpus.h"

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/strings.h"
#include "attnkit/text/unicode.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace attnkit::data {
namespace {

namespace fs = std::filesystem;

// The files of Debian's `fortunes` and `fortunes-min` packages (English), and of `fortunes-zh`.
const std::vector<std::string>& english_fortune_files() {
  static const std::vector<std::string> files{
      "art",        "ascii-art", "computers",  "cookie",        "debian",      "definitions", "disclaimer",
      "drugs",      "education", "ethnic",     "food",          "fortunes",    "goedel",      "humorists",
      "kids",       "knghtbrd",  "law",        "linux",         "linuxcookie", "literature",  "love",
      "magic",      "medicine",  "men-women",  "miscellaneous", "news",        "paradoxum",   "people",
      "perl",       "pets",      "platitudes", "politics",      "pratchett",   "riddles",     "science",
      "songs-poems", "sports",   "startrek",   "tao",           "translate-me", "wisdom",     "work",
      "zippy"};
  return files;
}

std::string rtrim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}


}  // namespace

std::string strip_ansi_escapes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\x1b') {
      out += text[i];
      continue;
    }
    if (i + 1 >= text.size()) break;  // a lone ESC at the end
    if (text[i + 1] == '[') {
      // CSI: parameter bytes 0x30-0x3F, intermediate bytes 0x20-0x2F, one final byte 0x40-0x7E.
      size_t j = i + 2;
      while (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x20 &&
             static_cast<unsigned char>(text[j]) <= 0x3F)
        ++j;
      if (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x40 &&
          static_cast<unsigned char>(text[j]) <= 0x7E)
        i = j;  // the whole sequence
      else
        i = j - 1;  // unterminated: drop what was read
    } else if (static_cast<unsigned char>(text[i + 1]) >= 0x40 && static_cast<unsigned char>(text[i + 1]) <= 0x5F) {
      ++i;  // a two-character escape (ESC @ .. ESC _)
    }
    // any other byte after ESC stays (only the ESC goes)
  }
  return out;
}

std::vector<CorpusDocument> read_documents(const std::string& path, DocumentFormat format) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read: {}", one_line(path), std::strerror(errno)));
  std::vector<CorpusDocument> docs;
  std::vector<std::string> lines;
  auto flush = [&] {
    if (!lines.empty()) {
      std::string text;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) text += '\n';
        text += lines[i];
      }
      docs.push_back({path, std::move(text)});
    }
    lines.clear();
  };
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (text::unicode::find_invalid_utf8(line) != std::string::npos)
      throw Error(fmt::format("{}:{}: invalid UTF-8", one_line(path), number));
    line = rtrim(strip_ansi_escapes(line));
    const bool separator = format == DocumentFormat::kFortune ? line == "%" : line.empty();
    if (separator) {
      flush();
      continue;
    }
    if (!line.empty()) lines.push_back(line);  // blank lines only ever separate documents
  }
  if (in.bad()) throw Error(fmt::format("{}: read error", one_line(path)));
  flush();
  return docs;
}

std::vector<std::string> corpus_source_files(const std::string& source, const std::string& fortunes_dir) {
  auto named = [&](const std::vector<std::string>& names, const char* package) {
    std::vector<std::string> files;
    for (const auto& name : names) {
      const fs::path p = fs::path(fortunes_dir) / name;
      if (!fs::is_regular_file(p))
        throw Error(fmt::format("corpus source '{}': {} is missing (Debian package {}; scripts/setup.sh installs it)",
                                source, p.string(), package));
      files.push_back(p.string());
    }
    return files;
  };
  if (source == "fortunes") return named(english_fortune_files(), "fortunes");
  if (source == "fortunes-zh") return named({"chinese", "tang300", "song100"}, "fortunes-zh");
  if (source == "tang300" || source == "song100") return named({source}, "fortunes-zh");
  if (fs::is_regular_file(source)) return {source};
  throw Error(fmt::format("corpus source '{}' is not a file nor one of fortunes, fortunes-zh, tang300, song100",
                          one_line(source)));
}

bool in_validation_split(const std::string& text, double valid_fraction) {
  // The split has always started FNV-1a from 1469598103934665603 (FNV's offset basis with its last
  // digit missing); kept, so that every corpus keeps its split.
  return static_cast<double>(fnv1a64(text, 1469598103934665603ull) % 1000000ull) < valid_fraction * 1e6;
}

CorpusSummary write_corpus(const CorpusOptions& options, const std::string& out_dir) {
  if (!(options.valid_fraction >= 0.0 && options.valid_fraction < 1.0))
    throw Error(fmt::format("--valid-fraction {} is not in [0, 1)", options.valid_fraction));
  if (options.sources.empty()) throw Error("data corpus: no source (give names or files)");
  if (out_dir.empty()) throw Error("data corpus: --out is empty");
  CorpusSummary summary;
  std::vector<std::pair<std::string, DocumentFormat>> files;
  for (const auto& source : options.sources) {
    const bool is_named = !fs::is_regular_file(source);
    for (const auto& f : corpus_source_files(source, options.fortunes_dir))
      files.emplace_back(f, is_named ? DocumentFormat::kFortune : options.file_format);
  }
  std::string train, valid;
  for (const auto& [path, format] : files) {
    summary.files.push_back(path);
    for (const auto& doc : read_documents(path, format)) {
      const bool held_out = in_validation_split(doc.text, options.valid_fraction);
      std::string& into = held_out ? valid : train;
      if (!into.empty()) into += '\n';  // a blank line between documents
      into += doc.text;
      into += '\n';
      ++(held_out ? summary.valid_documents : summary.train_documents);
    }
  }
  if (summary.train_documents == 0)
    throw Error(fmt::format("data corpus: no documents for the training file (read {} file(s), {} held out)",
                            files.size(), summary.valid_documents));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the directory: {}", one_line(out_dir), ec.message()));
  summary.train_path = (fs::path(out_dir) / "train.txt").string();
  summary.valid_path = (fs::path(out_dir) / "valid.txt").string();
  summary.train_bytes = static_cast<int64_t>(train.size());
  summary.valid_bytes = static_cast<int64_t>(valid.size());
  io::write_file_atomically(summary.train_path, train);
  io::write_file_atomically(summary.valid_path, valid);
  return summary;
}

}  // namespace attnkit::data
