#include "attnkit/metrics/metrics.h"

#include "attnkit/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "attnkit/error.h"
#include "attnkit/text/unicode.h"

namespace attnkit::metrics {
namespace {

void check_counts(const char* what, size_t predictions, size_t references) {
  if (predictions != references) {
    throw Error(fmt::format("{}: {} predictions but {} references", what, predictions, references));
  }
}

double ratio(size_t numerator, size_t denominator) {
  return denominator == 0 ? 0.0 : static_cast<double>(numerator) / static_cast<double>(denominator);
}

double harmonic_mean(double precision, double recall) {
  return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

void finish(EntityScores& s) {
  s.precision = ratio(s.correct, s.predicted);
  s.recall = ratio(s.correct, s.gold);
  s.f1 = harmonic_mean(s.precision, s.recall);
}

// ---- SQuAD normalisation --------------------------------------------------------------------

bool is_ascii_punctuation(char32_t c) {  // Python's string.punctuation
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

// Python's str.isspace (str.split() with no argument splits on these).
bool is_python_space(char32_t c) { return text::unicode::is_whitespace(c) || (c >= 0x1C && c <= 0x1F); }

// Python's \w for str patterns: letters, numbers and "_".
bool is_word_character(char32_t c) { return c == U'_' || text::unicode::is_alphanumeric(c); }

std::vector<std::string> squad_tokens(std::string_view text) {
  const std::string normalized = normalize_squad_answer(text);
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start < normalized.size()) {
    size_t space = normalized.find(' ', start);
    if (space == std::string::npos) space = normalized.size();
    tokens.push_back(normalized.substr(start, space - start));
    start = space + 1;
  }
  return tokens;
}

double squad_token_f1(const std::vector<std::string>& prediction, const std::vector<std::string>& gold) {
  if (prediction.empty() || gold.empty()) return prediction.empty() && gold.empty() ? 1.0 : 0.0;
  std::unordered_map<std::string, long> gold_counts;
  for (const std::string& token : gold) ++gold_counts[token];
  size_t common = 0;
  for (const std::string& token : prediction) {
    auto it = gold_counts.find(token);
    if (it != gold_counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  const double precision = static_cast<double>(common) / static_cast<double>(prediction.size());
  const double recall = static_cast<double>(common) / static_cast<double>(gold.size());
  return harmonic_mean(precision, recall);
}

const std::vector<std::string>& or_empty_answer(const std::vector<std::string>& gold_answers) {
  static const std::vector<std::string> kEmpty{""};
  return gold_answers.empty() ? kEmpty : gold_answers;
}

// ---- BLEU -----------------------------------------------------------------------------------

// An n-gram as one string: each token's length (4 bytes) then its bytes, so keys never collide.
using NgramCounts = std::unordered_map<std::string, size_t>;

NgramCounts count_ngrams(const std::vector<std::string>& tokens, size_t n) {
  NgramCounts counts;
  if (tokens.size() < n) return counts;
  std::string key;
  for (size_t i = 0; i + n <= tokens.size(); ++i) {
    key.clear();
    for (size_t j = i; j < i + n; ++j) {
      const uint32_t size = static_cast<uint32_t>(tokens[j].size());
      key.append(reinterpret_cast<const char*>(&size), sizeof(size));
      key += tokens[j];
    }
    ++counts[key];
  }
  return counts;
}

}  // namespace

double accuracy(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels) {
  check_counts("accuracy", predictions.size(), labels.size());
  size_t correct = 0;
  for (size_t i = 0; i < predictions.size(); ++i) correct += predictions[i] == labels[i];
  return ratio(correct, predictions.size());
}

// ---------------------------------------------------------------------------------------------
std::vector<EntitySpan> bio_entities(const std::vector<std::string>& tags) {
  std::vector<EntitySpan> entities;
  char previous_tag = 'O';
  std::string previous_type;
  size_t begin = 0;
  for (size_t i = 0; i <= tags.size(); ++i) {
    char tag = 'O';
    std::string type = "_";
    if (i < tags.size()) {
      const std::string& chunk = tags[i];
      const bool bare = chunk.size() == 1 && std::string_view("OBIES").find(chunk[0]) != std::string_view::npos;
      const bool prefixed = chunk.size() >= 2 && std::string_view("BIES").find(chunk[0]) != std::string_view::npos &&
                            chunk[1] == '-';
      if (!bare && !prefixed) {
        throw Error(fmt::format("tag {} '{}' is not O or B-, I-, E-, S- followed by a type", i, chunk));
      }
      tag = chunk[0];
      if (prefixed && chunk.size() > 2) type = chunk.substr(2);
    }
    const bool type_changed = previous_type != type;
    // seqeval's end_of_chunk / start_of_chunk.
    const bool ends = previous_tag == 'E' || previous_tag == 'S' ||
                      ((previous_tag == 'B' || previous_tag == 'I') && (tag == 'B' || tag == 'S' || tag == 'O')) ||
                      (previous_tag != 'O' && type_changed);
    const bool starts = tag == 'B' || tag == 'S' ||
                        ((previous_tag == 'E' || previous_tag == 'S' || previous_tag == 'O') && (tag == 'E' || tag == 'I')) ||
                        (tag != 'O' && type_changed);
    if (ends) entities.push_back(EntitySpan{previous_type, begin, i});
    if (starts) begin = i;
    previous_tag = tag;
    previous_type = type;
  }
  return entities;
}

TaggingScores tagging_scores(const std::vector<std::vector<std::string>>& predictions,
                             const std::vector<std::vector<std::string>>& references) {
  check_counts("tagging_scores", predictions.size(), references.size());
  TaggingScores scores;
  for (size_t s = 0; s < predictions.size(); ++s) {
    const auto& predicted_tags = predictions[s];
    const auto& gold_tags = references[s];
    if (predicted_tags.size() != gold_tags.size()) {
      throw Error(fmt::format("tagging_scores: sentence {} has {} predicted tags but {} reference tags", s,
                              predicted_tags.size(), gold_tags.size()));
    }
    for (size_t i = 0; i < gold_tags.size(); ++i) scores.correct_tokens += predicted_tags[i] == gold_tags[i];
    scores.tokens += gold_tags.size();
    std::vector<EntitySpan> predicted, gold;
    try {
      predicted = bio_entities(predicted_tags);
      gold = bio_entities(gold_tags);
    } catch (const Error& e) {
      throw Error(fmt::format("tagging_scores: sentence {}: {}", s, e.what()));
    }
    for (const EntitySpan& entity : predicted) ++scores.by_type[entity.type].predicted;
    for (const EntitySpan& entity : gold) {
      ++scores.by_type[entity.type].gold;
      if (std::find(predicted.begin(), predicted.end(), entity) != predicted.end()) ++scores.by_type[entity.type].correct;
    }
  }
  for (auto& [type, counts] : scores.by_type) {
    scores.entities.predicted += counts.predicted;
    scores.entities.gold += counts.gold;
    scores.entities.correct += counts.correct;
    finish(counts);
  }
  finish(scores.entities);
  scores.token_accuracy = ratio(scores.correct_tokens, scores.tokens);
  return scores;
}

// ---------------------------------------------------------------------------------------------
std::string normalize_squad_answer(std::string_view text) {
  namespace unicode = text::unicode;
  // lower-case, then drop punctuation
  std::u32string lowered;
  for (char32_t c : unicode::decode_utf8(text, unicode::InvalidUtf8::kReplace)) unicode::append_lowercase(lowered, c);
  std::u32string kept;
  for (char32_t c : lowered) {
    if (!is_ascii_punctuation(c)) kept += c;
  }
  // replace the words a / an / the by a space (regex \b(a|an|the)\b: a whole run of word characters)
  std::u32string without_articles;
  for (size_t i = 0; i < kept.size();) {
    if (!is_word_character(kept[i])) {
      without_articles += kept[i++];
      continue;
    }
    size_t j = i;
    while (j < kept.size() && is_word_character(kept[j])) ++j;
    const std::u32string_view word(kept.data() + i, j - i);
    if (word == U"a" || word == U"an" || word == U"the") {
      without_articles += U' ';
    } else {
      without_articles += word;
    }
    i = j;
  }
  // ' '.join(text.split())
  std::string result;
  for (size_t i = 0; i < without_articles.size();) {
    if (is_python_space(without_articles[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < without_articles.size() && !is_python_space(without_articles[j])) ++j;
    if (!result.empty()) result += ' ';
    result += unicode::encode_utf8(std::u32string_view(without_articles.data() + i, j - i));
    i = j;
  }
  return result;
}

double squad_exact_match(std::string_view prediction, const std::vector<std::string>& gold_answers) {
  const std::string normalized = normalize_squad_answer(prediction);
  for (const std::string& gold : or_empty_answer(gold_answers)) {
    if (normalize_squad_answer(gold) == normalized) return 1.0;
  }
  return 0.0;
}

double squad_f1(std::string_view prediction, const std::vector<std::string>& gold_answers) {
  const std::vector<std::string> predicted = squad_tokens(prediction);
  double best = 0.0;
  for (const std::string& gold : or_empty_answer(gold_answers)) best = std::max(best, squad_token_f1(predicted, squad_tokens(gold)));
  return best;
}

SquadScores squad_scores(const std::vector<std::string>& predictions,
                         const std::vector<std::vector<std::string>>& gold_answers) {
  check_counts("squad_scores", predictions.size(), gold_answers.size());
  SquadScores scores;
  scores.questions = predictions.size();
  if (predictions.empty()) return scores;
  for (size_t i = 0; i < predictions.size(); ++i) {
    scores.exact_match += squad_exact_match(predictions[i], gold_answers[i]);
    scores.f1 += squad_f1(predictions[i], gold_answers[i]);
  }
  scores.exact_match /= static_cast<double>(predictions.size());
  scores.f1 /= static_cast<double>(predictions.size());
  return scores;
}

// ---------------------------------------------------------------------------------------------
double perplexity(double total_negative_log_likelihood, double token_count) {
  if (!(token_count > 0)) throw Error(fmt::format("perplexity: token_count must be positive, got {}", token_count));
  if (!std::isfinite(total_negative_log_likelihood) || total_negative_log_likelihood < 0) {
    throw Error(fmt::format("perplexity: the summed negative log-likelihood must be finite and >= 0, got {}",
                            total_negative_log_likelihood));
  }
  return std::exp(total_negative_log_likelihood / token_count);
}

UnigramBaseline unigram_baseline(const std::vector<const std::vector<int64_t>*>& rows,
                                 const std::vector<char>& excluded) {
  const auto size = static_cast<int64_t>(excluded.size());
  std::vector<int64_t> count(excluded.size(), 0);
  int64_t total = 0;
  for (const auto* row : rows)
    for (const int64_t id : *row) {
      if (id < 0 || id >= size)
        throw Error(fmt::format("unigram baseline: token id {} is outside the vocabulary [0, {})", id, size));
      if (excluded[static_cast<size_t>(id)]) continue;
      ++count[static_cast<size_t>(id)];
      ++total;
    }
  const auto kept = static_cast<int64_t>(std::count(excluded.begin(), excluded.end(), 0));
  if (kept == 0) throw Error("unigram baseline: every id of the vocabulary is excluded");
  UnigramBaseline baseline;
  baseline.log_probability.assign(excluded.size(), -std::numeric_limits<double>::infinity());
  const double denominator = std::log(static_cast<double>(total + kept));
  baseline.most_frequent = -1;
  for (size_t id = 0; id < excluded.size(); ++id) {
    if (excluded[id]) continue;
    baseline.log_probability[id] = std::log(static_cast<double>(count[id] + 1)) - denominator;
    if (baseline.most_frequent < 0 || count[id] > count[static_cast<size_t>(baseline.most_frequent)])
      baseline.most_frequent = static_cast<int64_t>(id);
  }
  return baseline;
}

// ---------------------------------------------------------------------------------------------
BleuScore corpus_bleu(const std::vector<std::vector<std::string>>& hypotheses,
                      const std::vector<std::vector<std::vector<std::string>>>& references) {
  check_counts("corpus_bleu", hypotheses.size(), references.size());
  BleuScore bleu;
  for (size_t s = 0; s < hypotheses.size(); ++s) {
    const auto& hypothesis = hypotheses[s];
    const auto& refs = references[s];
    if (refs.empty()) throw Error(fmt::format("corpus_bleu: hypothesis {} has no reference", s));
    for (size_t n = 1; n <= 4; ++n) {
      const NgramCounts counts = count_ngrams(hypothesis, n);
      NgramCounts max_reference;
      for (const auto& reference : refs) {
        for (const auto& [ngram, count] : count_ngrams(reference, n)) {
          if (counts.count(ngram) != 0) max_reference[ngram] = std::max(max_reference[ngram], count);
        }
      }
      for (const auto& [ngram, count] : counts) {
        auto it = max_reference.find(ngram);
        bleu.matches[n - 1] += it == max_reference.end() ? 0 : std::min(count, it->second);
        bleu.totals[n - 1] += count;
      }
    }
    // closest reference length, the shorter one on a tie
    const size_t c = hypothesis.size();
    size_t closest = refs[0].size();
    for (const auto& reference : refs) {
      const size_t r = reference.size();
      const size_t distance = r > c ? r - c : c - r;
      const size_t best_distance = closest > c ? closest - c : c - closest;
      if (distance < best_distance || (distance == best_distance && r < closest)) closest = r;
    }
    bleu.hypothesis_length += c;
    bleu.reference_length += closest;
  }
  const double c = static_cast<double>(bleu.hypothesis_length);
  const double r = static_cast<double>(bleu.reference_length);
  bleu.brevity_penalty = bleu.hypothesis_length > bleu.reference_length ? 1.0 : (c == 0 ? 0.0 : std::exp(1 - r / c));
  double log_sum = 0;
  bool any_zero = false;
  for (size_t n = 0; n < 4; ++n) {
    bleu.precisions[n] = ratio(bleu.matches[n], bleu.totals[n]);
    if (bleu.matches[n] == 0) {
      any_zero = true;
    } else {
      log_sum += std::log(bleu.precisions[n]);
    }
  }
  bleu.score = any_zero ? 0.0 : bleu.brevity_penalty * std::exp(log_sum / 4);
  return bleu;
}

}  // namespace attnkit::metrics

// ---------------------------------------------------------------------------------------------
// sacreBLEU
namespace attnkit::metrics {
namespace {

// Python's str.isspace() (what str.split() splits on).
bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::vector<std::u32string> python_split(const std::u32string& line) {
  std::vector<std::u32string> out;
  std::u32string word;
  for (char32_t c : line) {
    if (python_space(c)) {
      if (!word.empty()) out.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

bool ascii_digit(char32_t c) { return c >= U'0' && c <= U'9'; }

// 13a's first rule: [{-~] [[-`] [ -&] [(-+] [:-@] and '/'.
bool punctuation_13a(char32_t c) {
  return (c >= U'{' && c <= U'~') || (c >= U'[' && c <= U'`') || (c >= U' ' && c <= U'&') ||
         (c >= U'(' && c <= U'+') || (c >= U':' && c <= U'@') || c == U'/';
}

// re.sub of a two-character pattern (first, second) -> first + middle + second + after, left to
// right without overlaps; `before` goes in front of the first character.
template <typename First, typename Second>
std::u32string split_pairs(const std::u32string& s, First first, Second second, std::u32string_view before,
                           std::u32string_view middle, std::u32string_view after) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      out += before;
      out += s[i];
      out += middle;
      out += s[i + 1];
      out += after;
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::vector<std::string> tokenize_13a_u32(std::u32string line) {
  while (!line.empty() && python_space(line.back())) line.pop_back();  // sent.rstrip()
  replace_all(line, U"<skipped>", U"");
  replace_all(line, U"-\n", U"");
  replace_all(line, U"\n", U" ");
  if (line.find(U'&') != std::u32string::npos) {
    replace_all(line, U"&quot;", U"\"");
    replace_all(line, U"&amp;", U"&");
    replace_all(line, U"&lt;", U"<");
    replace_all(line, U"&gt;", U">");
  }
  std::u32string padded;
  padded.reserve(line.size() * 2 + 2);
  padded += U' ';
  for (char32_t c : line) {
    if (punctuation_13a(c)) {
      padded += U' ';
      padded += c;
      padded += U' ';
    } else {
      padded += c;
    }
  }
  padded += U' ';
  auto not_digit = [](char32_t c) { return !ascii_digit(c); };
  auto period_or_comma = [](char32_t c) { return c == U'.' || c == U','; };
  auto hyphen = [](char32_t c) { return c == U'-'; };
  std::u32string s = split_pairs(padded, not_digit, period_or_comma, U"", U" ", U" ");  // \1 \2 + ' '
  s = split_pairs(s, period_or_comma, not_digit, U" ", U" ", U"");                      // ' ' \1 ' ' \2
  s = split_pairs(s, ascii_digit, hyphen, U"", U" ", U" ");                              // \1 ' ' \2 ' '
  std::vector<std::string> tokens;
  for (const auto& word : python_split(s)) tokens.push_back(text::unicode::encode_utf8(word));
  return tokens;
}

std::u32string decode(std::string_view text) {
  return text::unicode::decode_utf8(text, text::unicode::InvalidUtf8::kReplace);
}

// One hypothesis against its references, sacreBLEU's _compute_segment_statistics.
void add_bleu_statistics(const std::vector<std::string>& hypothesis,
                         const std::vector<std::vector<std::string>>& references, BleuScore& bleu) {
  for (size_t n = 1; n <= 4; ++n) {
    NgramCounts max_reference;
    for (const auto& reference : references)
      for (const auto& [ngram, count] : count_ngrams(reference, n))
        max_reference[ngram] = std::max(max_reference[ngram], count);
    for (const auto& [ngram, count] : count_ngrams(hypothesis, n)) {
      bleu.totals[n - 1] += count;
      if (auto it = max_reference.find(ngram); it != max_reference.end())
        bleu.matches[n - 1] += std::min(count, it->second);
    }
  }
  const size_t c = hypothesis.size();
  size_t closest = 0, closest_distance = 0;
  bool first = true;
  for (const auto& reference : references) {
    const size_t r = reference.size();
    const size_t distance = r > c ? r - c : c - r;
    if (first || distance < closest_distance || (distance == closest_distance && r < closest)) {
      closest = r;
      closest_distance = distance;
      first = false;
    }
  }
  bleu.hypothesis_length += c;
  bleu.reference_length += closest;
}

constexpr int kChrfOrder = 6;
constexpr double kChrfBeta = 2;

using CharCounts = std::unordered_map<std::u32string, size_t>;

std::array<CharCounts, kChrfOrder> char_ngrams(std::string_view line) {
  std::u32string chars;
  for (char32_t c : decode(line))
    if (!python_space(c)) chars += c;
  std::array<CharCounts, kChrfOrder> out;
  for (size_t n = 1; n <= kChrfOrder; ++n)
    for (size_t i = 0; i + n <= chars.size(); ++i) ++out[n - 1][chars.substr(i, n)];
  return out;
}

// [hyp, ref, match] per order, sacreBLEU's _get_match_statistics.
using ChrfStats = std::array<std::array<size_t, 3>, kChrfOrder>;

double chrf_f_score(const ChrfStats& stats) {
  const double factor = kChrfBeta * kChrfBeta;
  double precision = 0, recall = 0;
  int effective = 0;
  for (const auto& [hyp, ref, match] : stats) {
    if (hyp > 0 && ref > 0) {
      precision += static_cast<double>(match) / static_cast<double>(hyp);
      recall += static_cast<double>(match) / static_cast<double>(ref);
      ++effective;
    }
  }
  if (effective > 0) {
    precision /= effective;
    recall /= effective;
  }
  if (precision + recall == 0) return 0.0;
  return (1 + factor) * precision * recall / (factor * precision + recall);
}

}  // namespace

std::vector<std::string> tokenize_13a(std::string_view line) { return tokenize_13a_u32(decode(line)); }

std::vector<BleuScore> sacrebleu_segment_statistics(const std::vector<std::string>& hypotheses,
                                                    const std::vector<std::vector<std::string>>& references) {
  check_counts("sacrebleu_corpus_bleu", hypotheses.size(), references.size());
  std::vector<BleuScore> segments(hypotheses.size());
  for (size_t s = 0; s < hypotheses.size(); ++s) {
    if (references[s].empty()) throw Error(fmt::format("sacrebleu_corpus_bleu: hypothesis {} has no reference", s));
    std::vector<std::vector<std::string>> refs;
    for (const auto& r : references[s]) refs.push_back(tokenize_13a(r));
    add_bleu_statistics(tokenize_13a(hypotheses[s]), refs, segments[s]);
  }
  return segments;
}

BleuScore sacrebleu_bleu_from_statistics(const BleuScore& counts) {
  BleuScore bleu;
  bleu.matches = counts.matches;
  bleu.totals = counts.totals;
  bleu.hypothesis_length = counts.hypothesis_length;
  bleu.reference_length = counts.reference_length;
  const double c = static_cast<double>(bleu.hypothesis_length);
  const double r = static_cast<double>(bleu.reference_length);
  bleu.brevity_penalty = bleu.hypothesis_length < bleu.reference_length ? (c > 0 ? std::exp(1 - r / c) : 0.0) : 1.0;
  if (std::all_of(bleu.matches.begin(), bleu.matches.end(), [](size_t m) { return m == 0; })) return bleu;
  double smooth = 1, log_sum = 0;
  bool zero = false;
  for (size_t n = 0; n < 4; ++n) {
    if (bleu.totals[n] == 0) {  // sacreBLEU stops here; the orders left keep precision 0
      zero = true;
      break;
    }
    if (bleu.matches[n] == 0) {
      smooth *= 2;
      bleu.precisions[n] = 1.0 / (smooth * static_cast<double>(bleu.totals[n]));
    } else {
      bleu.precisions[n] = static_cast<double>(bleu.matches[n]) / static_cast<double>(bleu.totals[n]);
    }
    log_sum += std::log(bleu.precisions[n]);
  }
  bleu.score = zero ? 0.0 : bleu.brevity_penalty * std::exp(log_sum / 4);
  return bleu;
}

BleuScore sacrebleu_corpus_bleu(const std::vector<std::string>& hypotheses,
                                const std::vector<std::vector<std::string>>& references) {
  BleuScore sums;
  for (const auto& segment : sacrebleu_segment_statistics(hypotheses, references)) {
    for (size_t n = 0; n < 4; ++n) {
      sums.matches[n] += segment.matches[n];
      sums.totals[n] += segment.totals[n];
    }
    sums.hypothesis_length += segment.hypothesis_length;
    sums.reference_length += segment.reference_length;
  }
  return sacrebleu_bleu_from_statistics(sums);
}

ChrfScore sacrebleu_corpus_chrf(const std::vector<std::string>& hypotheses,
                                const std::vector<std::vector<std::string>>& references) {
  check_counts("sacrebleu_corpus_chrf", hypotheses.size(), references.size());
  ChrfStats total{};
  for (size_t s = 0; s < hypotheses.size(); ++s) {
    if (references[s].empty()) throw Error(fmt::format("sacrebleu_corpus_chrf: hypothesis {} has no reference", s));
    const auto hyp = char_ngrams(hypotheses[s]);
    ChrfStats best{};
    double best_f = -1;
    for (const auto& reference : references[s]) {
      const auto ref = char_ngrams(reference);
      ChrfStats stats{};
      for (size_t n = 0; n < kChrfOrder; ++n) {
        size_t hyp_count = 0, ref_count = 0, match = 0;
        for (const auto& [ngram, count] : hyp[n]) {
          hyp_count += count;
          if (auto it = ref[n].find(ngram); it != ref[n].end()) match += std::min(count, it->second);
        }
        for (const auto& entry : ref[n]) ref_count += entry.second;
        stats[n] = {ref[n].empty() ? 0 : hyp_count, ref_count, match};
      }
      const double f = chrf_f_score(stats);
      if (f > best_f) {
        best_f = f;
        best = stats;
      }
    }
    for (size_t n = 0; n < kChrfOrder; ++n)
      for (size_t k = 0; k < 3; ++k) total[n][k] += best[n][k];
  }
  ChrfScore chrf;
  chrf.score = chrf_f_score(total);
  for (size_t n = 0; n < kChrfOrder; ++n) {
    chrf.hypothesis_ngrams[n] = total[n][0];
    chrf.reference_ngrams[n] = total[n][1];
    chrf.matches[n] = total[n][2];
  }
  return chrf;
}

std::string format_sacrebleu(const BleuScore& bleu) {
  const double ratio = bleu.reference_length ? static_cast<double>(bleu.hypothesis_length) /
                                                   static_cast<double>(bleu.reference_length)
                                             : 0.0;
  return fmt::format("BLEU = {:.2f} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len = {})",
                     100 * bleu.score, 100 * bleu.precisions[0], 100 * bleu.precisions[1],
                     100 * bleu.precisions[2], 100 * bleu.precisions[3], bleu.brevity_penalty, ratio,
                     bleu.hypothesis_length, bleu.reference_length);
}

std::string format_chrf(const ChrfScore& chrf) { return fmt::format("chrF2 = {:.2f}", 100 * chrf.score); }

}  // namespace attnkit::metrics
