// safetensors files: header and data (SafetensorsFile::open, then every tensor read, as a copy
// and in place: read_into, summed so that its bytes are read).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <ATen/ATen.h>

#include "attnkit/io/safetensors.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string path = fuzz::write_scratch_file(
      "input.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean(
      [&] {
        const io::SafetensorsFile file = io::SafetensorsFile::open(path);
        for (const io::TensorEntry& entry : file.entries()) {
          (void)file.tensor(entry.name);
          file.read_into(entry.name, [](const at::Tensor& t) {
            if (t.numel() > 0 && t.scalar_type() != at::kBool) (void)t.to(at::kDouble).sum().item<double>();
          });
        }
        (void)file.names();
      },
      path);
  return 0;
}
