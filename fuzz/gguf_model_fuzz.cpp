// GGUF models (`--model FILE.gguf`, io/gguf_model.h): load_model on the file, i.e. its metadata
// read as a Hugging Face config (llama or gemma3), every tensor mapped to transformers' names,
// dequantized and un-permuted, and the model built from them; then, when it loads, one forward
// pass over three token ids. The seeds (fuzz/corpus/gguf_model) are tiny valid llama and gemma3
// files; fuzz/regressions/gguf_model holds hostile metadata (huge or zero sizes, NaN eps,
// missing tensors), each a one-line error naming the file (tests/io/gguf_model_test.cpp).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "attnkit/io/model_directory.h"
#include "attnkit/models/transformer_model.h"
#include "fuzz_support.h"

#include <torch/torch.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string path = fuzz::write_scratch_file(
      "model.gguf", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean(
      [&] {
        const io::LoadedModel loaded = io::load_model(path);
        if (loaded.transformer) {
          torch::NoGradGuard no_grad;
          models::ModelInputs in;
          in.input_ids = torch::zeros({1, 3}, torch::kLong);
          (void)loaded.transformer->forward(in);
        }
      },
      path);
  return 0;
}
