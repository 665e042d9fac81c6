#include "attnkit/text/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/text/byte_level.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/unicode.h"
#include "attnkit/text/unigram.h"
#include "pair_merger.h"

namespace attnkit::text {
namespace {

using WordCounts = std::unordered_map<std::string, uint64_t>;

// How a trainer turns a line into words: the pipeline of the tokenizer it trains.
struct WordSplitter {
  std::optional<Normalizer> normalizer;
  PreTokenizer pre_tokenizer;
  unicode::InvalidUtf8 invalid;

  void count(std::string_view line, WordCounts& counts) const {
    AlignedText text = AlignedText::identity(unicode::decode_utf8(line, invalid));
    if (normalizer) text = normalize(*normalizer, text);
    for (Word& word : pre_tokenize(pre_tokenizer, text)) ++counts[std::move(word.bytes)];
  }
};

WordCounts count_words(const std::vector<std::string>& files, const WordSplitter& splitter, int threads) {
  if (files.empty()) throw Error("training needs at least one text file");
  std::vector<std::string> contents;
  contents.reserve(files.size());
  for (const auto& file : files) contents.push_back(read_file(file));
  std::vector<std::string_view> lines;
  for (const auto& content : contents) {
    std::string_view rest = content;
    while (!rest.empty()) {
      size_t newline = rest.find('\n');
      lines.push_back(rest.substr(0, newline));
      rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    }
  }
  size_t workers = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  workers = std::max<size_t>(1, std::min(workers, lines.size() / 256 + 1));
  std::vector<WordCounts> partial(workers);
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      for (size_t i = w; i < lines.size(); i += workers) splitter.count(lines[i], partial[w]);
    });
  }
  for (auto& thread : pool) thread.join();
  WordCounts total = std::move(partial[0]);
  for (size_t w = 1; w < workers; ++w) {
    for (auto& [word, count] : partial[w]) total[word] += count;
  }
  return total;
}

// Words in a fixed order (by text), so that training is deterministic.
std::vector<std::pair<std::string, uint64_t>> sorted_words(const WordCounts& counts) {
  std::vector<std::pair<std::string, uint64_t>> words(counts.begin(), counts.end());
  std::sort(words.begin(), words.end());
  return words;
}

void check_room(size_t vocab_size, size_t needed, const char* what) {
  if (vocab_size < needed) {
    throw Error(fmt::format("vocab size {} is smaller than the {} {} tokens of this corpus; ask for at least {}", vocab_size,
                            needed, what, needed));
  }
}

std::vector<AddedToken> special_added_tokens(const Vocabulary& vocabulary, const std::vector<std::string>& specials) {
  std::vector<AddedToken> added;
  for (const auto& special : specials) added.push_back({special, *vocabulary.find(special), true, false, false, false, false});
  return added;
}

Tokenizer with_added_tokens(const Tokenizer& tokenizer, std::vector<AddedToken> added) {
  TokenizerParts parts = tokenizer.parts();
  parts.added_tokens = AddedVocabulary(std::move(added));
  return Tokenizer(std::move(parts));
}

std::vector<std::string> unique_specials(const std::vector<std::string>& specials) {
  std::vector<std::string> out;
  for (const auto& special : specials) {
    if (std::find(out.begin(), out.end(), special) == out.end()) out.push_back(special);
  }
  return out;
}

}  // namespace

Tokenizer train_wordpiece(const std::vector<std::string>& files, const WordPieceTrainerOptions& options) {
  const std::vector<std::string> specials = unique_specials(options.special_tokens);
  if (std::find(specials.begin(), specials.end(), "[UNK]") == specials.end()) {
    throw Error("WordPiece training: the special tokens must include [UNK]");
  }
  WordSplitter splitter{BertNormalizer{true, true, std::nullopt, options.lowercase}, BertPreTokenizer{},
                        unicode::InvalidUtf8::kReplace};
  const auto words = sorted_words(count_words(files, splitter, options.threads));
  constexpr size_t kMaxWordChars = 100;  // longer words always become [UNK]
  const std::string prefix = "##";

  // Alphabet: every character, plus its "##" form when it occurs inside a word.
  std::set<std::string> alphabet;
  std::vector<std::vector<std::string>> pieces(words.size());
  for (size_t w = 0; w < words.size(); ++w) {
    std::u32string chars = unicode::decode_utf8(words[w].first, unicode::InvalidUtf8::kReplace);
    if (chars.size() > kMaxWordChars) continue;
    for (size_t i = 0; i < chars.size(); ++i) {
      std::string piece = i == 0 ? "" : prefix;
      unicode::append_utf8(piece, chars[i]);
      alphabet.insert(piece);
      pieces[w].push_back(std::move(piece));
    }
  }
  std::vector<std::string> symbols(specials.begin(), specials.end());
  for (const auto& piece : alphabet) {
    if (std::find(specials.begin(), specials.end(), piece) == specials.end()) symbols.push_back(piece);
  }
  check_room(options.vocab_size, symbols.size(), "special and alphabet");
  std::unordered_map<std::string, uint32_t> ids;
  for (uint32_t id = 0; id < symbols.size(); ++id) ids.emplace(symbols[id], id);

  detail::SymbolWords corpus;
  for (size_t w = 0; w < words.size(); ++w) {
    if (pieces[w].empty()) continue;
    std::vector<uint32_t> word;
    for (const auto& piece : pieces[w]) word.push_back(ids.at(piece));
    corpus.words.push_back(std::move(word));
    corpus.counts.push_back(words[w].second);
  }
  detail::learn_merges(std::move(corpus), symbols, options.vocab_size, options.min_frequency,
                       [&](const std::string& left, const std::string& right) {
                         return left + (right.compare(0, prefix.size(), prefix) == 0 ? right.substr(prefix.size()) : right);
                       });
  Vocabulary vocabulary = Vocabulary::from_tokens(symbols);
  BertTokenizerOptions bert;
  bert.lowercase = options.lowercase;
  Tokenizer tokenizer = make_bert_tokenizer(vocabulary, bert);
  return with_added_tokens(tokenizer, special_added_tokens(vocabulary, specials));
}

Tokenizer train_byte_level_bpe(const std::vector<std::string>& files, const BpeTrainerOptions& options) {
  const std::vector<std::string> specials = unique_specials(options.special_tokens);
  WordSplitter splitter{std::nullopt, ByteLevelPreTokenizer{false, true, true}, unicode::InvalidUtf8::kKeepBytes};
  const auto words = sorted_words(count_words(files, splitter, options.threads));

  std::vector<std::string> symbols(specials.begin(), specials.end());
  uint32_t byte_ids[256];
  for (int byte = 0; byte < 256; ++byte) {
    std::string token = byte_level::bytes_to_token(std::string(1, static_cast<char>(byte)));
    auto existing = std::find(symbols.begin(), symbols.end(), token);
    byte_ids[byte] = static_cast<uint32_t>(existing - symbols.begin());
    if (existing == symbols.end()) symbols.push_back(token);
  }
  check_room(options.vocab_size, symbols.size(), "special and 256 byte");

  detail::SymbolWords corpus;
  for (const auto& [word, count] : words) {
    std::vector<uint32_t> symbols_of_word;
    for (char byte : word) symbols_of_word.push_back(byte_ids[static_cast<uint8_t>(byte)]);
    corpus.words.push_back(std::move(symbols_of_word));
    corpus.counts.push_back(count);
  }
  auto learned = detail::learn_merges(std::move(corpus), symbols, options.vocab_size, options.min_frequency,
                                      [](const std::string& left, const std::string& right) { return left + right; });
  std::vector<Merge> merges;
  merges.reserve(learned.size());
  for (const auto& merge : learned) merges.push_back({symbols[merge.left], symbols[merge.right]});
  Vocabulary vocabulary = Vocabulary::from_tokens(symbols);
  Tokenizer tokenizer = make_gpt2_tokenizer(vocabulary, std::move(merges));
  return with_added_tokens(tokenizer, special_added_tokens(vocabulary, specials));
}

// ---- Unigram ------------------------------------------------------------------------------------
namespace {

double digamma(double x) {
  double result = 0.0;
  for (; x < 7.0; x += 1.0) result -= 1.0 / x;
  x -= 0.5;
  const double xx = 1.0 / x;
  const double xx2 = xx * xx;
  const double xx4 = xx2 * xx2;
  result += std::log(x) + (1.0 / 24.0) * xx2 - (7.0 / 960.0) * xx4 + (31.0 / 8064.0) * xx4 * xx2 -
            (127.0 / 30720.0) * xx4 * xx4;
  return result;
}

double log_sum_exp(double a, double b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  const double high = std::max(a, b);
  return high + std::log1p(std::exp(std::min(a, b) - high));
}

struct TrainWord {
  std::string text;
  std::vector<uint32_t> bounds;  // byte offsets of the character boundaries, 0 ... size
  double count;
};

class PieceModel {
 public:
  std::vector<std::string> pieces;
  std::vector<double> scores;
  std::vector<bool> required;  // single characters: never pruned
  std::unordered_map<std::string, uint32_t> index;

  void rebuild() {
    index.clear();
    for (uint32_t i = 0; i < pieces.size(); ++i) index.emplace(pieces[i], i);
  }
  // id of word.text[bounds[a], bounds[b]), or -1
  int64_t find(const TrainWord& word, size_t a, size_t b) const {
    auto it = index.find(word.text.substr(word.bounds[a], word.bounds[b] - word.bounds[a]));
    return it == index.end() ? -1 : static_cast<int64_t>(it->second);
  }
};

// Adds the expected count of each piece in `word` to `expected`; returns log P(word).
double expect(const PieceModel& model, const TrainWord& word, size_t max_length, std::vector<double>& expected) {
  const size_t n = word.bounds.size() - 1;
  std::vector<double> alpha(n + 1, -INFINITY), beta(n + 1, -INFINITY);
  std::vector<std::vector<std::pair<size_t, int64_t>>> edges(n);  // from start: (end, id)
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b <= std::min(n, a + max_length); ++b) {
      const int64_t id = model.find(word, a, b);
      if (id >= 0) edges[a].emplace_back(b, id);
    }
  }
  alpha[0] = 0.0;
  for (size_t a = 0; a < n; ++a) {
    if (alpha[a] == -INFINITY) continue;
    for (auto [b, id] : edges[a]) alpha[b] = log_sum_exp(alpha[b], alpha[a] + model.scores[id]);
  }
  beta[n] = 0.0;
  for (size_t a = n; a-- > 0;) {
    for (auto [b, id] : edges[a]) beta[a] = log_sum_exp(beta[a], beta[b] + model.scores[id]);
  }
  const double z = alpha[n];
  if (z == -INFINITY) return z;
  for (size_t a = 0; a < n; ++a) {
    for (auto [b, id] : edges[a]) {
      expected[id] += word.count * std::exp(alpha[a] + model.scores[id] + beta[b] - z);
    }
  }
  return z;
}

// Best segmentation of piece `id`'s own text without using `id` itself: its score, or -inf.
double alternative_score(const PieceModel& model, uint32_t id, size_t max_length) {
  TrainWord word{model.pieces[id], {}, 1.0};
  for (uint32_t i = 0; i < word.text.size(); ++i) {
    if ((static_cast<unsigned char>(word.text[i]) & 0xC0) != 0x80) word.bounds.push_back(i);
  }
  word.bounds.push_back(static_cast<uint32_t>(word.text.size()));
  const size_t n = word.bounds.size() - 1;
  std::vector<double> best(n + 1, -INFINITY);
  best[0] = 0.0;
  for (size_t a = 0; a < n; ++a) {
    if (best[a] == -INFINITY) continue;
    for (size_t b = a + 1; b <= std::min(n, a + max_length); ++b) {
      const int64_t other = model.find(word, a, b);
      if (other < 0 || other == static_cast<int64_t>(id)) continue;
      best[b] = std::max(best[b], best[a] + model.scores[other]);
    }
  }
  return best[n];
}

}  // namespace

Tokenizer train_unigram(const std::vector<std::string>& files, const UnigramTrainerOptions& options) {
  const std::vector<std::string> specials = unique_specials(options.special_tokens);
  if (std::find(specials.begin(), specials.end(), options.unk_token) == specials.end()) {
    throw Error(fmt::format("unigram training: the unknown token '{}' is not among the special tokens", options.unk_token));
  }
  const size_t max_length = std::max<size_t>(1, options.max_piece_length);
  Normalizer nfkc({UnicodeNormalizer{UnicodeNormalizer::Form::kNfkc}}, false);
  WordSplitter splitter{nfkc, MetaspacePreTokenizer{}, unicode::InvalidUtf8::kReplace};
  const auto counted = sorted_words(count_words(files, splitter, options.threads));
  std::vector<TrainWord> words;
  words.reserve(counted.size());
  for (const auto& [text, count] : counted) {
    TrainWord word{text, {}, static_cast<double>(count)};
    for (uint32_t i = 0; i < text.size(); ++i) {
      if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) word.bounds.push_back(i);
    }
    word.bounds.push_back(static_cast<uint32_t>(text.size()));
    words.push_back(std::move(word));
  }

  // Seeds: every character, and the substrings of up to max_length characters that occur at
  // least twice, ranked by frequency x length (ties by text), at most max(10 x vocab, 100000).
  std::map<std::string, double> characters;
  std::unordered_map<std::string, double> substrings;
  for (const auto& word : words) {
    const size_t n = word.bounds.size() - 1;
    for (size_t a = 0; a < n; ++a) {
      characters[word.text.substr(word.bounds[a], word.bounds[a + 1] - word.bounds[a])] += word.count;
      for (size_t b = a + 2; b <= std::min(n, a + max_length); ++b) {
        substrings[word.text.substr(word.bounds[a], word.bounds[b] - word.bounds[a])] += word.count;
      }
    }
  }
  check_room(options.vocab_size, specials.size() + characters.size(), "special and character");
  std::vector<std::pair<double, std::string>> ranked;
  for (auto& [text, count] : substrings) {
    if (count >= 2) ranked.emplace_back(count * static_cast<double>(unicode::decode_utf8(text, unicode::InvalidUtf8::kReplace).size()), text);
  }
  std::sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first != y.first ? x.first > y.first : x.second < y.second; });
  ranked.resize(std::min(ranked.size(), std::max<size_t>(options.vocab_size * 10, 100000)));
  PieceModel model;
  for (const auto& [text, count] : characters) {
    model.pieces.push_back(text);
    model.scores.push_back(count);
    model.required.push_back(true);
  }
  for (const auto& [score, text] : ranked) {
    model.pieces.push_back(text);
    model.scores.push_back(score);
    model.required.push_back(false);
  }
  {
    const double total = std::accumulate(model.scores.begin(), model.scores.end(), 0.0);
    for (double& score : model.scores) score = std::log(score) - std::log(total);
  }
  model.rebuild();

  const size_t target = options.vocab_size - specials.size();
  auto em = [&] {
    for (int iteration = 0; iteration < std::max(1, options.em_iterations); ++iteration) {
      std::vector<double> expected(model.pieces.size(), 0.0);
      for (const auto& word : words) expect(model, word, max_length, expected);
      // M-step (Bayesian, as SentencePiece): drop rare pieces, then digamma-normalise.
      PieceModel next;
      for (size_t i = 0; i < model.pieces.size(); ++i) {
        if (!model.required[i] && expected[i] < 0.5) continue;
        next.pieces.push_back(model.pieces[i]);
        next.scores.push_back(std::max(expected[i], 1e-8));
        next.required.push_back(model.required[i]);
      }
      const double total = std::accumulate(next.scores.begin(), next.scores.end(), 0.0);
      const double log_total = digamma(total);
      for (double& score : next.scores) score = digamma(score) - log_total;
      next.rebuild();
      model = std::move(next);
    }
  };
  for (;;) {
    em();
    if (model.pieces.size() <= target) break;
    const size_t desired = std::max(target, static_cast<size_t>(static_cast<double>(model.pieces.size()) * options.shrinking_factor));
    // Loss of removing a piece: its expected frequency times how much less likely its best
    // alternative segmentation is (SentencePiece's pruning criterion, simplified).
    std::vector<double> expected(model.pieces.size(), 0.0);
    for (const auto& word : words) expect(model, word, max_length, expected);
    std::vector<std::pair<double, uint32_t>> losses;
    for (uint32_t i = 0; i < model.pieces.size(); ++i) {
      if (model.required[i]) continue;
      const double alternative = alternative_score(model, i, max_length);
      const double loss = alternative == -INFINITY ? INFINITY : expected[i] * (model.scores[i] - alternative);
      losses.emplace_back(loss, i);
    }
    std::sort(losses.begin(), losses.end(), [&](const auto& x, const auto& y) {
      return x.first != y.first ? x.first > y.first : model.pieces[x.second] < model.pieces[y.second];
    });
    size_t required = 0;
    for (bool r : model.required) required += r ? 1 : 0;
    const size_t keep = desired > required ? desired - required : 0;
    std::vector<bool> kept(model.pieces.size(), false);
    for (size_t i = 0; i < model.pieces.size(); ++i) kept[i] = model.required[i];
    for (size_t k = 0; k < std::min(keep, losses.size()); ++k) kept[losses[k].second] = true;
    PieceModel next;
    for (size_t i = 0; i < model.pieces.size(); ++i) {
      if (!kept[i]) continue;
      next.pieces.push_back(model.pieces[i]);
      next.scores.push_back(model.scores[i]);
      next.required.push_back(model.required[i]);
    }
    next.rebuild();
    const bool stuck = next.pieces.size() == model.pieces.size();
    model = std::move(next);
    if (stuck) break;
  }

  // Final vocabulary: the special tokens (score 0), then the pieces by descending score.
  std::vector<uint32_t> order(model.pieces.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    return model.scores[x] != model.scores[y] ? model.scores[x] > model.scores[y] : model.pieces[x] < model.pieces[y];
  });
  std::vector<UnigramPiece> pieces;
  for (const auto& special : specials) pieces.push_back({special, 0.0});
  for (uint32_t i : order) {
    if (std::find(specials.begin(), specials.end(), model.pieces[i]) != specials.end()) continue;
    pieces.push_back({model.pieces[i], model.scores[i]});
  }
  const auto unk_id = static_cast<uint32_t>(std::find(specials.begin(), specials.end(), options.unk_token) - specials.begin());
  TokenizerParts parts;
  auto unigram = std::make_shared<Unigram>(std::move(pieces), unk_id, false);
  parts.model = unigram;
  parts.normalizer = nfkc;
  parts.pre_tokenizer = MetaspacePreTokenizer{};
  parts.decoder = MetaspaceDecoder{};
  const Vocabulary& vocabulary = unigram->vocabulary();
  if (vocabulary.find("[CLS]") && vocabulary.find("[SEP]")) {
    parts.post_processor = PostProcessor::bert("[CLS]", *vocabulary.find("[CLS]"), "[SEP]", *vocabulary.find("[SEP]"));
    parts.post_processor.kind = PostProcessor::Kind::kTemplate;
  }
  parts.added_tokens = AddedVocabulary(special_added_tokens(vocabulary, specials));
  return Tokenizer(std::move(parts));
}

}  // namespace attnkit::text
