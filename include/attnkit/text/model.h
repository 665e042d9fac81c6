#pragma once
// Model: the last stage of a tokenizer. It turns one pre-token (a Word's bytes) into vocabulary ids.
#include <cstdint>
#include <string_view>
#include <vector>

#include "attnkit/text/vocabulary.h"

namespace attnkit::text {

struct ModelToken {
  uint32_t id;
  uint32_t begin;  // byte range [begin, end) inside the word
  uint32_t end;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the tokens of `word` to `out`.
  virtual void tokenize(std::string_view word, std::vector<ModelToken>& out) const = 0;
  virtual const Vocabulary& vocabulary() const = 0;
};

}  // namespace attnkit::text
