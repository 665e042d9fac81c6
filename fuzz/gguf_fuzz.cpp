// GGUF files: GgufFile::open, then every metadata value read (nested arrays included), the
// tokenizer its tokenizer.ggml.* metadata describe (built and run on a short text; missing or
// inconsistent metadata is an attnkit::Error), every tensor converted to float32 (an unsupported
// type is an attnkit::Error), and both dumps.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_dump.h"
#include "attnkit/formats/gguf_tokenizer.h"
#include "attnkit/error.h"
#include "fuzz_support.h"

namespace {

// Reads every scalar and string of `value` through its accessors.
void visit(const attnkit::formats::GgufValue& value) {
  using attnkit::formats::GgufType;
  switch (value.type()) {
    case GgufType::ARRAY:
      (void)value.depth();
      for (size_t i = 0; i < value.size(); ++i) visit(value.element(i));
      break;
    case GgufType::STRING: (void)value.to_string(); break;
    case GgufType::BOOL: (void)value.to_bool(); break;
    default:
      (void)value.to_number();
      if (value.type() == GgufType::UINT64) (void)value.to_unsigned();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string path = fuzz::write_scratch_file(
      "input.gguf", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean(
      [&] {
        const formats::GgufFile file = formats::GgufFile::open(path);
        for (const formats::GgufMetadataEntry& entry : file.metadata()) visit(entry.value);
        fuzz::expect_clean(
            [&] {
              const text::Tokenizer tokenizer = formats::gguf_tokenizer(file);
              (void)tokenizer.decode(tokenizer.encode("Hello world 123 <s>\n\xC3\xA9").ids, false);
            },
            path);
        (void)formats::gguf_dump_text(file);
        (void)formats::gguf_dump_json(file);
        for (const formats::GgufTensorInfo& tensor : file.tensors()) {
          if (file.find_tensor(tensor.name) != &tensor) __builtin_trap();
          try {
            (void)file.dequantize(tensor);
          } catch (const Error& e) {  // an unsupported type: must name the tensor's file too
            if (std::string_view(e.what()).find(path) == std::string_view::npos) throw;
          }
        }
      },
      path);
  return 0;
}
