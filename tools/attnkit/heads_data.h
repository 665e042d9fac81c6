#pragma once
// The data files of `attnkit analyze heads`, `prune` and `linearize` as the model's task takes
// them (heads_command.cpp): an encoder-decoder's translation pairs, a classifier's labelled
// examples, a causal language model's text in windows of --max-length tokens.
#include "attnkit/analysis/heads_experiment.h"

#include <cstdint>
#include <string>

namespace attnkit::cli {

struct HeadsDataOptions {
  std::string data, data2, tokenizer;
  int64_t max_length = 128;
  int64_t batch_size = 32;
  int64_t score_examples = 0;
  int64_t beams = 1;  // an encoder-decoder's BLEU decodes: 1 = greedy
  double length_penalty = 1.0;
};

// Reads a data file for the loaded model, tokenised with `tokenizer` (default: the model's own).
analysis::HeadsDataReader heads_data_reader(const HeadsDataOptions& options);

}  // namespace attnkit::cli
