// Trainer checkpoints (load_checkpoint): trainer.safetensors + model.safetensors + optimizer.pt.
// The input holds trainer.safetensors, then optionally "\n#model\n" and model.safetensors;
// optimizer.pt is a fixed placeholder (its bytes are LibTorch's to read).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <filesystem>

#include "attnkit/train/checkpoint.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const auto [trainer, model] =
      fuzz::split_input(std::string_view(reinterpret_cast<const char*>(data), size), "\n#model\n");
  const std::string directory = fuzz::scratch_directory() + "/step-1";
  std::filesystem::remove_all(directory);
  fuzz::write_scratch_file("step-1/trainer.safetensors", trainer);
  // An empty header: a valid safetensors file with no tensors.
  fuzz::write_scratch_file("step-1/model.safetensors",
                           model.empty() ? std::string_view("\x08\0\0\0\0\0\0\0{}      ", 16) : model);
  fuzz::write_scratch_file("step-1/optimizer.pt", "");
  fuzz::expect_clean([&] { (void)train::load_checkpoint(directory); }, directory);
  return 0;
}
