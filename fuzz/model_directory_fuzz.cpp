// Model directories (load_model): config.json + model.safetensors, either format. The input
// holds both files, split at the first "\n#safetensors\n" (no separator: no model.safetensors).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <filesystem>

#include "attnkit/io/model_directory.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const auto [config, weights] =
      fuzz::split_input(std::string_view(reinterpret_cast<const char*>(data), size), "\n#safetensors\n");
  const std::string directory = fuzz::scratch_directory() + "/model";
  std::filesystem::remove_all(directory);
  fuzz::write_scratch_file("model/config.json", config);
  if (!weights.empty()) fuzz::write_scratch_file("model/model.safetensors", weights);
  fuzz::expect_clean([&] { (void)io::load_model(directory); }, directory);
  return 0;
}
