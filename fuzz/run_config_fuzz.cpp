// Run configs (apply_toml_file).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnkit/train/run_config.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string path =
      fuzz::write_scratch_file("run.toml", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean(
      [&] {
        train::RunConfig config;
        train::apply_toml_file(config, path);
      },
      path);
  return 0;
}
