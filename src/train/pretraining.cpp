#include "attnkit/train/pretraining.h"

#include "attnkit/error.h"
#include "attnkit/models/task_model.h"
#include "attnkit/ops/masks.h"
#include "attnkit/text/unicode.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <numeric>

namespace attnkit::train {
namespace {

// [0, 1) from 53 random bits.
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

std::mt19937_64 pretraining_rng(uint64_t seed, uint64_t stream) {
  // splitmix64 of (seed, stream): nearby seeds and streams give unrelated generators.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return std::mt19937_64(z ^ (z >> 31));
}

void MaskingOptions::validate() const {
  auto check = [](const char* name, double v, bool open_at_zero) {
    if (!(v >= 0 && v <= 1) || (open_at_zero && v == 0))
      throw Error(fmt::format("task.{}: {} is outside {}0, 1]", name, v, open_at_zero ? "(" : "["));
  };
  check("mask_probability", probability, true);
  check("mask_fraction", mask_fraction, false);
  check("random_fraction", random_fraction, false);
  if (mask_fraction + random_fraction > 1 + 1e-12)
    throw Error(fmt::format("task.mask_fraction + task.random_fraction = {} exceeds 1", mask_fraction + random_fraction));
}

namespace {

// The CJK ideograph a token is, or 0 (the token is something else).
char32_t ideograph_of(const std::string& token) {
  const auto chars = text::unicode::decode_utf8(token, text::unicode::InvalidUtf8::kReplace);
  return chars.size() == 1 && text::unicode::is_cjk_ideograph(chars[0]) ? chars[0] : 0;
}

}  // namespace

ChineseWordList read_word_list(const std::string& path, const text::Tokenizer& tokenizer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("task.word_list: {}: cannot read: {}", path, std::strerror(errno)));
  std::unordered_set<char32_t> known;  // the ideographs the tokenizer has as tokens
  for (size_t id = 0; id < tokenizer.vocab_size(); ++id)
    if (const std::string* token = tokenizer.id_to_token(static_cast<uint32_t>(id)))
      if (const char32_t c = ideograph_of(*token)) known.insert(c);
  ChineseWordList list;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // a byte-order mark
    if (text::unicode::find_invalid_utf8(line) != std::string::npos)
      throw Error(fmt::format("task.word_list: {}:{}: invalid UTF-8 (the word list must be UTF-8)", path, number));
    const auto chars = text::unicode::decode_utf8(line, text::unicode::InvalidUtf8::kReplace);
    size_t first = 0;
    while (first < chars.size() && text::unicode::is_whitespace(chars[first])) ++first;
    size_t last = first;
    while (last < chars.size() && !text::unicode::is_whitespace(chars[last])) ++last;
    if (last == first) continue;  // a blank line
    ++list.lines;
    std::u32string word = chars.substr(first, last - first);
    if (word.size() < 2) continue;
    if (!std::all_of(word.begin(), word.end(), [&](char32_t c) { return known.count(c) > 0; })) continue;
    list.longest = std::max(list.longest, word.size());
    list.words.insert(std::move(word));
  }
  if (in.bad()) throw Error(fmt::format("task.word_list: {}: cannot read: {}", path, std::strerror(errno)));
  if (list.lines == 0) throw Error(fmt::format("task.word_list: {} lists no word (an empty file)", path));
  if (list.words.empty())
    throw Error(fmt::format("task.word_list: none of the {} words of {} is two or more CJK characters that the "
                            "tokenizer has as tokens", list.lines, path));
  return list;
}

MaskingVocabulary masking_vocabulary(const text::Tokenizer& tokenizer) {
  MaskingVocabulary v;
  const size_t size = tokenizer.vocab_size();
  v.special.assign(size, 0);
  v.continuation.assign(size, 0);
  v.character.assign(size, 0);
  for (const auto& added : tokenizer.parts().added_tokens.tokens())
    if (added.special && added.id < size) v.special[added.id] = 1;
  for (const char* name : {"[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]", "<s>", "</s>", "<pad>", "<mask>", "<unk>",
                           "<|endoftext|>"})
    if (auto id = tokenizer.token_to_id(name); id && *id < size) v.special[*id] = 1;
  auto mask = tokenizer.token_to_id("[MASK]");
  if (!mask) mask = tokenizer.token_to_id("<mask>");
  if (!mask) throw Error("masked LM: the tokenizer has no [MASK] or <mask> token");
  v.mask_id = *mask;
  for (size_t id = 0; id < size; ++id) {
    const std::string* token = tokenizer.id_to_token(static_cast<uint32_t>(id));
    if (token && token->size() > 2 && token->compare(0, 2, "##") == 0) v.continuation[id] = 1;
    if (token && !v.special[id]) v.character[id] = ideograph_of(*token);
    if (!v.special[id]) v.ordinary.push_back(static_cast<int64_t>(id));
  }
  return v;
}

std::vector<std::pair<size_t, size_t>> masking_units(const std::vector<int64_t>& row,
                                                     const MaskingVocabulary& vocabulary, bool whole_word) {
  const auto size = static_cast<int64_t>(vocabulary.special.size());
  for (const int64_t id : row)
    if (id < 0 || id >= size)
      throw Error(fmt::format("masked LM: token id {} is outside the vocabulary [0, {})", id, size));
  const auto& words = vocabulary.words;
  const bool chinese = whole_word && !words.words.empty() && vocabulary.character.size() == vocabulary.special.size();
  std::vector<std::pair<size_t, size_t>> units;
  std::u32string candidate;
  for (size_t i = 0; i < row.size();) {
    const int64_t id = row[i];
    if (vocabulary.special[id]) {
      ++i;
      continue;
    }
    if (chinese && vocabulary.character[id]) {
      // A run [i, end) of CJK-character tokens, cut by greedy longest match.
      size_t end = i;
      while (end < row.size() && vocabulary.character[row[end]]) ++end;
      while (i < end) {
        size_t length = std::min(words.longest, end - i);
        for (; length >= 2; --length) {
          candidate.clear();
          for (size_t k = i; k < i + length; ++k) candidate.push_back(vocabulary.character[row[k]]);
          if (words.words.count(candidate)) break;
        }
        length = std::max<size_t>(length, 1);
        units.emplace_back(i, i + length);
        i += length;
      }
      continue;
    }
    const bool continues = whole_word && vocabulary.continuation[id] && !units.empty() && units.back().second == i;
    if (continues) units.back().second = i + 1;
    else units.emplace_back(i, i + 1);
    ++i;
  }
  return units;
}

MaskedRows mask_tokens(const std::vector<const std::vector<int64_t>*>& rows, const MaskingVocabulary& vocabulary,
                       const MaskingOptions& options, uint64_t seed, uint64_t stream) {
  options.validate();
  auto rng = pretraining_rng(seed, stream);
  MaskedRows out;
  for (const auto* row : rows) {
    std::vector<int64_t> input = *row, labels(row->size(), models::kIgnoreLabel);
    const auto units = masking_units(*row, vocabulary, options.whole_word);
    for (const auto& [first, last] : units) {
      if (uniform(rng) >= options.probability) continue;
      for (size_t i = first; i < last; ++i) {
        labels[i] = input[i];
        const double u = uniform(rng);
        if (u < options.mask_fraction) {
          input[i] = vocabulary.mask_id;
        } else if (u < options.mask_fraction + options.random_fraction && !vocabulary.ordinary.empty()) {
          input[i] = vocabulary.ordinary[rng() % vocabulary.ordinary.size()];
        }
      }
    }
    out.inputs.push_back(std::move(input));
    out.labels.push_back(std::move(labels));
  }
  return out;
}

std::vector<std::vector<int64_t>> sample_orders(size_t rows, int64_t n, uint64_t seed, uint64_t stream) {
  auto rng = pretraining_rng(seed, stream);
  std::vector<std::vector<int64_t>> orders(rows, std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(n, 0))));
  for (auto& order : orders) {
    std::iota(order.begin(), order.end(), int64_t{0});
    // Fisher-Yates with our own draws, so every platform shuffles alike.
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  }
  return orders;
}

PermutationBatch permutation_batch(const std::vector<const std::vector<int64_t>*>& rows,
                                   const std::vector<std::vector<int64_t>>& orders, int64_t predict_last) {
  if (rows.empty()) throw Error("permutation LM: no rows");
  if (orders.size() != rows.size())
    throw Error(fmt::format("permutation LM: {} orders for {} rows", orders.size(), rows.size()));
  const auto n = static_cast<int64_t>(rows.front()->size());
  if (n < 2) throw Error("permutation LM: rows need at least 2 tokens");
  if (predict_last < 0 || predict_last > n - 1)
    throw Error(fmt::format("task.predict_last: {} is outside [0, {}] (0 = all; a block of {} tokens has {} "
                            "predictions)", predict_last, n - 1, n, n - 1));
  const int64_t predicted = predict_last == 0 ? n - 1 : predict_last;
  const auto batch = static_cast<int64_t>(rows.size());
  at::Tensor ids = torch::empty({batch, n}, at::kLong), order = torch::empty({batch, n}, at::kLong);
  at::Tensor targets = torch::full({batch, n}, models::kIgnoreLabel, at::kLong);
  at::Tensor query_targets = torch::full({batch, n}, models::kIgnoreLabel, at::kLong);
  auto ids_a = ids.accessor<int64_t, 2>(), order_a = order.accessor<int64_t, 2>(), targets_a = targets.accessor<int64_t, 2>();
  auto query_targets_a = query_targets.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    const auto& row = *rows[b];
    const auto& z = orders[b];
    if (static_cast<int64_t>(row.size()) != n || static_cast<int64_t>(z.size()) != n)
      throw Error(fmt::format("permutation LM: row {} has {} tokens and an order of {}, not {}", b, row.size(),
                              z.size(), n));
    for (int64_t i = 0; i < n; ++i) {
      ids_a[b][i] = row[i];
      order_a[b][i] = z[i];
    }
    // The step t -> t + 1 of the order: position z[t] predicts the token at z[t + 1].
    for (int64_t t = n - 1 - predicted; t + 1 < n; ++t) {
      if (z[t] < 0 || z[t] >= n || z[t + 1] < 0 || z[t + 1] >= n)
        throw Error(fmt::format("permutation LM: order {} is not a permutation of 0..{}", b, n - 1));
      targets_a[b][z[t]] = row[z[t + 1]];
      query_targets_a[b][z[t + 1]] = row[z[t + 1]];  // two streams: predicted at its own position
    }
  }
  auto masks = ops::xlnet_masks(order);  // checks each order
  return {ids, masks.content, targets, masks.query, query_targets};
}

}  // namespace attnkit::train
