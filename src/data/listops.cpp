#include "attnkit/data/listops.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/strings.h"
#include "uniform_draws.h"

namespace attnkit::data {
namespace {

using Vocab = ListOpsVocabulary;

using detail::uniform_below;
using detail::uniform_unit;

constexpr std::array<std::string_view, Vocab::kSize> kTokens = {
    "<pad>", "[MIN", "[MAX", "[MED", "[SM", "]", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

std::optional<int64_t> token_id(std::string_view token) {
  for (int64_t id = 1; id < Vocab::kSize; ++id) {
    if (kTokens[static_cast<size_t>(id)] == token) return id;
  }
  return std::nullopt;
}

bool is_digit_id(int64_t id) { return id >= Vocab::kFirstDigit && id < Vocab::kFirstDigit + 10; }
bool is_operator_id(int64_t id) { return id >= Vocab::kMin && id <= Vocab::kSumMod; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Calls visit(token) for each whitespace-separated token; stops early when visit returns false.
template <typename Visit>
void for_each_token(std::string_view text, Visit visit) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    if (j > i && !visit(text.substr(i, j - i))) return;
    i = j;
  }
}

int apply_operator(int64_t op, std::vector<int>& arguments) {
  switch (op) {
    case Vocab::kMin:
      return *std::min_element(arguments.begin(), arguments.end());
    case Vocab::kMax:
      return *std::max_element(arguments.begin(), arguments.end());
    case Vocab::kMedian: {
      // int(np.median(...)): the middle value, or the mean of the two middle values rounded down.
      std::sort(arguments.begin(), arguments.end());
      const size_t n = arguments.size();
      return n % 2 == 1 ? arguments[n / 2] : (arguments[n / 2 - 1] + arguments[n / 2]) / 2;
    }
    default: {
      int sum = 0;
      for (int a : arguments) sum += a;
      return sum % 10;
    }
  }
}

uint64_t fingerprint(const std::vector<uint8_t>& tokens) {
  return fnv1a64(std::string_view(reinterpret_cast<const char*>(tokens.data()), tokens.size()));
}

// One draw of LRA's generate_tree, as token ids in prefix order ("[OP args... ]"). Stops early
// (too_long) once the expression reaches max_length tokens: it would be rejected anyway, and
// the kept expressions have the same distribution.
struct Draw {
  const ListOpsOptions& options;
  std::mt19937_64& rng;
  std::vector<uint8_t> tokens;
  bool too_long = false;

  void push(int64_t id) {
    tokens.push_back(static_cast<uint8_t>(id));
    if (static_cast<int64_t>(tokens.size()) >= options.max_length) too_long = true;
  }

  int node(int depth) {
    const double r = depth < options.max_depth ? uniform_unit(rng) : 1.0;
    if (depth >= options.max_depth || r > options.operator_probability) {
      const int value = static_cast<int>(uniform_below(rng, 10));
      push(Vocab::kFirstDigit + value);
      return value;
    }
    const int count = 2 + static_cast<int>(uniform_below(rng, static_cast<uint64_t>(options.max_arguments - 1)));
    const size_t slot = tokens.size();
    push(Vocab::kMin);  // placeholder: LRA draws the operator after the arguments
    std::vector<int> arguments;
    arguments.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      arguments.push_back(node(depth + 1));
      if (too_long) return 0;
    }
    const int64_t op = Vocab::kMin + static_cast<int64_t>(uniform_below(rng, 4));
    tokens[slot] = static_cast<uint8_t>(op);
    push(Vocab::kClose);
    return apply_operator(op, arguments);
  }
};

size_t skip_node(const std::vector<uint8_t>& tokens, size_t pos) {
  if (is_digit_id(tokens[pos])) return pos + 1;
  ++pos;
  while (tokens[pos] != Vocab::kClose) pos = skip_node(tokens, pos);
  return pos + 1;
}

// LRA's to_string of the nested pairs ((((op, a1), a2) ...), "]").
size_t write_node(const std::vector<uint8_t>& tokens, size_t pos, std::string& out) {
  if (is_digit_id(tokens[pos])) {
    out += kTokens[tokens[pos]];
    return pos + 1;
  }
  size_t count = 0;
  for (size_t p = pos + 1; tokens[p] != Vocab::kClose; p = skip_node(tokens, p)) ++count;
  for (size_t i = 0; i <= count; ++i) out += "( ";
  out += kTokens[tokens[pos]];
  size_t p = pos + 1;
  for (size_t i = 0; i < count; ++i) {
    out += ' ';
    p = write_node(tokens, p, out);
    out += " )";
  }
  out += " ] )";
  return p + 1;
}

void check_options(const ListOpsOptions& o) {
  if (o.max_depth < 1 || o.max_depth > 1000) {
    throw Error(fmt::format("ListOps options: max_depth must be in 1..1000, got {}", o.max_depth));
  }
  if (o.max_arguments < 2) {
    throw Error(fmt::format("ListOps options: max_arguments must be at least 2, got {}", o.max_arguments));
  }
  if (o.min_length < 0 || o.min_length + 1 >= o.max_length) {
    throw Error(fmt::format("ListOps options: need 0 <= min_length and min_length + 1 < max_length (lengths are "
                            "exclusive bounds), got min_length {} and max_length {}",
                            o.min_length, o.max_length));
  }
  if (!(o.operator_probability >= 0.0 && o.operator_probability < 1.0)) {
    throw Error(fmt::format("ListOps options: operator_probability must be in [0, 1), got {}", o.operator_probability));
  }
}

// Analysis, or the reason the expression is malformed.
struct Parsed {
  ListOpsAnalysis analysis;
  std::string error;
};

Parsed parse(std::string_view source) {
  struct Frame {
    int64_t op;
    std::vector<int> arguments;
  };
  Parsed result;
  ListOpsAnalysis& a = result.analysis;
  std::vector<Frame> stack;
  std::optional<int> root;
  int64_t parentheses = 0;
  size_t position = 0;
  auto fail = [&](std::string message) {
    result.error = std::move(message);
    return false;
  };
  auto finish_value = [&](int value) {
    if (stack.empty()) {
      root = value;
    } else {
      stack.back().arguments.push_back(value);
    }
  };
  for_each_token(source, [&](std::string_view token) {
    ++position;
    if (token == "(") {
      ++parentheses;
      return true;
    }
    if (token == ")") {
      if (--parentheses < 0) return fail(fmt::format("')' without a matching '(' (token {})", position));
      return true;
    }
    const std::optional<int64_t> id = token_id(token);
    if (!id) return fail(fmt::format("unknown token '{}' (token {})", token, position));
    if (root) return fail(fmt::format("token '{}' after the end of the expression (token {})", token, position));
    ++a.length;
    if (is_operator_id(*id)) {
      stack.push_back(Frame{*id, {}});
      a.depth = std::max(a.depth, static_cast<int>(stack.size()));
    } else if (is_digit_id(*id)) {
      a.depth = std::max(a.depth, static_cast<int>(stack.size()) + 1);
      finish_value(static_cast<int>(*id - Vocab::kFirstDigit));
    } else {  // "]"
      if (stack.empty()) return fail(fmt::format("']' without an open operator (token {})", position));
      Frame frame = std::move(stack.back());
      stack.pop_back();
      if (frame.arguments.empty()) {
        return fail(fmt::format("operator {} has no arguments (token {})", kTokens[static_cast<size_t>(frame.op)], position));
      }
      a.max_arguments = std::max(a.max_arguments, static_cast<int>(frame.arguments.size()));
      finish_value(apply_operator(frame.op, frame.arguments));
    }
    return true;
  });
  if (!result.error.empty()) return result;
  if (!stack.empty()) {
    result.error = fmt::format("{} operator(s) not closed by ']', the innermost {}", stack.size(),
                               kTokens[static_cast<size_t>(stack.back().op)]);
  } else if (!root) {
    result.error = "empty expression";
  } else if (parentheses != 0) {
    result.error = fmt::format("{} '(' not closed by ')'", parentheses);
  } else {
    a.value = *root;
  }
  return result;
}

std::ofstream open_for_writing(const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("{}: cannot write ({})", path, std::strerror(errno)));
  return out;
}

constexpr std::string_view kHeader = "Source\tTarget";
constexpr std::string_view kLineEnd = "\r\n";  // Python's csv.writer

void write_row(std::ofstream& out, const ListOpsExample& example) {
  out << example.source << '\t' << example.target << kLineEnd;
}

void finish_writing(std::ofstream& out, const std::string& path) {
  out.flush();
  if (!out) throw Error(fmt::format("{}: write failed", path));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
ListOpsGenerator::ListOpsGenerator(const ListOpsOptions& options, uint64_t seed) : options_(options), rng_(seed) {
  check_options(options_);
}

ListOpsExample ListOpsGenerator::next() {
  constexpr int kMaxRejections = 1000000;
  for (int attempt = 0; attempt < kMaxRejections; ++attempt) {
    Draw draw{options_, rng_, {}, false};
    const int value = draw.node(1);
    const int64_t length = static_cast<int64_t>(draw.tokens.size());
    if (draw.too_long || length <= options_.min_length) continue;
    if (options_.unique && !seen_.insert(fingerprint(draw.tokens)).second) continue;
    ListOpsExample example;
    example.source.reserve(draw.tokens.size() * 6);
    write_node(draw.tokens, 0, example.source);
    example.target = value;
    return example;
  }
  throw Error(fmt::format("ListOps generator: {} draws in a row were rejected; no new expression with "
                          "{} < length < {} (max_depth {}, max_arguments {}) could be found",
                          kMaxRejections, options_.min_length, options_.max_length, options_.max_depth,
                          options_.max_arguments));
}

void ListOpsGenerator::avoid(const std::unordered_set<uint64_t>& fingerprints) {
  seen_.insert(fingerprints.begin(), fingerprints.end());
}

std::vector<ListOpsExample> generate_listops(const ListOpsOptions& options, uint64_t seed, size_t count) {
  ListOpsGenerator generator(options, seed);
  std::vector<ListOpsExample> examples;
  examples.reserve(count);
  for (size_t i = 0; i < count; ++i) examples.push_back(generator.next());
  return examples;
}

ListOpsAnalysis analyze_listops(std::string_view source) {
  Parsed parsed = parse(source);
  if (!parsed.error.empty()) throw Error("ListOps expression: " + parsed.error);
  return parsed.analysis;
}

// ---------------------------------------------------------------------------------------------
std::vector<int64_t> ListOpsVocabulary::encode(std::string_view source, std::string& error) {
  std::vector<int64_t> ids;
  size_t position = 0;
  for_each_token(source, [&](std::string_view token) {
    ++position;
    if (token == "(" || token == ")") return true;
    const std::optional<int64_t> id = token_id(token);
    if (!id) {
      error = fmt::format("unknown token '{}' (token {})", token, position);
      return false;
    }
    ids.push_back(*id);
    return true;
  });
  return ids;
}

std::vector<int64_t> ListOpsVocabulary::encode(std::string_view source) {
  std::string error;
  std::vector<int64_t> ids = encode(source, error);
  if (!error.empty()) throw Error("ListOps source: " + error);
  return ids;
}

std::string ListOpsVocabulary::decode(const std::vector<int64_t>& ids) {
  std::string text;
  for (int64_t id : ids) {
    if (id == kPad) continue;
    if (!text.empty()) text += ' ';
    text += token(id);
  }
  return text;
}

std::string_view ListOpsVocabulary::token(int64_t id) {
  if (id < 0 || id >= kSize) throw Error(fmt::format("ListOps vocabulary: id {} is outside 0..{}", id, kSize - 1));
  return kTokens[static_cast<size_t>(id)];
}

// ---------------------------------------------------------------------------------------------
void write_listops_tsv(const std::vector<ListOpsExample>& examples, const std::string& path) {
  std::ofstream out = open_for_writing(path);
  out << kHeader << kLineEnd;
  for (const ListOpsExample& example : examples) write_row(out, example);
  finish_writing(out, path);
}

std::vector<ListOpsExample> read_listops_tsv(const std::string& path) {
  const std::string content = read_file(path);
  if (content.empty()) throw Error(fmt::format("{}: empty file, expected the header 'Source<TAB>Target'", path));
  std::vector<ListOpsExample> examples;
  for_each_line(content, [&](std::string_view line, size_t number) {
    if (number == 1) {
      if (line != kHeader) {
        throw Error(fmt::format("{}:1: expected the header 'Source<TAB>Target', got '{}'", path, line.substr(0, 60)));
      }
      return;
    }
    const size_t columns = static_cast<size_t>(std::count(line.begin(), line.end(), '\t')) + 1;
    if (columns != 2) {
      throw Error(fmt::format("{}:{}: expected 2 tab-separated columns, got {}", path, number, columns));
    }
    const size_t tab = line.find('\t');
    const std::string_view source = line.substr(0, tab);
    const std::string_view target = line.substr(tab + 1);
    if (target.size() != 1 || target[0] < '0' || target[0] > '9') {
      throw Error(fmt::format("{}:{}: target '{}' is not a class in 0..9", path, number, target));
    }
    std::string error;
    ListOpsVocabulary::encode(source, error);
    if (!error.empty()) throw Error(fmt::format("{}:{}: {}", path, number, error));
    examples.push_back(ListOpsExample{std::string(source), target[0] - '0'});
  });
  return examples;
}

ListOpsSplitFiles write_listops_splits(const ListOpsSplitOptions& options, const std::string& directory) {
  check_options(options.generator);
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the directory ({})", directory, ec.message()));
  const std::filesystem::path dir(directory);
  ListOpsSplitFiles files{(dir / (options.task + "_train.tsv")).string(), (dir / (options.task + "_val.tsv")).string(),
                          (dir / (options.task + "_test.tsv")).string()};
  std::unordered_set<uint64_t> taken;  // fingerprints of the earlier splits
  auto write_split = [&](const std::string& path, uint64_t seed, size_t count) {
    ListOpsGenerator generator(options.generator, seed);
    generator.avoid(taken);
    std::ofstream out = open_for_writing(path);
    out << kHeader << kLineEnd;
    for (size_t i = 0; i < count; ++i) write_row(out, generator.next());
    finish_writing(out, path);
    if (options.generator.unique) taken = generator.fingerprints();
  };
  write_split(files.train, options.train_seed, options.train_count);
  write_split(files.validation, options.validation_seed, options.validation_count);
  write_split(files.test, options.test_seed, options.test_count);
  return files;
}

}  // namespace attnkit::data
