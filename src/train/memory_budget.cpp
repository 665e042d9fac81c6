#include "attnkit/train/memory_budget.h"

#include "attnkit/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

namespace attnkit::train {
namespace {

double d(int64_t v) { return static_cast<double>(std::max<int64_t>(v, 0)); }

bool uses(const layers::AttentionSpec& spec, AttentionKind kind) {
  return spec.kind == kind || (spec.kind == AttentionKind::Mixture &&
                               std::find(spec.mixture.begin(), spec.mixture.end(), kind) != spec.mixture.end());
}

// One attention layer of `hidden` over keys of width `memory` (projections, talking-heads
// mixing, synthesizer tables). Q and K are counted for every kind: at most 2·hidden² too many
// for the synthesizers that have none.
double attention_parameters(const layers::AttentionSpec& spec, double hidden, double memory, double heads) {
  const double key = spec.key_size > 0 ? d(spec.key_size) : hidden / heads;
  const double value = spec.value_size > 0 ? d(spec.value_size) : hidden / heads;
  const double bias = spec.bias ? 1 : 0;
  double total = hidden * heads * key + memory * heads * key + memory * heads * value + heads * value * hidden;
  total += bias * (2 * heads * key + heads * value + hidden);
  if (spec.talking_heads) total += 2 * heads * heads;
  const double n = d(spec.max_length), width = d(spec.synthesizer_hidden);
  if (uses(spec, AttentionKind::SynthesizerDense)) total += heads * (key * width + width + width * n + n);
  if (uses(spec, AttentionKind::SynthesizerRandom)) total += heads * n * n;
  if (uses(spec, AttentionKind::SynthesizerFactorizedDense)) total += 2 * heads * key * std::ceil(std::sqrt(n));
  if (uses(spec, AttentionKind::SynthesizerFactorizedRandom)) total += 2 * heads * n * d(spec.factor_rank);
  return total;
}

// Buffers that hold values but take no gradient: the sinusoid table, fixed random logits.
double buffer_values(const models::TransformerConfig& c) {
  double total = 0;
  if (c.positions == layers::PositionEncoding::Sinusoidal ||
      c.positions == layers::PositionEncoding::SinusoidalHalves)
    total += d(c.max_positions) * d(c.effective_embedding_size());
  if (uses(c.attention, AttentionKind::SynthesizerRandomFixed))
    total += d(c.share_layers ? c.layer_groups : c.layers) * d(c.heads) * d(c.attention.max_length) * d(c.attention.max_length);
  return total;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The first number in `path`; nullopt when the file is missing or says "max".
std::optional<double> read_number(const std::string& path) {
  std::istringstream in(read_text(path));
  double v;
  if (in >> v) return v;
  return std::nullopt;
}

// The value of `key` in a memory.stat file ("key value" lines); 0 when absent.
double stat_value(const std::string& path, const std::string& key) {
  std::istringstream in(read_text(path));
  std::string name;
  double value;
  while (in >> name >> value)
    if (name == key) return value;
  return 0;
}

// The free part of a cgroup limit: walks from the process's cgroup up to the hierarchy's root
// and keeps the tightest limit − usage. Usage counts the page cache, which the kernel reclaims
// before it fails an allocation (a build or a data set read just before would otherwise look like
// a full cgroup), so the file pages of memory.stat ("file" in v2, "total_cache" in v1) are taken
// out of it, as MemAvailable does for the machine. v1 reports "no limit" as a number near 2^63.
struct CgroupFree {
  double free = 0, limit = 0, used = 0;
};
std::optional<CgroupFree> cgroup_free(const std::string& root) {
  const std::string cgroup_file = read_text(root + "/proc/self/cgroup");
  std::istringstream lines(cgroup_file);
  std::string line;
  std::optional<CgroupFree> best;
  // `base` + `path`, then each ancestor up to `base` itself.
  auto consider = [&](const std::string& base, std::string path, const char* limit_name, const char* usage_name,
                      const char* cache_key) {
    while (true) {
      const std::string dir = base + path;
      if (auto limit = read_number(dir + "/" + limit_name); limit && *limit < 1e18) {
        const double used = std::max(0.0, read_number(dir + "/" + usage_name).value_or(0) -
                                              stat_value(dir + "/memory.stat", cache_key));
        const double free = std::max(0.0, *limit - used);
        if (!best || free < best->free) best = CgroupFree{free, *limit, used};
      }
      if (path.empty()) break;
      path = path.substr(0, path.rfind('/'));
    }
  };
  while (std::getline(lines, line)) {
    // "hierarchy-ID:controller-list:cgroup-path"; v2 is "0::/path".
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    while (!path.empty() && path.back() == '/') path.pop_back();
    if (controllers.empty()) {
      consider(root + "/sys/fs/cgroup", path, "memory.max", "memory.current", "file");
      consider(root + "/sys/fs/cgroup/unified", path, "memory.max", "memory.current", "file");
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      consider(root + "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_cache");
    }
  }
  return best;
}

// Which settings the largest part of the model comes from, for the message.
double block_parameters(const models::TransformerConfig& c) {
  const double hidden = d(c.hidden), heads = std::max(1.0, d(c.heads));
  const double condition = d(c.condition_size);
  const double norm = 2 * hidden + 2 * condition * hidden;  // LayerNorm (+ Conditional LN's maps)
  double block = attention_parameters(c.attention, hidden, hidden, heads) + 2 * hidden * d(c.intermediate) +
                 d(c.intermediate) + hidden + 2 * norm;
  if (c.cross_attention)
    block += attention_parameters(c.cross_attention_spec, hidden, c.memory_hidden > 0 ? d(c.memory_hidden) : hidden,
                                  heads) + norm;
  return block;
}

}  // namespace

double parameters_estimate(const models::TransformerConfig& c, const models::HeadsConfig& h) {
  const double hidden = d(c.hidden), E = d(c.effective_embedding_size()), vocab = d(c.vocab_size);
  const double condition = d(c.condition_size);
  double total = vocab * E;
  if (c.positions == layers::PositionEncoding::Learned) total += d(c.max_positions) * E;
  total += d(c.type_vocab_size) * E;
  if (c.embedding_layer_norm) total += 2 * E + 2 * condition * E;
  if (E != hidden) total += E * hidden + hidden;
  total += d(c.share_layers ? c.layer_groups : c.layers) * block_parameters(c);
  if (c.final_layer_norm) total += 2 * hidden + 2 * condition * hidden;
  if (c.pooler) total += hidden * hidden + hidden;
  if (h.masked_lm) total += hidden * E + E + 2 * E + vocab + (h.tie_lm ? 0 : vocab * E);
  if (h.causal_lm && !h.tie_lm) total += vocab * hidden;
  if (h.query_stream) total += E;  // XLNet's query-stream start vector
  total += (hidden + 1) * (d(h.next_sentence) + d(h.sequence_labels) + d(h.token_labels) + (h.span ? 2 : 0));
  total += d(h.condition_classes) * condition;
  return total;
}

int64_t training_copies(const TrainerOptions& options) {
  int64_t copies = 2;  // weights, gradients
  switch (options.optimizer.kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam: copies += 2; break;
    case OptimizerKind::kSgd: copies += options.optimizer.momentum > 0 ? 1 : 0; break;
  }
  if (options.ema_decay > 0) copies += 1;
  return copies;
}

std::optional<MemoryBudget> memory_budget(const std::string& root) {
  std::optional<MemoryBudget> budget;
  std::istringstream meminfo(read_text(root + "/proc/meminfo"));
  std::string key;
  double kilobytes;
  while (meminfo >> key >> kilobytes) {
    if (key == "MemAvailable:") {
      budget = MemoryBudget{kilobytes * 1024, "MemAvailable"};
      break;
    }
    std::string rest;
    std::getline(meminfo, rest);
  }
  if (auto cgroup = cgroup_free(root); cgroup && (!budget || cgroup->free < budget->bytes))
    budget = MemoryBudget{cgroup->free, fmt::format("the cgroup limit of {} less {} in use", format_bytes(cgroup->limit),
                                                    format_bytes(cgroup->used))};
  return budget;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  size_t unit = 0;
  while (bytes >= 1000 && unit + 1 < std::size(units)) {
    bytes /= 1000;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format(fmt::runtime(bytes >= 100 ? "{:.0f} {}" : bytes >= 10 ? "{:.1f} {}" : "{:.2f} {}"), bytes,
                     units[unit]);
}

namespace {

void check_needed(double parameters, double buffers, const TrainerOptions& options, const std::string& what,
                  const std::optional<MemoryBudget>& budget) {
  if (!budget) return;
  const int64_t copies = training_copies(options);
  const double needed = (parameters * static_cast<double>(copies) + buffers) * 4;
  if (needed <= budget->bytes) return;
  const std::string optimiser = options.optimizer.kind == OptimizerKind::kSgd
                                    ? (options.optimizer.momentum > 0 ? ", SGD momentum" : "")
                                    : ", " + to_string(options.optimizer.kind) + "'s two moments";
  throw Error(fmt::format("{}: training needs about {} ({:.3g} parameters x {} float32 copies: weights, gradients{}{}), "
                          "more than the {} this process may use ({})",
                          what, format_bytes(needed), parameters, copies, optimiser,
                          options.ema_decay > 0 ? ", EMA" : "", format_bytes(budget->bytes), budget->source));
}

}  // namespace

void check_training_memory(const models::TransformerConfig& config, const models::HeadsConfig& heads,
                           const TrainerOptions& options, const std::string& what,
                           const std::optional<MemoryBudget>& budget) {
  if (!budget) return;
  check_needed(parameters_estimate(config, heads), buffer_values(config), options, what, budget);
}

double parameters_estimate(const models::EncoderDecoderConfig& config) {
  models::HeadsConfig none, lm;
  lm.causal_lm = true;
  lm.tie_lm = config.tie_output;
  double total = parameters_estimate(config.encoder, none) + parameters_estimate(config.decoder, lm);
  if (config.share_embeddings) total -= d(config.decoder.vocab_size) * d(config.decoder.effective_embedding_size());
  return total;
}

void check_training_memory(const models::EncoderDecoderConfig& config, const TrainerOptions& options,
                           const std::string& what, const std::optional<MemoryBudget>& budget) {
  if (!budget) return;
  check_needed(parameters_estimate(config), buffer_values(config.encoder) + buffer_values(config.decoder), options,
               what, budget);
}

}  // namespace attnkit::train
