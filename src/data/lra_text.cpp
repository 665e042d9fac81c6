// LRA text and retrieval stand-ins from Debian's fortunes (include/attnkit/data/lra_text.h).
#include "attnkit/data/lra_text.h"

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/data/corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

namespace attnkit::data {

namespace fs = std::filesystem;

namespace {

// A draw in [0, n) from our own generator (the same on every platform).
size_t below(std::mt19937_64& rng, size_t n) { return static_cast<size_t>(rng() % n); }

void shuffle(std::vector<size_t>& order, std::mt19937_64& rng) {
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[below(rng, i)]);
}

// Passages of one category's fortunes of one split.
std::vector<TextPassage> passages_of(const std::vector<std::string>& fortunes, int64_t label,
                                     const LraTextOptions& o, std::mt19937_64& rng) {
  std::vector<TextPassage> out;
  for (size_t start = 0; start < fortunes.size(); start += static_cast<size_t>(o.stride)) {
    const size_t target = static_cast<size_t>(o.min_bytes) + below(rng, static_cast<size_t>(o.max_bytes - o.min_bytes + 1));
    TextPassage p;
    p.label = label;
    p.first = start;
    size_t i = start;
    while (i < fortunes.size() && p.text.size() < target) {
      if (i > start) p.text += '\n';
      p.text += fortunes[i++];
    }
    if (p.text.size() < static_cast<size_t>(o.min_bytes)) break;  // later starts have even less text
    if (p.text.size() > target) p.text.resize(target);
    p.end = i;
    out.push_back(std::move(p));
  }
  return out;
}

std::string split_file(const std::string& dir, const std::string& prefix, const char* split) {
  return (fs::path(dir) / fmt::format("{}_{}.tsv", prefix, split)).string();
}

std::vector<std::string> split_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open (write it with `attnkit data lra-text` or `lra-retrieval`)", path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<std::string> split_tab_fields(const std::string& line) {
  std::vector<std::string> fields(1);
  for (char c : line) {
    if (c == '\t')
      fields.emplace_back();
    else
      fields.back() += c;
  }
  return fields;
}

}  // namespace

const std::vector<std::string>& default_text_categories() {
  static const std::vector<std::string> categories{"computers", "people", "science", "songs-poems"};
  return categories;
}

LraTextOptions retrieval_text_options() {
  LraTextOptions o;
  o.min_bytes = 2048;
  o.max_bytes = 4096;
  return o;
}

void check_lra_text_options(const LraTextOptions& o) {
  if (o.categories.size() < 2) throw Error(fmt::format("lra text: need at least 2 categories, got {}", o.categories.size()));
  std::set<std::string> seen;
  for (const auto& c : o.categories) {
    if (c.empty()) throw Error("lra text: an empty category name");
    if (!seen.insert(c).second) throw Error(fmt::format("lra text: category '{}' named twice", c));
  }
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes)
    throw Error(fmt::format("lra text: passage bytes must satisfy 1 <= min ({}) <= max ({})", o.min_bytes, o.max_bytes));
  if (o.stride < 1) throw Error(fmt::format("lra text: stride must be >= 1, got {}", o.stride));
  if (!(o.val_fraction > 0 && o.test_fraction > 0 && o.val_fraction + o.test_fraction < 1))
    throw Error(fmt::format("lra text: val ({}) and test ({}) fractions must be > 0 with a sum below 1", o.val_fraction,
                            o.test_fraction));
}

int split_of_fortune(const std::string& text, const LraTextOptions& o) {
  if (in_validation_split(text, o.test_fraction)) return 2;
  if (in_validation_split(text, o.test_fraction + o.val_fraction)) return 1;
  return 0;
}

LraTextSplits build_lra_text(const LraTextOptions& o) {
  check_lra_text_options(o);
  LraTextSplits out;
  out.categories = o.categories;
  std::vector<std::vector<TextPassage>> by_split[3];
  for (size_t c = 0; c < o.categories.size(); ++c) {
    const fs::path path = fs::path(o.fortunes_dir) / o.categories[c];
    if (!fs::is_regular_file(path))
      throw Error(fmt::format("{}: no such fortune file (category '{}'; Debian package `fortunes`)", path.string(),
                              o.categories[c]));
    std::vector<std::string> fortunes[3];
    for (auto& d : read_documents(path.string(), DocumentFormat::kFortune))
      if (!d.text.empty()) fortunes[split_of_fortune(d.text, o)].push_back(std::move(d.text));
    for (int s = 0; s < 3; ++s) {
      std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + c * 3 + static_cast<uint64_t>(s) + 1);
      by_split[s].push_back(passages_of(fortunes[s], static_cast<int64_t>(c), o, rng));
    }
  }
  static const char* names[] = {"train", "val", "test"};
  std::vector<TextPassage>* targets[] = {&out.train, &out.val, &out.test};
  for (int s = 0; s < 3; ++s) {
    size_t smallest = SIZE_MAX;
    for (size_t c = 0; c < o.categories.size(); ++c) {
      if (by_split[s][c].empty())
        throw Error(fmt::format("lra text: category '{}' has no {} passage of {}..{} bytes", o.categories[c], names[s],
                                o.min_bytes, o.max_bytes));
      smallest = std::min(smallest, by_split[s][c].size());
    }
    std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + 1000 + static_cast<uint64_t>(s));
    for (auto& passages : by_split[s]) {
      // A seeded choice of `smallest` passages, kept in their order.
      std::vector<size_t> order(passages.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      shuffle(order, rng);
      order.resize(smallest);
      std::sort(order.begin(), order.end());
      for (size_t i : order) targets[s]->push_back(std::move(passages[i]));
    }
    std::vector<size_t> order(targets[s]->size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    shuffle(order, rng);
    std::vector<TextPassage> mixed;
    for (size_t i : order) mixed.push_back(std::move((*targets[s])[i]));
    *targets[s] = std::move(mixed);
  }
  return out;
}

std::vector<TextPair> make_retrieval_pairs(const std::vector<TextPassage>& passages, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 77);
  std::vector<size_t> order(passages.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  shuffle(order, rng);
  std::vector<TextPair> positives, negatives;
  for (size_t k = 0; k < order.size(); ++k) {
    const TextPassage& a = passages[order[k]];
    const bool positive = k % 2 == 0;
    std::vector<size_t> candidates;
    for (size_t j = 0; j < passages.size(); ++j) {
      const TextPassage& b = passages[j];
      if (positive ? (b.label == a.label && (b.end <= a.first || a.end <= b.first)) : b.label != a.label)
        candidates.push_back(j);
    }
    if (candidates.empty()) continue;
    const TextPassage& b = passages[candidates[below(rng, candidates.size())]];
    (positive ? positives : negatives).push_back({positive ? 1 : 0, a.text, b.text});
  }
  const size_t n = std::min(positives.size(), negatives.size());
  std::vector<TextPair> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(std::move(positives[i]));
    out.push_back(std::move(negatives[i]));
  }
  return out;
}

std::string escape_tsv_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  return out;
}

std::string unescape_tsv_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    switch (next) {
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      default: throw Error(fmt::format("bad escape at byte {} (only \\\\, \\n, \\t, \\r)", i + 1));
    }
    ++i;
  }
  return out;
}

LraTextFiles write_lra_text(const LraTextOptions& options, const std::string& out_dir) {
  const LraTextSplits splits = build_lra_text(options);
  fs::create_directories(out_dir);
  LraTextFiles files;
  auto write = [&](const std::vector<TextPassage>& passages, const char* split) {
    std::string content;
    for (const auto& p : passages)
      content += splits.categories[static_cast<size_t>(p.label)] + "\t" + escape_tsv_text(p.text) + "\n";
    const std::string path = split_file(out_dir, "text", split);
    io::write_file_atomically(path, content);
    return path;
  };
  files.train = write(splits.train, "train");
  files.val = write(splits.val, "val");
  files.test = write(splits.test, "test");
  files.train_count = splits.train.size();
  files.val_count = splits.val.size();
  files.test_count = splits.test.size();
  return files;
}

LraTextFiles write_lra_retrieval(const LraTextOptions& options, const std::string& out_dir) {
  const LraTextSplits splits = build_lra_text(options);
  fs::create_directories(out_dir);
  LraTextFiles files;
  size_t index = 0;
  auto write = [&](const std::vector<TextPassage>& passages, const char* split, size_t& count) {
    const auto pairs = make_retrieval_pairs(passages, options.seed * 3 + index++);
    if (pairs.empty()) throw Error(fmt::format("lra retrieval: no {} pairs (too few passages)", split));
    std::string content;
    for (const auto& p : pairs)
      content += fmt::format("{}\t{}\t{}\n", p.label, escape_tsv_text(p.left), escape_tsv_text(p.right));
    const std::string path = split_file(out_dir, "retrieval", split);
    io::write_file_atomically(path, content);
    count = pairs.size();
    return path;
  };
  files.train = write(splits.train, "train", files.train_count);
  files.val = write(splits.val, "val", files.val_count);
  files.test = write(splits.test, "test", files.test_count);
  return files;
}

LabelledTexts read_lra_text_file(const std::string& path) {
  LabelledTexts out;
  size_t number = 0;
  for (const auto& line : split_lines(path)) {
    ++number;
    if (line.empty()) continue;
    const auto fields = split_tab_fields(line);
    if (fields.size() != 2 || fields[0].empty())
      throw Error(fmt::format("{}:{}: expected category<TAB>text", path, number));
    try {
      out.texts.push_back(unescape_tsv_text(fields[1]));
    } catch (const Error& e) {
      throw Error(fmt::format("{}:{}: {}", path, number, e.what()));
    }
    out.labels.push_back(fields[0]);
  }
  return out;
}

std::vector<TextPair> read_lra_retrieval_file(const std::string& path) {
  std::vector<TextPair> out;
  size_t number = 0;
  for (const auto& line : split_lines(path)) {
    ++number;
    if (line.empty()) continue;
    const auto fields = split_tab_fields(line);
    if (fields.size() != 3 || (fields[0] != "0" && fields[0] != "1"))
      throw Error(fmt::format("{}:{}: expected label (0 or 1)<TAB>text<TAB>text", path, number));
    TextPair p;
    p.label = fields[0] == "1" ? 1 : 0;
    try {
      p.left = unescape_tsv_text(fields[1]);
      p.right = unescape_tsv_text(fields[2]);
    } catch (const Error& e) {
      throw Error(fmt::format("{}:{}: {}", path, number, e.what()));
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace attnkit::data
