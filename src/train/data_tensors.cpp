#include "attnkit/train/data_tensors.h"

#include <torch/torch.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "attnkit/error.h"
#include "attnkit/models/batching.h"

namespace attnkit::train {

ListOpsBatch make_listops_batch(const std::vector<data::ListOpsExample>& examples, int64_t max_length,
                                bool pad_to_max_length) {
  if (examples.empty()) throw Error("make_listops_batch: no examples");
  if (max_length < 1) throw Error(fmt::format("make_listops_batch: max_length must be at least 1, got {}", max_length));
  std::vector<std::vector<int64_t>> encoded;
  encoded.reserve(examples.size());
  int64_t longest = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    std::string error;
    std::vector<int64_t> ids = data::ListOpsVocabulary::encode(examples[i].source, error);
    if (!error.empty()) throw Error(fmt::format("make_listops_batch: example {}: {}", i, error));
    if (examples[i].target < 0 || examples[i].target > 9) {
      throw Error(fmt::format("make_listops_batch: example {}: target {} is not a class in 0..9", i, examples[i].target));
    }
    if (static_cast<int64_t>(ids.size()) > max_length) ids.resize(static_cast<size_t>(max_length));
    longest = std::max(longest, static_cast<int64_t>(ids.size()));
    encoded.push_back(std::move(ids));
  }
  const int64_t batch = static_cast<int64_t>(examples.size());
  const int64_t n = pad_to_max_length ? max_length : longest;
  ListOpsBatch result;
  result.ids = at::full({batch, n}, data::ListOpsVocabulary::kPad, at::kLong);
  result.lengths = at::empty({batch}, at::kLong);
  result.labels = at::empty({batch}, at::kLong);
  int64_t* ids = result.ids.data_ptr<int64_t>();
  int64_t* lengths = result.lengths.data_ptr<int64_t>();
  int64_t* labels = result.labels.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int64_t>& row = encoded[static_cast<size_t>(b)];
    std::copy(row.begin(), row.end(), ids + b * n);
    lengths[b] = static_cast<int64_t>(row.size());
    labels[b] = examples[static_cast<size_t>(b)].target;
  }
  return result;
}

SyntheticBatch make_synthetic_batch(const std::vector<data::SyntheticExample>& examples) {
  if (examples.empty()) throw Error("make_synthetic_batch: no examples");
  int64_t n = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].input.empty() || examples[i].target.empty()) {
      throw Error(fmt::format("make_synthetic_batch: example {} has an empty {}", i,
                              examples[i].input.empty() ? "input" : "target"));
    }
    n = std::max(n, static_cast<int64_t>(examples[i].input.size() + examples[i].target.size()) - 1);
  }
  const int64_t batch = static_cast<int64_t>(examples.size());
  SyntheticBatch result;
  result.inputs = at::full({batch, n}, data::SyntheticVocabulary::kPad, at::kLong);
  result.targets = at::full({batch, n}, SyntheticBatch::kIgnoreIndex, at::kLong);
  result.lengths = at::empty({batch}, at::kLong);
  int64_t* inputs = result.inputs.data_ptr<int64_t>();
  int64_t* targets = result.targets.data_ptr<int64_t>();
  int64_t* lengths = result.lengths.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const data::SyntheticExample& example = examples[static_cast<size_t>(b)];
    const int64_t prompt = static_cast<int64_t>(example.input.size());
    const int64_t length = prompt + static_cast<int64_t>(example.target.size()) - 1;
    auto token = [&](int64_t t) {
      return t < prompt ? example.input[static_cast<size_t>(t)] : example.target[static_cast<size_t>(t - prompt)];
    };
    int64_t* in_row = inputs + b * n;
    int64_t* target_row = targets + b * n;
    for (int64_t t = 0; t < length; ++t) {
      in_row[t] = token(t);
      // Position t predicts token t + 1: a target token when t + 1 >= prompt.
      if (t + 1 >= prompt) target_row[t] = token(t + 1);
    }
    lengths[b] = length;
  }
  return result;
}

ClassificationTensors classification_tensors(const data::ClassificationData& data,
                                             const text::Tokenizer& tokenizer, int64_t max_length,
                                             int64_t pad_id) {
  std::vector<std::vector<int64_t>> rows;
  for (const auto& e : data.examples) {
    const auto encoding = tokenizer.encode(e.text);
    std::vector<int64_t> row(encoding.ids.begin(), encoding.ids.end());
    if (int64_t(row.size()) > max_length) row.resize(max_length);
    if (row.empty()) row.push_back(pad_id);
    rows.push_back(std::move(row));
  }
  const int64_t n = int64_t(rows.size());
  ClassificationTensors t;
  auto padded = models::right_padded_ids(rows, pad_id);
  t.input_ids = std::move(padded.ids);
  t.attention_mask = std::move(padded.attention_mask);
  t.labels = torch::empty({n}, torch::kLong);
  for (int64_t i = 0; i < n; ++i) t.labels[i] = data.examples[i].label;
  return t;
}

}  // namespace attnkit::train
