#pragma once
// Batches of token-id rows: right padding. Every row starts at column 0 and the padding follows
// it, as the models' forward and the training tasks take them. Decoding's prompts are left padded
// instead (decode/generation.cpp), so that every row's last token sits in the last column.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace attnkit::models {

struct PaddedIds {
  at::Tensor ids;             // [rows, columns] int64, `pad` after each row's ids
  at::Tensor attention_mask;  // [rows, columns] int64: 1 = the row's own id, 0 = padding
};

// `rows` right-padded with `pad` to the longest row, and at least one column (so rows that are
// all empty still give a [rows, 1] batch, all padding).
PaddedIds right_padded_ids(const std::vector<std::vector<int64_t>>& rows, int64_t pad);
// The same for rows held elsewhere (nothing is copied but into the tensors).
PaddedIds right_padded_ids(const std::vector<const std::vector<int64_t>*>& rows, int64_t pad);

}  // namespace attnkit::models
