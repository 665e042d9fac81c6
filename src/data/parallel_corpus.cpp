#include "attnkit/data/parallel_corpus.h"

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/process.h"
#include "attnkit/text/unicode.h"
#include "attnkit/data/text_datasets.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace attnkit::data {
namespace {

constexpr char kNoteGap = '\x01';  // where a note was: a space, or nothing before punctuation

struct Tag {
  std::string name;
  bool closing = false;
  bool self_closing = false;
  bool canonical = false;  // canonical="true"
  bool book_end = false;   // <div eID="..." type="book"/>
};

Tag parse_tag(std::string_view inside) {  // the text between '<' and '>'
  Tag tag;
  size_t i = 0;
  if (!inside.empty() && inside[0] == '/') {
    tag.closing = true;
    i = 1;
  }
  size_t end = i;
  while (end < inside.size() && inside[end] != ' ' && inside[end] != '/' && inside[end] != '\t' &&
         inside[end] != '\n')
    ++end;
  tag.name = std::string(inside.substr(i, end - i));
  tag.self_closing = !inside.empty() && inside.back() == '/';
  tag.canonical = inside.find("canonical=\"true\"") != std::string_view::npos;
  tag.book_end = inside.find(" eID=") != std::string_view::npos &&
                 inside.find(" type=\"book\"") != std::string_view::npos;
  return tag;
}

bool is_block_tag(const std::string& name) {
  static const std::set<std::string> blocks = {"div",  "p",       "l",         "lg",   "lb",
                                               "list", "item",    "chapter",   "title", "milestone",
                                               "br",   "table",   "row",       "cell", "head"};
  return blocks.count(name) > 0;
}

// Skipped with everything inside.
bool is_dropped_element(const Tag& tag) {
  if (tag.name == "note" || tag.name == "speaker") return true;
  return tag.name == "title" && !tag.canonical;
}

// Decodes the entity at markup[at] == '&' into `out`; returns the characters consumed (1 when it
// is no entity we know: the '&' is then copied).
size_t decode_entity(std::string_view markup, size_t at, std::string& out) {
  const size_t semi = markup.find(';', at);
  if (semi == std::string_view::npos || semi - at > 10) {
    out += '&';
    return 1;
  }
  const std::string_view name = markup.substr(at + 1, semi - at - 1);
  static const std::map<std::string_view, const char*> named = {
      {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}, {"nbsp", " "}};
  if (auto it = named.find(name); it != named.end()) {
    out += it->second;
    return semi - at + 1;
  }
  if (name.size() >= 2 && name[0] == '#') {
    const bool hex = name[1] == 'x' || name[1] == 'X';
    const std::string_view digits = name.substr(hex ? 2 : 1);
    uint32_t cp = 0;
    bool ok = !digits.empty() && digits.size() <= 7;
    for (char c : digits) {
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (hex && c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (hex && c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) { ok = false; break; }
      cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(d);
    }
    if (ok && cp > 0 && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF)) {
      text::unicode::append_utf8(out, static_cast<char32_t>(cp));
      return semi - at + 1;
    }
  }
  out += '&';
  return 1;
}

bool starts_with_closing_punctuation(std::string_view text) {
  static const char* marks[] = {".", ",", ";", ":", "!", "?", ")", "]", "\u201D", "\u2019", "\u00BB"};
  for (const char* m : marks)
    if (text.substr(0, std::char_traits<char>::length(m)) == m) return true;
  return false;
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

std::string osis_to_text(std::string_view markup) {
  std::string raw;
  raw.reserve(markup.size());
  std::vector<std::string> dropped;  // open dropped elements (their names), innermost last
  size_t i = 0;
  while (i < markup.size()) {
    const char c = markup[i];
    if (c == '<') {
      const size_t close = markup.find('>', i);
      if (close == std::string_view::npos) break;  // a cut-off tag: the rest is markup
      const Tag tag = parse_tag(markup.substr(i + 1, close - i - 1));
      i = close + 1;
      if (!dropped.empty()) {  // inside a dropped element: only track its nesting
        if (tag.name == dropped.back() && tag.closing) dropped.pop_back();
        else if (tag.name == dropped.back() && !tag.self_closing) dropped.push_back(tag.name);
        if (dropped.empty() && tag.name == "note") raw += kNoteGap;
        continue;
      }
      // The end of a book: what follows in the same entry is back matter (WEB's glossary after
      // Revelation 22:21) or the next book's front matter.
      if (tag.name == "div" && tag.book_end) break;
      if (!tag.closing && !tag.self_closing && is_dropped_element(tag)) {
        dropped.push_back(tag.name);
        continue;
      }
      if (is_block_tag(tag.name)) raw += ' ';
      continue;
    }
    if (!dropped.empty()) {
      ++i;
      continue;
    }
    if (c == '&') {
      i += decode_entity(markup, i, raw);
      continue;
    }
    raw += c;
    ++i;
  }
  // Note gaps, then whitespace.
  std::string spaced;
  spaced.reserve(raw.size());
  for (size_t k = 0; k < raw.size(); ++k) {
    if (raw[k] != kNoteGap) {
      spaced += raw[k];
      continue;
    }
    size_t next = k + 1;
    while (next < raw.size() && (raw[next] == kNoteGap || is_ascii_space(raw[next]))) ++next;
    if (starts_with_closing_punctuation(std::string_view(raw).substr(next))) {
      // "word <note/> ?" -> "word?": the note's surrounding spaces go too.
      while (!spaced.empty() && is_ascii_space(spaced.back())) spaced.pop_back();
    } else {
      spaced += ' ';
    }
    k = next - 1;
  }
  std::string out;
  out.reserve(spaced.size());
  bool pending_space = false;
  for (char ch : spaced) {
    if (is_ascii_space(ch)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += ch;
  }
  return out;
}

std::vector<SwordEntry> parse_mod2imp(std::string_view imp) {
  std::vector<SwordEntry> entries;
  std::string key, body;
  bool in_record = false;
  auto finish = [&] {
    if (!in_record) return;
    // "BOOK C:V" with C, V decimal.
    const size_t space = key.rfind(' ');
    const size_t colon = key.rfind(':');
    if (space == std::string::npos || colon == std::string::npos || colon < space) return;
    const std::string c = key.substr(space + 1, colon - space - 1), v = key.substr(colon + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() <= 6 && std::all_of(s.begin(), s.end(), [](char x) { return x >= '0' && x <= '9'; });
    };
    if (space == 0 || !digits(c) || !digits(v)) return;
    SwordEntry e;
    e.key = key;
    e.book = key.substr(0, space);
    e.chapter = std::stoi(c);
    e.verse = std::stoi(v);
    if (e.verse < 1) return;
    e.text = osis_to_text(body);
    entries.push_back(std::move(e));
  };
  size_t start = 0;
  while (start < imp.size()) {
    size_t end = imp.find('\n', start);
    if (end == std::string_view::npos) end = imp.size();
    std::string_view line = imp.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, 3) == "$$$") {
      finish();
      key = std::string(line.substr(3));
      body.clear();
      in_record = true;
    } else if (in_record) {
      if (!body.empty()) body += '\n';
      body += line;
    }
    start = end + 1;
  }
  finish();
  return entries;
}

std::string export_sword_module(const std::string& module) {
  if (module.empty()) throw Error("no SWORD module named (an empty module name)");
  ProcessResult result;
  try {
    result = run_process({"mod2imp", module});
  } catch (const Error& e) {
    throw Error(fmt::format("{}: install libsword-utils (Debian) for mod2imp", e.what()));
  }
  if (!result.ok()) {
    std::string why = first_line(result.err);
    if (why.empty()) why = first_line(result.out);
    throw Error(fmt::format("mod2imp {} failed ({}): {}", module,
                            result.signal ? fmt::format("signal {}", result.signal)
                                          : fmt::format("exit code {}", result.exit_code),
                            why.empty() ? "no message" : why));
  }
  return std::move(result.out);
}

std::vector<ParallelPair> align_verses(const std::vector<SwordEntry>& source,
                                       const std::vector<SwordEntry>& target) {
  std::map<std::string, const SwordEntry*> by_key;
  for (const auto& e : target) by_key.emplace(e.key, &e);
  std::vector<ParallelPair> pairs;
  std::unordered_set<std::string> seen;
  for (const auto& s : source) {
    if (!seen.insert(s.key).second) continue;
    const auto it = by_key.find(s.key);
    if (it == by_key.end() || s.text.empty() || it->second->text.empty()) continue;
    pairs.push_back(ParallelPair{s.book, s.key, s.text, it->second->text});
  }
  return pairs;
}

ParallelSplits split_by_book(const std::vector<ParallelPair>& pairs,
                             const std::vector<std::string>& validation_books,
                             const std::vector<std::string>& test_books) {
  const std::set<std::string> validation(validation_books.begin(), validation_books.end());
  const std::set<std::string> test(test_books.begin(), test_books.end());
  for (const auto& b : validation)
    if (test.count(b)) throw Error(fmt::format("book '{}' is named for both validation and test", b));
  std::set<std::string> present;
  for (const auto& p : pairs) present.insert(p.book);
  for (const auto* books : {&validation, &test})
    for (const auto& b : *books)
      if (!present.count(b))
        throw Error(fmt::format("book '{}' has no verse pair (books are named as mod2imp writes them, "
                                "e.g. 'Genesis', 'I Samuel', 'Revelation of John')",
                                b));
  ParallelSplits splits;
  for (const auto& p : pairs) {
    if (validation.count(p.book)) splits.validation.push_back(p);
    else if (test.count(p.book)) splits.test.push_back(p);
    else splits.train.push_back(p);
  }
  if (splits.train.empty()) throw Error("no verse pair is left for training");
  return splits;
}

// ---- overlap between splits -----------------------------------------------------------------
namespace {

constexpr uint32_t kNoWord = 0xFFFFFFFF;       // pads the n-gram of a source of 1-3 words
constexpr uint32_t kUnknownWord = 0xFFFFFFFE;  // a held-out word no training source has

using Ngram = std::array<uint32_t, 4>;
struct NgramHash {
  size_t operator()(const Ngram& g) const {
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (uint32_t w : g) h = (h ^ w) * 0x100000001B3ULL + (h >> 29);
    return static_cast<size_t>(h);
  }
};

// Lower-cased runs of letters and digits.
std::vector<std::string> overlap_words(std::string_view text) {
  std::vector<std::string> words;
  std::u32string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(text::unicode::encode_utf8(word));
    word.clear();
  };
  for (char32_t c : text::unicode::decode_utf8(text, text::unicode::InvalidUtf8::kReplace)) {
    if (text::unicode::is_alphanumeric(c)) text::unicode::append_lowercase(word, c);
    else flush();
  }
  flush();
  return words;
}

// Distinct n-grams of a word-id sequence (see the header).
std::vector<Ngram> distinct_ngrams(const std::vector<uint32_t>& ids) {
  std::vector<Ngram> grams;
  if (ids.empty()) return grams;
  if (ids.size() < 4) {
    Ngram g{kNoWord, kNoWord, kNoWord, kNoWord};
    std::copy(ids.begin(), ids.end(), g.begin());
    grams.push_back(g);
    return grams;
  }
  for (size_t i = 0; i + 4 <= ids.size(); ++i) grams.push_back({ids[i], ids[i + 1], ids[i + 2], ids[i + 3]});
  std::sort(grams.begin(), grams.end());
  grams.erase(std::unique(grams.begin(), grams.end()), grams.end());
  return grams;
}

// The training sources as an inverted index: n-gram -> the training pairs that have it.
class TrainingNgramIndex {
 public:
  explicit TrainingNgramIndex(const std::vector<ParallelPair>& train) : matches_(train.size(), 0) {
    for (size_t t = 0; t < train.size(); ++t) {
      std::vector<uint32_t> ids;
      for (auto& w : overlap_words(train[t].source)) {
        auto it = word_ids_.emplace(std::move(w), static_cast<uint32_t>(word_ids_.size())).first;
        ids.push_back(it->second);
      }
      for (const auto& g : distinct_ngrams(ids)) postings_[g].push_back(static_cast<uint32_t>(t));
      if (!ids.empty()) sequences_.insert(key(ids));
    }
  }

  struct Match {
    double overlap = 0;  // largest share of the source's n-grams in one training source
    bool exact = false;  // the same word sequence as a training source
  };

  Match match(const std::string& source) {
    std::vector<uint32_t> ids;
    for (const auto& w : overlap_words(source)) {
      auto it = word_ids_.find(w);
      ids.push_back(it == word_ids_.end() ? kUnknownWord : it->second);
    }
    Match m;
    const auto grams = distinct_ngrams(ids);
    if (grams.empty()) return m;
    m.exact = sequences_.count(key(ids)) != 0;
    uint32_t best = 0;
    for (const auto& g : grams) {
      auto it = postings_.find(g);
      if (it == postings_.end()) continue;
      for (uint32_t t : it->second) {
        if (matches_[t]++ == 0) touched_.push_back(t);
        best = std::max(best, matches_[t]);
      }
    }
    for (uint32_t t : touched_) matches_[t] = 0;
    touched_.clear();
    m.overlap = static_cast<double>(best) / static_cast<double>(grams.size());
    return m;
  }

 private:
  static std::string key(const std::vector<uint32_t>& ids) {
    return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(uint32_t));
  }

  std::unordered_map<std::string, uint32_t> word_ids_;
  std::unordered_map<Ngram, std::vector<uint32_t>, NgramHash> postings_;
  std::unordered_set<std::string> sequences_;
  std::vector<uint32_t> matches_;  // per training pair, reset after each query
  std::vector<uint32_t> touched_;
};

}  // namespace

std::vector<double> largest_training_overlap(const std::vector<ParallelPair>& held_out,
                                             const std::vector<ParallelPair>& train) {
  TrainingNgramIndex index(train);
  std::vector<double> overlaps;
  overlaps.reserve(held_out.size());
  for (const auto& p : held_out) overlaps.push_back(index.match(p.source).overlap);
  return overlaps;
}

SplitOverlap measure_overlap(const std::vector<ParallelPair>& held_out, const std::vector<ParallelPair>& train) {
  TrainingNgramIndex index(train);
  SplitOverlap o;
  o.pairs = held_out.size();
  for (const auto& p : held_out) {
    const auto m = index.match(p.source);
    o.at_least_half += m.overlap >= 0.5;
    o.at_least_80 += m.overlap >= 0.8;
    o.exact_repeats += m.exact;
  }
  return o;
}

SplitsOverlap measure_split_overlap(const ParallelSplits& splits) {
  return {measure_overlap(splits.validation, splits.train), measure_overlap(splits.test, splits.train)};
}

NearDuplicatesDropped drop_near_duplicates(ParallelSplits& splits, double threshold) {
  if (!(threshold > 0 && threshold <= 1))
    throw Error(fmt::format("the near-duplicate threshold must be in (0, 1], got {}", threshold));
  TrainingNgramIndex index(splits.train);
  auto drop = [&](std::vector<ParallelPair>& pairs, const char* name) {
    const size_t before = pairs.size();
    pairs.erase(std::remove_if(pairs.begin(), pairs.end(),
                               [&](const ParallelPair& p) { return index.match(p.source).overlap >= threshold; }),
                pairs.end());
    if (pairs.empty() && before > 0)
      throw Error(fmt::format("every {} pair shares at least {} of its word 4-grams with a training pair", name,
                              threshold));
    return before - pairs.size();
  };
  NearDuplicatesDropped dropped;
  dropped.validation = drop(splits.validation, "validation");
  dropped.test = drop(splits.test, "test");
  return dropped;
}

nlohmann::json overlap_json(const SplitOverlap& overlap) {
  auto share = [&](size_t n) { return overlap.pairs ? static_cast<double>(n) / static_cast<double>(overlap.pairs) : 0.0; };
  return {{"pairs", overlap.pairs},
          {"at_least_50", overlap.at_least_half},
          {"at_least_80", overlap.at_least_80},
          {"exact_repeats", overlap.exact_repeats},
          {"share_at_least_50", share(overlap.at_least_half)},
          {"share_at_least_80", share(overlap.at_least_80)},
          {"share_exact", share(overlap.exact_repeats)}};
}

ParallelSplits split_user_pairs(const std::string& path, double validation_fraction, double test_fraction) {
  auto in_range = [](double f) { return f >= 0.0 && f < 1.0; };
  if (!in_range(validation_fraction) || !in_range(test_fraction) || validation_fraction + test_fraction >= 1.0)
    throw Error(fmt::format("validation and test fractions must be in [0, 1) with a sum below 1 (got {} and {})",
                            validation_fraction, test_fraction));
  const Seq2SeqData data = read_seq2seq_tsv(path);
  const size_t n = data.examples.size();
  const auto test_n = static_cast<size_t>(std::llround(test_fraction * static_cast<double>(n)));
  const auto validation_n = static_cast<size_t>(std::llround(validation_fraction * static_cast<double>(n)));
  if (n == 0) throw Error(fmt::format("{}: no pairs", path));
  if ((test_fraction > 0 && test_n == 0) || (validation_fraction > 0 && validation_n == 0) ||
      test_n + validation_n >= n)
    throw Error(fmt::format("{}: {} pairs are too few for validation fraction {} and test fraction {}",
                            path, n, validation_fraction, test_fraction));
  ParallelSplits splits;
  for (size_t i = 0; i < n; ++i) {
    ParallelPair p{"", fmt::format("LINE {}", i + 1), data.examples[i].source, data.examples[i].target};
    if (i < n - test_n - validation_n) splits.train.push_back(std::move(p));
    else if (i < n - test_n) splits.validation.push_back(std::move(p));
    else splits.test.push_back(std::move(p));
  }
  return splits;
}

ParallelFiles write_parallel_splits(const ParallelSplits& splits, const std::string& directory) {
  if (splits.train.empty() || splits.validation.empty() || splits.test.empty())
    throw Error(fmt::format("not writing {}: a split is empty (train {}, val {}, test {} pairs)", directory,
                            splits.train.size(), splits.validation.size(), splits.test.size()));
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the directory: {}", directory, ec.message()));
  auto flat = [](const std::string& s) {
    std::string out = s;
    for (char& c : out)
      if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    return out;
  };
  auto write = [&](const std::vector<ParallelPair>& pairs, const char* name) {
    const std::string path = (std::filesystem::path(directory) / name).string();
    io::write_file_atomically(path, [&](std::FILE* f) {
      for (const auto& p : pairs) {
        const std::string line = flat(p.source) + '\t' + flat(p.target) + '\n';
        std::fwrite(line.data(), 1, line.size(), f);
      }
    });
    return path;
  };
  ParallelFiles files;
  files.train = write(splits.train, "train.tsv");
  files.validation = write(splits.validation, "val.tsv");
  files.test = write(splits.test, "test.tsv");
  return files;
}

}  // namespace attnkit::data
