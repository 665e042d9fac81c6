#include "attnkit/train/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "attnkit/error.h"
#include "attnkit/text/unicode.h"

namespace attnkit::train {
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

}  // namespace attnkit::train
