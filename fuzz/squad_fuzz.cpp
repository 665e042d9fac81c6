// SQuAD JSON (read_squad_json), with and without skip_bad_lines.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnkit/data/text_datasets.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string path =
      fuzz::write_scratch_file("squad.json", std::string_view(reinterpret_cast<const char*>(data), size));
  for (const bool skip : {false, true}) {
    data::DataReadOptions options;
    options.skip_bad_lines = skip;
    fuzz::expect_clean([&] { (void)data::read_squad_json(path, options); }, path);
  }
  return 0;
}
