// tokenizer.json (read_tokenizer_json), then encoding and decoding with the tokenizer it gives.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnkit/text/tokenizer_json.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string path =
      fuzz::write_scratch_file("tokenizer.json", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean(
      [&] {
        const text::Tokenizer tokenizer = text::read_tokenizer_json(path);
        const text::Encoding encoding = tokenizer.encode("Hello, world! caf\xc3\xa9 \xe4\xb8\xad [MASK]");
        (void)tokenizer.decode(encoding.ids);
        (void)tokenizer.encode_pair("a b", "c");
      },
      path);
  return 0;
}
