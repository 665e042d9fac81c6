#pragma once
// A text file as fixed-length windows of token ids (the inputs of an analysis): lines tokenised
// one by one, their ids concatenated and cut into consecutive windows. No LibTorch.
#include "attnkit/text/tokenizer.h"

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace attnkit::text {

struct TokenWindows {
  std::vector<int64_t> ids;  // count x length ids, window after window
  int64_t count = 0;         // windows
  int64_t length = 0;        // tokens per window
};

// Reads `in` line by line (blank lines skipped), encodes each line with the tokenizer's special
// tokens and cuts the concatenated ids into at most `max_windows` windows of `length` tokens;
// reading stops once they are full, and a last partial window is dropped. Throws attnkit::Error
// "NAME: N tokens, fewer than one window of LENGTH tokens" when not even one window fits, and for
// length or max_windows < 1.
TokenWindows token_windows(std::istream& in, const Tokenizer& tokenizer, int64_t length,
                           int64_t max_windows, const std::string& name);
// The same for the file at `path` ("PATH: cannot read the file" when it cannot be opened).
TokenWindows read_token_windows(const std::string& path, const Tokenizer& tokenizer, int64_t length,
                                int64_t max_windows);

}  // namespace attnkit::text
