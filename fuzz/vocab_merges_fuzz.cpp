// vocab.json + merges.txt (load_tokenizer on the folder), then encoding with the tokenizer.
// The input holds both files, split at the first "\n#merges\n" (no separator: no merges.txt).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <filesystem>

#include "attnkit/text/pretrained.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const auto [vocab, merges] =
      fuzz::split_input(std::string_view(reinterpret_cast<const char*>(data), size), "\n#merges\n");
  const std::string directory = fuzz::scratch_directory() + "/bpe";
  std::filesystem::remove_all(directory);
  fuzz::write_scratch_file("bpe/vocab.json", vocab);
  fuzz::write_scratch_file("bpe/merges.txt", merges);
  fuzz::expect_clean(
      [&] {
        const text::Tokenizer tokenizer = text::load_tokenizer(directory);
        const text::Encoding encoding = tokenizer.encode("Hello, lower newest widest <|endoftext|>!");
        (void)tokenizer.decode(encoding.ids);
      },
      directory);
  return 0;
}
