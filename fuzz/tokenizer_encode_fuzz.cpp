// The tokenizers on arbitrary bytes: a BERT WordPiece and a GPT-2 byte-level BPE tokenizer (tiny
// vocabularies built here) encode the input, single and as a pair, and decode the ids it gives.
// Invalid UTF-8 must be an attnkit::Error (or handled), never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <vector>

#include "attnkit/text/byte_level.h"
#include "attnkit/text/pretrained.h"
#include "fuzz_support.h"

namespace {

using namespace attnkit;

const text::Tokenizer& bert() {
  static const text::Tokenizer tokenizer = text::make_bert_tokenizer(text::Vocabulary::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "un", "##aff", "##able", "a",
       "##b", ",", "!", "\xe4\xb8\xad", "caf", "##e"}));
  return tokenizer;
}

const text::Tokenizer& gpt2() {
  static const text::Tokenizer tokenizer = [] {
    std::vector<std::string> tokens;
    for (int byte = 0; byte < 256; ++byte) tokens.push_back(text::byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
    tokens.push_back("he");
    tokens.push_back("ll");
    tokens.push_back("hell");
    tokens.push_back("<|endoftext|>");
    std::vector<text::Merge> merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}};
    return text::make_gpt2_tokenizer(text::Vocabulary::from_tokens(tokens), merges);
  }();
  return tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const text::Tokenizer* tokenizer : {&bert(), &gpt2()}) {
    fuzz::expect_clean([&] {
      const text::Encoding encoding = tokenizer->encode(bytes);
      (void)tokenizer->decode(encoding.ids, false);
      (void)tokenizer->encode_pair(bytes.substr(0, size / 2), bytes.substr(size / 2));
    });
    // Ids from the bytes, some out of range.
    std::vector<uint32_t> ids;
    for (size_t i = 0; i + 1 < size; i += 2) ids.push_back(uint32_t{data[i]} | (uint32_t{data[i + 1]} << 8));
    fuzz::expect_clean([&] { (void)tokenizer->decode(ids, true); });
  }
  return 0;
}
