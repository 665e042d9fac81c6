// Hugging Face config.json alone (config_from_huggingface on the parsed JSON), as load_model
// reads it before any tensor.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "attnkit/io/huggingface.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const nlohmann::json config =
      nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;  // not JSON: the loaders' JSON errors are fuzzed elsewhere
  fuzz::expect_clean([&] {
    std::string model_type;
    (void)io::config_from_huggingface(config, &model_type);
  });
  return 0;
}
