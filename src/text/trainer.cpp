#include "attnkit/text/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/text/byte_level.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/unicode.h"
#include "pair_merger.h"

namespace attnkit::text {
namespace {

using WordCounts = std::unordered_map<std::string, uint64_t>;

// How a trainer turns a line into words: the pipeline of the tokenizer it trains.
struct WordSplitter {
  std::optional<BertNormalizer> normalizer;
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

}  // namespace attnkit::text
