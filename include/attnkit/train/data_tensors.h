#pragma once
// The data sets of data/ as the tensors models take: ListOps and synthetic-task batches, and a
// classification data set tokenised and padded. The readers and generators themselves are plain
// C++ (data/listops.h, data/synthetic_tasks.h, data/text_datasets.h).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "attnkit/data/listops.h"
#include "attnkit/data/synthetic_tasks.h"
#include "attnkit/data/text_datasets.h"
#include "attnkit/text/tokenizer.h"

namespace attnkit::train {

struct ListOpsBatch {
  at::Tensor ids;      // [batch, n] int64, right-padded with data::ListOpsVocabulary::kPad
  at::Tensor lengths;  // [batch] int64: tokens before padding
  at::Tensor labels;   // [batch] int64: 0..9
};
// Encodes and pads `examples`, truncating each to max_length tokens (LRA: inputs[:2000]). n is
// the longest encoded example, or max_length with pad_to_max_length (LRA pads every batch to
// 2000). Throws attnkit::Error for an empty batch, max_length < 1 or an unknown token.
ListOpsBatch make_listops_batch(const std::vector<data::ListOpsExample>& examples, int64_t max_length = 2000,
                                bool pad_to_max_length = false);

// LM-style batch. Each example's sequence s = input ++ target (length L) gives the row
// inputs = s[0 .. L-2] and targets = s[1 .. L-1], where a target position that predicts an input
// token (rather than a target token) holds kIgnoreIndex. Rows are right-padded to the longest
// with data::SyntheticVocabulary::kPad (inputs) and kIgnoreIndex (targets).
struct SyntheticBatch {
  static constexpr int64_t kIgnoreIndex = -100;  // torch's cross_entropy default ignore_index
  at::Tensor inputs;   // [batch, n] int64
  at::Tensor targets;  // [batch, n] int64
  at::Tensor lengths;  // [batch] int64: L - 1, the row's positions before padding
};
// Throws attnkit::Error for an empty batch or an example with an empty input or target.
SyntheticBatch make_synthetic_batch(const std::vector<data::SyntheticExample>& examples);

// A classification data set as a model takes it: every text encoded by `tokenizer` (with its
// special tokens), cut to max_length tokens (an empty encoding becomes [pad_id]) and right padded
// with pad_id to the longest: input_ids and attention_mask (1 = real token) [N, longest] and
// labels [N], all int64.
struct ClassificationTensors {
  at::Tensor input_ids, attention_mask, labels;
};
ClassificationTensors classification_tensors(const data::ClassificationData& data,
                                             const text::Tokenizer& tokenizer, int64_t max_length,
                                             int64_t pad_id);

}  // namespace attnkit::train
