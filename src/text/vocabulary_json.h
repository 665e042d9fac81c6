#pragma once
// {"token": id, ...} in id order, shared by vocab.json and tokenizer.json (internal to src/text).
#include <nlohmann/json.hpp>

#include "attnkit/text/vocabulary.h"

namespace attnkit::text::detail {

nlohmann::ordered_json vocabulary_to_json(const Vocabulary& vocabulary);

}  // namespace attnkit::text::detail
