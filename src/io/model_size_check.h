#pragma once
// A config must not make attnkit allocate a model far larger than the weights file that is to fill
// it: a config.json (or attnkit_config metadata) claiming hidden = 10^6 next to a 1 MB
// model.safetensors is refused before any allocation, naming both files.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "attnkit/error.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/task_model.h"

namespace attnkit::io::detail {

// A lower estimate of the parameters (elements) `config` and `heads` need stored: word embeddings,
// learned positions, each distinct block's value/output projections and feed-forward, the
// classifier heads. Computed in double, so no overflow.
inline double stored_parameters_estimate(const models::TransformerConfig& c, const models::HeadsConfig& h) {
  const double hidden = static_cast<double>(std::max<int64_t>(c.hidden, 0));
  const double blocks = static_cast<double>(c.share_layers ? std::max<int64_t>(c.layer_groups, 1) : c.layers);
  const double heads = static_cast<double>(std::max<int64_t>(c.heads, 1));
  const double value_width =
      c.attention.value_size > 0 ? heads * static_cast<double>(c.attention.value_size) : hidden;
  double total = static_cast<double>(c.vocab_size) * static_cast<double>(c.effective_embedding_size());
  if (c.positions == layers::PositionEncoding::Learned) total += static_cast<double>(c.max_positions) * hidden;
  total += blocks * (2 * hidden * value_width + 2 * hidden * static_cast<double>(c.intermediate));
  total += hidden * static_cast<double>(std::max<int64_t>(h.next_sentence, 0) + std::max<int64_t>(h.sequence_labels, 0) +
                                        std::max<int64_t>(h.token_labels, 0) + std::max<int64_t>(h.condition_classes, 0));
  return total;
}

// Throws attnkit::Error "CONFIG: the config describes a model of about N parameters, but WEIGHTS
// holds only M values" when the estimate (summed over the model's stacks) exceeds 4 x the file's
// values + 2^20 (room for kinds that store less, pruned heads, sinusoidal tables).
inline void check_config_fits_weights(
    const std::vector<std::pair<models::TransformerConfig, models::HeadsConfig>>& stacks,
    const std::vector<TensorEntry>& entries, const std::string& weights_path,
    const std::string& config_where) {
  double stored = 0;
  for (const TensorEntry& entry : entries) {
    double elements = 1;
    for (int64_t size : entry.shape) elements *= static_cast<double>(size);
    stored += elements;
  }
  double needed = 0;
  for (const auto& [config, heads] : stacks) needed += stored_parameters_estimate(config, heads);
  if (needed > 4 * stored + static_cast<double>(1 << 20))
    throw Error(fmt::format("{}: the config describes a model of about {:.3g} parameters, but {} holds only {:.0f} values "
                            "(a config that does not match its weights)",
                            config_where, needed, weights_path, stored));
}

inline void check_config_fits_weights(
    const std::vector<std::pair<models::TransformerConfig, models::HeadsConfig>>& stacks,
    const SafetensorsFile& weights, const std::string& config_where) {
  check_config_fits_weights(stacks, weights.entries(), weights.path(), config_where);
}

inline void check_config_fits_weights(const models::TransformerConfig& config, const models::HeadsConfig& heads,
                                      const SafetensorsFile& weights, const std::string& config_where) {
  check_config_fits_weights({{config, heads}}, weights, config_where);
}

}  // namespace attnkit::io::detail
