#include "attnkit/decode/generation.h"

#include "attnkit/error.h"

#include "../ops/cpu/beam_kernel.h"
#include "../ops/cpu/parallel.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace attnkit::decode {

Strategy parse_strategy(const std::string& name) {
  if (name == "greedy") return Strategy::Greedy;
  if (name == "beam") return Strategy::Beam;
  if (name == "sample") return Strategy::Sample;
  throw Error(fmt::format("unknown decoding strategy '{}' (known: greedy, beam, sample)", name));
}

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::Greedy: return "greedy";
    case Strategy::Beam: return "beam";
    case Strategy::Sample: return "sample";
  }
  return "?";
}

void GenerationConfig::validate() const {
  auto fail = [](const std::string& what) { throw Error("generation config: " + what); };
  if (max_new_tokens < 0) fail(fmt::format("max_new_tokens must be >= 0, got {}", max_new_tokens));
  if (min_new_tokens < 0 || min_new_tokens > max_new_tokens)
    fail(fmt::format("min_new_tokens must lie in [0, max_new_tokens = {}], got {}", max_new_tokens,
                     min_new_tokens));
  if (strategy == Strategy::Beam && num_beams < 1)
    fail(fmt::format("num_beams must be >= 1, got {}", num_beams));
  if (num_return_sequences < 1)
    fail(fmt::format("num_return_sequences must be >= 1, got {}", num_return_sequences));
  if (strategy == Strategy::Beam && num_return_sequences > num_beams)
    fail(fmt::format("num_return_sequences ({}) must be <= num_beams ({})", num_return_sequences,
                     num_beams));
  if (strategy == Strategy::Greedy && num_return_sequences != 1)
    fail("greedy decoding returns one sequence per prompt (num_return_sequences = 1)");
  if (!(temperature > 0)) fail(fmt::format("temperature must be > 0, got {}", temperature));
  if (top_k < 0) fail(fmt::format("top_k must be >= 0, got {}", top_k));
  if (!(top_p > 0 && top_p <= 1)) fail(fmt::format("top_p must lie in (0, 1], got {}", top_p));
  if (!(min_p >= 0 && min_p <= 1)) fail(fmt::format("min_p must lie in [0, 1], got {}", min_p));
  if (!(repetition_penalty > 0))
    fail(fmt::format("repetition_penalty must be > 0, got {}", repetition_penalty));
  if (no_repeat_ngram_size < 0)
    fail(fmt::format("no_repeat_ngram_size must be >= 0, got {}", no_repeat_ngram_size));
  for (const auto& words : bad_words_ids) {
    if (words.empty()) fail("bad_words_ids: an empty token sequence");
    for (int64_t id : words)
      if (id < 0) fail(fmt::format("bad_words_ids: token id {} is negative", id));
  }
  if (!stop_strings.empty() && !detokenize)
    fail("stop strings need a tokenizer to decode the generated text");
}

// ---- filters and processors ------------------------------------------------------------------
namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}

at::Tensor top_k_filter(const at::Tensor& logits, int64_t k) {
  if (k <= 0 || k >= logits.size(-1)) return logits;
  at::Tensor kth = std::get<0>(logits.topk(k, -1)).narrow(-1, k - 1, 1);
  return logits.masked_fill(logits < kth, kNegInf);
}

at::Tensor top_p_filter(const at::Tensor& logits, double p) {
  if (p >= 1.0) return logits;
  auto sorted = logits.sort(-1, /*descending=*/true);
  at::Tensor values = std::get<0>(sorted), order = std::get<1>(sorted);
  at::Tensor probs = values.softmax(-1);
  // Mass before each token in descending order: a token is kept while that mass is still < p,
  // so the kept set is the smallest prefix whose mass reaches p (the first token always stays).
  at::Tensor before = probs.cumsum(-1) - probs;
  at::Tensor remove_sorted = before >= p;
  at::Tensor remove = at::zeros_like(remove_sorted).scatter(-1, order, remove_sorted);
  return logits.masked_fill(remove, kNegInf);
}

at::Tensor min_p_filter(const at::Tensor& logits, double min_p) {
  if (min_p <= 0.0) return logits;
  at::Tensor probs = logits.softmax(-1);
  at::Tensor top = std::get<0>(probs.max(-1, /*keepdim=*/true));
  return logits.masked_fill(probs < top * min_p, kNegInf);
}

void apply_repetition_penalty(at::Tensor& scores, const std::vector<int64_t>& history,
                              double penalty) {
  if (penalty == 1.0 || history.empty()) return;
  std::vector<int64_t> unique = history;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  at::Tensor ids = at::tensor(unique, at::kLong);
  at::Tensor seen = scores.index_select(0, ids);
  seen = at::where(seen < 0, seen * penalty, seen / penalty);
  scores.index_copy_(0, ids, seen);
}

std::vector<int64_t> banned_ngram_tokens(const std::vector<int64_t>& history, int64_t n) {
  std::vector<int64_t> banned;
  const auto len = static_cast<int64_t>(history.size());
  if (n <= 0 || len + 1 < n) return banned;
  // The last n − 1 tokens, looked up among every earlier n-gram's first n − 1.
  for (int64_t start = 0; start + n <= len; ++start) {
    bool match = true;
    for (int64_t i = 0; i < n - 1 && match; ++i)
      match = history[start + i] == history[len - (n - 1) + i];
    if (match) banned.push_back(history[start + n - 1]);
  }
  return banned;
}

namespace {

// Tokens that would complete one of config.bad_words_ids after `history` (HF's
// NoBadWordsLogitsProcessor: sequences equal to [eos] are dropped from the list).
std::vector<int64_t> banned_bad_words(const std::vector<int64_t>& history,
                                      const GenerationConfig& config) {
  std::vector<int64_t> banned;
  for (const auto& words : config.bad_words_ids) {
    if (words.size() == 1 && std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(),
                                       words[0]) != config.eos_token_ids.end())
      continue;
    const size_t prefix = words.size() - 1;
    if (prefix > history.size()) continue;
    if (std::equal(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(prefix),
                   history.end() - static_cast<std::ptrdiff_t>(prefix)))
      banned.push_back(words.back());
  }
  return banned;
}

// process()'s masks on contiguous rows [rows, vocab] of float or double scores, in place: each
// row's banned n-gram and bad-word tokens, then min-length's end tokens, then a forced token (every
// other score -inf, its own 0).
template <typename T>
void mask_scores(T* scores, int64_t rows, int64_t vocab,
                 const std::vector<std::vector<int64_t>>& histories, int64_t step,
                 const GenerationConfig& config) {
  const T neg = -std::numeric_limits<T>::infinity();
  auto in_range = [vocab](int64_t token) { return token >= 0 && token < vocab; };
  for (int64_t r = 0; r < rows; ++r) {
    T* row = scores + r * vocab;
    for (int64_t token : banned_ngram_tokens(histories[r], config.no_repeat_ngram_size))
      if (in_range(token)) row[token] = neg;
    for (int64_t token : banned_bad_words(histories[r], config))
      if (in_range(token)) row[token] = neg;
  }
  if (step < config.min_new_tokens)
    for (int64_t eos : config.eos_token_ids)
      if (in_range(eos))
        for (int64_t r = 0; r < rows; ++r) scores[r * vocab + eos] = neg;
  auto force = [&](int64_t token) {
    if (!in_range(token)) return;
    std::fill(scores, scores + rows * vocab, neg);
    for (int64_t r = 0; r < rows; ++r) scores[r * vocab + token] = T(0);
  };
  // HF forces BOS at cur_len == 1: when every prompt is one token (an encoder-decoder's start).
  if (step == 0 && config.forced_bos_token_id >= 0 &&
      std::all_of(histories.begin(), histories.end(), [](const auto& h) { return h.size() == 1; }))
    force(config.forced_bos_token_id);
  if (step == config.max_new_tokens - 1 && config.forced_eos_token_id >= 0)
    force(config.forced_eos_token_id);
}

// The processors, row by row, on scores [rows, vocab] (in place): the repetition penalty, then
// mask_scores.
void process(at::Tensor& scores, const std::vector<std::vector<int64_t>>& histories, int64_t step,
             const GenerationConfig& config) {
  scores = scores.contiguous();
  const int64_t rows = scores.size(0), vocab = scores.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    at::Tensor row = scores[r];
    apply_repetition_penalty(row, histories[r], config.repetition_penalty);
  }
  if (scores.scalar_type() == at::kFloat) {
    mask_scores(scores.data_ptr<float>(), rows, vocab, histories, step, config);
  } else if (scores.scalar_type() == at::kDouble) {
    mask_scores(scores.data_ptr<double>(), rows, vocab, histories, step, config);
  } else {
    at::Tensor wide = scores.to(at::kDouble);
    mask_scores(wide.data_ptr<double>(), rows, vocab, histories, step, config);
    scores.copy_(wide);
  }
}

// Whether any processor may change step `step`'s scores (process() would be the identity
// otherwise; conservative).
bool processors_active(const GenerationConfig& config, int64_t step) {
  return config.repetition_penalty != 1.0 || config.no_repeat_ngram_size > 0 ||
         !config.bad_words_ids.empty() ||
         (step < config.min_new_tokens && !config.eos_token_ids.empty()) ||
         (step == 0 && config.forced_bos_token_id >= 0) ||
         (step == config.max_new_tokens - 1 && config.forced_eos_token_id >= 0);
}

// Greedy's choice (after any masking processors): per row of logits [R, V] (contiguous), the first
// largest logit (a NaN counts as largest, as ATen's argmax has it), read in place; float rows
// through the vectorised kernel. Rows split over the threads.
void argmax_rows(const float* logits, int64_t R, int64_t V, std::vector<int64_t>& token) {
  ops::cpu::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) token[static_cast<size_t>(r)] = ops::cpu::argmax_row(logits + r * V, V);
  });
}
void argmax_rows(const double* logits, int64_t R, int64_t V, std::vector<int64_t>& token) {
  ops::cpu::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const double* x = logits + r * V;
      int64_t best = 0;
      for (int64_t i = 1; i < V && !std::isnan(x[best]); ++i)
        if (x[i] > x[best] || std::isnan(x[i])) best = i;
      token[static_cast<size_t>(r)] = best;
    }
  });
}

// The step's token and its log-probability per row: greedy without processors takes the argmax of
// the logits in place; otherwise the processors, the sampling warpers and the choice work on one
// double copy. No .item() per row: the values are read from the tensors' memory.
void choose_tokens(const at::Tensor& logits, const std::vector<std::vector<int64_t>>& histories,
                   int64_t step, const GenerationConfig& config,
                   c10::optional<at::Generator>& generator, std::vector<int64_t>& token,
                   std::vector<double>& logp) {
  const int64_t R = logits.size(0), V = logits.size(1);
  token.assign(static_cast<size_t>(R), 0);
  logp.assign(static_cast<size_t>(R), 0.0);
  if (config.strategy == Strategy::Greedy && V > 0 && logits.scalar_type() == at::kFloat &&
      config.repetition_penalty == 1.0) {
    // Greedy over float32 logits: processors that only mask tokens (all but the repetition
    // penalty) write -inf into a copy; then the argmax, read off the rows, and the chosen tokens'
    // log-probabilities through the beam search's float log-softmax (ops::cpu::log_softmax_at).
    // The double path below took a conversion, ATen's processors and a log-softmax in double over
    // the vocabulary: ~10% of an int8 Marian greedy cell held to AVX2 (whose bad_words_ids and
    // --min-new-tokens keep processors active at every step).
    at::Tensor x = logits.contiguous();
    if (processors_active(config, step)) {
      x = x.clone();
      mask_scores(x.data_ptr<float>(), R, V, histories, step, config);
    }
    const float* data = x.data_ptr<float>();
    argmax_rows(data, R, V, token);
    ops::cpu::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        logp[static_cast<size_t>(r)] = ops::cpu::log_softmax_at(data + r * V, V, token[static_cast<size_t>(r)]);
    });
    return;
  }
  if (config.strategy == Strategy::Greedy && !processors_active(config, step) && V > 0 &&
      logits.scalar_type() == at::kDouble) {
    // Double logits: the argmax in place and one log-softmax (the processed path's arithmetic).
    const at::Tensor x = logits.contiguous();
    argmax_rows(x.data_ptr<double>(), R, V, token);
    const at::Tensor log_probs = x.log_softmax(-1).contiguous();
    const double* lp = log_probs.data_ptr<double>();
    for (int64_t r = 0; r < R; ++r) logp[static_cast<size_t>(r)] = lp[r * V + token[static_cast<size_t>(r)]];
    return;
  }
  at::Tensor scores =
      logits.scalar_type() == at::kDouble ? logits.clone() : logits.to(at::kDouble);
  process(scores, histories, step, config);
  if (config.strategy == Strategy::Sample) {
    scores = scores / config.temperature;
    scores = top_k_filter(scores, config.top_k);
    scores = top_p_filter(scores, config.top_p);
    scores = min_p_filter(scores, config.min_p);
  }
  const at::Tensor log_probs = scores.log_softmax(-1).contiguous();
  const at::Tensor next =
      (config.strategy == Strategy::Sample
           ? at::multinomial(log_probs.exp(), 1, false, generator).view({-1})
           : scores.argmax(-1))
          .contiguous();
  const int64_t* next_p = next.data_ptr<int64_t>();
  const double* lp = log_probs.data_ptr<double>();
  for (int64_t r = 0; r < R; ++r) {
    token[static_cast<size_t>(r)] = next_p[r];
    logp[static_cast<size_t>(r)] = lp[r * V + next_p[r]];
  }
}

bool is_eos(const GenerationConfig& config, int64_t token) {
  return std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), token) !=
         config.eos_token_ids.end();
}

struct Batch {
  at::Tensor ids, valid, positions;
  std::vector<int64_t> lengths;
};

Batch left_padded(const std::vector<std::vector<int64_t>>& prompts, int64_t pad) {
  Batch b;
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw Error(fmt::format("generate: prompt {} is empty", i));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[i].size()));
  }
  const auto B = static_cast<int64_t>(prompts.size());
  b.ids = at::full({B, longest}, pad, at::kLong);
  b.valid = at::zeros({B, longest}, at::kBool);
  b.positions = at::zeros({B, longest}, at::kLong);
  auto ids = b.ids.accessor<int64_t, 2>();
  auto valid = b.valid.accessor<bool, 2>();
  auto pos = b.positions.accessor<int64_t, 2>();
  for (int64_t r = 0; r < B; ++r) {
    const auto n = static_cast<int64_t>(prompts[r].size());
    for (int64_t i = 0; i < n; ++i) {
      ids[r][longest - n + i] = prompts[r][i];
      valid[r][longest - n + i] = true;
      pos[r][longest - n + i] = i;
    }
    b.lengths.push_back(n);
  }
  return b;
}

// One column for every row: the chosen tokens at positions `lengths`.
at::Tensor column(const std::vector<int64_t>& values) {
  return at::tensor(values, at::kLong).view({-1, 1});
}

// ---- greedy and sampling ---------------------------------------------------------------------
std::vector<std::vector<Hypothesis>> generate_simple(LanguageModel& model,
                                                     const std::vector<std::vector<int64_t>>& prompts,
                                                     const GenerationConfig& config) {
  const int64_t P = static_cast<int64_t>(prompts.size());
  const int64_t copies = config.strategy == Strategy::Sample ? config.num_return_sequences : 1;
  std::vector<std::vector<int64_t>> rows_prompts;
  for (const auto& p : prompts)
    for (int64_t c = 0; c < copies; ++c) rows_prompts.push_back(p);
  const int64_t R = P * copies;
  Batch batch = left_padded(prompts, config.pad_token_id);
  const int64_t width = batch.ids.size(1);
  model.start(P, width + std::max<int64_t>(config.max_new_tokens, 1));
  at::Tensor logits = model.forward(batch.ids, batch.valid, batch.positions);
  if (copies > 1) {
    at::Tensor index = at::arange(P, at::kLong).repeat_interleave(copies);
    model.select_rows(index);
    logits = logits.index_select(0, index);
  }
  std::vector<std::vector<int64_t>> histories = rows_prompts;
  std::vector<int64_t> lengths;
  for (const auto& p : rows_prompts) lengths.push_back(static_cast<int64_t>(p.size()));
  std::vector<Hypothesis> out(R);
  std::vector<bool> finished(R, false);
  c10::optional<at::Generator> generator;
  if (config.strategy == Strategy::Sample)
    generator = at::make_generator<at::CPUGeneratorImpl>(config.seed);

  std::vector<int64_t> next;
  std::vector<double> next_logp;
  const at::Tensor all_valid = at::ones({R, 1}, at::kBool);
  for (int64_t step = 0; step < config.max_new_tokens; ++step) {
    choose_tokens(logits, histories, step, config, generator, next, next_logp);
    std::vector<int64_t> chosen(R);
    bool all_done = true;
    for (int64_t r = 0; r < R; ++r) {
      if (finished[r]) {
        chosen[r] = config.pad_token_id;
        continue;
      }
      const int64_t token = next[r];
      chosen[r] = token;
      out[r].tokens.push_back(token);
      out[r].score += next_logp[r];
      histories[r].push_back(token);
      if (config.on_token) config.on_token(r / copies, token);
      if (is_eos(config, token)) finished[r] = true;
      if (!finished[r] && !config.stop_strings.empty()) {
        const std::string text = config.detokenize(out[r].tokens);
        for (const auto& stop : config.stop_strings)
          if (!stop.empty() && text.find(stop) != std::string::npos) finished[r] = true;
      }
      all_done = all_done && finished[r];
    }
    if (all_done || step + 1 == config.max_new_tokens) break;
    std::vector<int64_t> positions(R);
    for (int64_t r = 0; r < R; ++r) positions[r] = lengths[r] + step;
    logits = model.forward(column(chosen), all_valid, column(positions));
  }
  std::vector<std::vector<Hypothesis>> result(P);
  for (int64_t r = 0; r < R; ++r) result[r / copies].push_back(std::move(out[r]));
  return result;
}

// ---- beam search (transformers 4.38 BeamSearchScorer) ---------------------------------------
struct BeamHypotheses {
  int64_t num_beams;
  double length_penalty;
  bool early_stopping;
  std::vector<Hypothesis> beams;
  double worst = 1e9;

  void add(std::vector<int64_t> tokens, double sum_logprobs, int64_t generated_len) {
    const double score = sum_logprobs / std::pow(double(generated_len), length_penalty);
    if (static_cast<int64_t>(beams.size()) < num_beams || score > worst) {
      beams.push_back({std::move(tokens), score});
      if (static_cast<int64_t>(beams.size()) > num_beams) {
        // Drop the worst; the new worst is the second worst (HF's sorted scores [1]).
        std::vector<std::pair<double, size_t>> sorted;
        for (size_t i = 0; i < beams.size(); ++i) sorted.push_back({beams[i].score, i});
        std::sort(sorted.begin(), sorted.end());
        beams.erase(beams.begin() + static_cast<std::ptrdiff_t>(sorted[0].second));
        worst = sorted[1].first;
      } else {
        worst = std::min(score, worst);
      }
    }
  }
  bool is_done(double best_sum_logprobs, int64_t generated_len) const {
    if (static_cast<int64_t>(beams.size()) < num_beams) return false;
    if (early_stopping) return true;
    return worst >= best_sum_logprobs / std::pow(double(generated_len), length_penalty);
  }
};

// log_softmax over the last dimension of logits [R, V]: in place through the kernel for
// contiguous float32 logits (the model's fresh output), rows split over the threads; ATen's
// otherwise.
at::Tensor log_softmax_rows(at::Tensor logits) {
  if (logits.scalar_type() != at::kFloat || !logits.is_contiguous() || logits.requires_grad() ||
      logits.dim() != 2)
    return logits.log_softmax(-1);
  float* data = logits.data_ptr<float>();
  const int64_t V = logits.size(1);
  ops::cpu::parallel_for(0, logits.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) ops::cpu::log_softmax_row(data + r * V, V);
  });
  return logits;
}

// The `count` best (score, flat id = k · V + v) of scores [P·K, V] + beam_scores [P·K] per source,
// row-major [P, count], as topk over the [P, K·V] sum returns them.
struct BeamTop {
  int64_t count = 0;
  std::vector<double> scores;
  std::vector<int64_t> ids;
};

BeamTop beam_top(const at::Tensor& scores, const at::Tensor& beam_scores, int64_t P, int64_t K,
                 int64_t count) {
  BeamTop top;
  top.count = count;
  top.scores.resize(P * count);
  top.ids.resize(P * count);
  const int64_t V = scores.size(1);
  if (scores.scalar_type() == at::kFloat && scores.is_contiguous() &&
      beam_scores.scalar_type() == at::kFloat) {
    const at::Tensor bs = beam_scores.contiguous();
    const float* sp = scores.data_ptr<float>();
    const float* bp = bs.data_ptr<float>();
    std::atomic<bool> short_of_candidates{false};
    ops::cpu::parallel_for(0, P, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const auto found = ops::cpu::beam_candidates(sp + b * K * V, V, K, V, bp + b * K, count);
        if (static_cast<int64_t>(found.size()) < count) {  // NaN scores: ATen ranks them
          short_of_candidates = true;
          continue;
        }
        for (int64_t rank = 0; rank < count; ++rank) {
          top.scores[b * count + rank] = found[rank].score;
          top.ids[b * count + rank] = found[rank].index;
        }
      }
    });
    if (!short_of_candidates) return top;
  }
  at::Tensor total = (scores + beam_scores.unsqueeze(1)).view({P, K * V});
  auto [values, ids] = total.topk(count, 1, true, true);
  values = values.to(at::kDouble).contiguous();
  ids = ids.contiguous();
  std::copy(values.data_ptr<double>(), values.data_ptr<double>() + P * count, top.scores.begin());
  std::copy(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + P * count, top.ids.begin());
  return top;
}

std::vector<std::vector<Hypothesis>> generate_beam(LanguageModel& model,
                                                   const std::vector<std::vector<int64_t>>& prompts,
                                                   const GenerationConfig& config) {
  const int64_t P = static_cast<int64_t>(prompts.size()), K = config.num_beams;
  const int64_t R = P * K;
  Batch batch = left_padded(prompts, config.pad_token_id);
  const int64_t width = batch.ids.size(1);
  model.start(P, width + std::max<int64_t>(config.max_new_tokens, 1));
  at::Tensor logits = model.forward(batch.ids, batch.valid, batch.positions);
  at::Tensor expand = at::arange(P, at::kLong).repeat_interleave(K);
  model.select_rows(expand);
  logits = logits.index_select(0, expand);

  std::vector<std::vector<int64_t>> histories, generated(R);
  std::vector<int64_t> lengths;
  for (int64_t r = 0; r < R; ++r) {
    histories.push_back(prompts[r / K]);
    lengths.push_back(static_cast<int64_t>(prompts[r / K].size()));
  }
  at::Tensor beam_scores = at::zeros({P, K}, logits.scalar_type());
  beam_scores.narrow(1, 1, K - 1).fill_(-1e9);
  beam_scores = beam_scores.view({-1});
  std::vector<BeamHypotheses> hyps(P, BeamHypotheses{K, config.length_penalty,
                                                     config.early_stopping, {}, 1e9});
  std::vector<bool> done(P, false);
  const int64_t n_eos = static_cast<int64_t>(config.eos_token_ids.size());
  const int64_t candidates = std::max<int64_t>(2, 1 + n_eos) * K;
  int64_t steps = 0;

  for (int64_t step = 0; step < config.max_new_tokens; ++step) {
    steps = step + 1;
    const int64_t V = logits.size(1);
    at::Tensor scores = log_softmax_rows(logits);
    process(scores, histories, step, config);
    const BeamTop top = beam_top(scores, beam_scores, P, K, std::min<int64_t>(candidates, K * V));
    const auto ts = [&](int64_t b, int64_t rank) { return top.scores[b * top.count + rank]; };
    const auto ti = [&](int64_t b, int64_t rank) { return top.ids[b * top.count + rank]; };
    std::vector<double> next_scores(R, 0.0);
    std::vector<int64_t> next_tokens(R, config.pad_token_id), next_rows(R, 0);
    for (int64_t b = 0; b < P; ++b) {
      if (done[b]) {
        for (int64_t k = 0; k < K; ++k) next_rows[b * K + k] = b * K + k;
        continue;
      }
      int64_t beam = 0;
      for (int64_t rank = 0; rank < top.count; ++rank) {
        const int64_t token = ti(b, rank) % V, row = b * K + ti(b, rank) / V;
        if (is_eos(config, token)) {
          if (rank >= K) continue;
          std::vector<int64_t> tokens = generated[row];
          tokens.push_back(token);
          hyps[b].add(std::move(tokens), ts(b, rank), step + 1);
        } else {
          next_scores[b * K + beam] = ts(b, rank);
          next_tokens[b * K + beam] = token;
          next_rows[b * K + beam] = row;
          ++beam;
        }
        if (beam == K) break;
      }
      if (beam < K) throw Error("generate: too few non-EOS beam candidates");
      double best = ts(b, 0);
      done[b] = done[b] || hyps[b].is_done(best, step + 1);
    }
    // Reorder and extend.
    std::vector<std::vector<int64_t>> new_hist(R), new_gen(R);
    for (int64_t r = 0; r < R; ++r) {
      new_hist[r] = histories[next_rows[r]];
      new_hist[r].push_back(next_tokens[r]);
      new_gen[r] = generated[next_rows[r]];
      new_gen[r].push_back(next_tokens[r]);
    }
    histories = std::move(new_hist);
    generated = std::move(new_gen);
    beam_scores = at::tensor(next_scores, at::kDouble).to(logits.scalar_type());
    const bool all_done = std::all_of(done.begin(), done.end(), [](bool d) { return d; });
    if (all_done || step + 1 == config.max_new_tokens) break;
    at::Tensor index = at::tensor(next_rows, at::kLong);
    model.select_rows(index);
    std::vector<int64_t> positions(R);
    for (int64_t r = 0; r < R; ++r) positions[r] = lengths[r] + step;
    logits = model.forward(column(next_tokens), at::ones({R, 1}, at::kBool), column(positions));
  }
  auto final_scores = beam_scores.to(at::kDouble);
  std::vector<std::vector<Hypothesis>> result(P);
  for (int64_t b = 0; b < P; ++b) {
    if (!done[b])
      for (int64_t k = 0; k < K; ++k)
        hyps[b].add(generated[b * K + k], final_scores[b * K + k].item<double>(), steps);
    auto beams = hyps[b].beams;
    std::stable_sort(beams.begin(), beams.end(),
                     [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
    beams.resize(std::min<size_t>(beams.size(), static_cast<size_t>(config.num_return_sequences)));
    if (config.on_token && !beams.empty())
      for (int64_t token : beams[0].tokens) config.on_token(b, token);
    result[b] = std::move(beams);
  }
  return result;
}

}  // namespace

std::vector<std::vector<Hypothesis>> generate(LanguageModel& model,
                                              const std::vector<std::vector<int64_t>>& prompts,
                                              const GenerationConfig& config) {
  config.validate();
  if (prompts.empty()) return {};
  if (config.max_new_tokens == 0) return std::vector<std::vector<Hypothesis>>(prompts.size(), {Hypothesis{}});
  if (config.strategy == Strategy::Beam) return generate_beam(model, prompts, config);
  return generate_simple(model, prompts, config);
}

}  // namespace attnkit::decode
