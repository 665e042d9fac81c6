// vocab.txt (load_tokenizer on a WordPiece vocabulary), then encoding with it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnkit/text/pretrained.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string path =
      fuzz::write_scratch_file("vocab.txt", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean(
      [&] {
        const text::Tokenizer tokenizer = text::load_tokenizer(path);
        const text::Encoding encoding = tokenizer.encode("Hello, unaffable world! [CLS] x");
        (void)tokenizer.decode(encoding.ids);
      },
      path);
  return 0;
}
