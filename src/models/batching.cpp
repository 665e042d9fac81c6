#include "attnkit/models/batching.h"

#include <algorithm>

namespace attnkit::models {

PaddedIds right_padded_ids(const std::vector<const std::vector<int64_t>*>& rows, int64_t pad) {
  int64_t columns = 1;
  for (const auto* row : rows) columns = std::max<int64_t>(columns, static_cast<int64_t>(row->size()));
  const auto count = static_cast<int64_t>(rows.size());
  PaddedIds out;
  out.ids = at::full({count, columns}, pad, at::kLong);
  out.attention_mask = at::zeros({count, columns}, at::kLong);
  for (int64_t b = 0; b < count; ++b) {
    const auto length = static_cast<int64_t>(rows[b]->size());
    out.ids[b].slice(0, 0, length).copy_(torch::tensor(*rows[b], at::kLong));
    out.attention_mask[b].slice(0, 0, length).fill_(1);
  }
  return out;
}

PaddedIds right_padded_ids(const std::vector<std::vector<int64_t>>& rows, int64_t pad) {
  std::vector<const std::vector<int64_t>*> pointers;
  pointers.reserve(rows.size());
  for (const auto& row : rows) pointers.push_back(&row);
  return right_padded_ids(pointers, pad);
}

}  // namespace attnkit::models
