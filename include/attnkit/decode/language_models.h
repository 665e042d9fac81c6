#pragma once
// Decoding sessions over decode/'s states, and the UniLM greedy decoder of the seq2seq task.
// The sessions themselves are the models' (models::Model::decoding, models/decoding.h: causal LM,
// UniLM, encoder-decoder); this is where decode/ hands them its states (decode::caches()).
#include "attnkit/decode/generation.h"
#include "attnkit/models/model.h"
#include "attnkit/models/task_model.h"

#include <cstdint>
#include <vector>

namespace attnkit::decode {

// model.decoding(request, caches()).
models::Decoding start_decoding(models::Model& model, const models::DecodingRequest& request);

// Greedy UniLM decoding with the cache (the seq2seq task's BLEU decoder). Each source is decoded
// as [CLS] source [SEP] -> new tokens until sep_id (not included), max_new_tokens, or the
// prefix's last position reaching max_length (the input [CLS] src [SEP] prefix [SEP] of the
// uncached formulation stays <= max_length; 0 = no limit) or the model's max_positions. Rows
// decode independently of their batchmates. Throws attnkit::Error without a masked-LM head.
std::vector<std::vector<int64_t>> unilm_greedy(models::TaskModel model,
                                               const std::vector<std::vector<int64_t>>& sources,
                                               int64_t cls_id, int64_t sep_id, int64_t pad_id,
                                               int64_t max_new_tokens, int64_t max_length = 0);

}  // namespace attnkit::decode
