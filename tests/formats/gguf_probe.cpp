// attnkit_gguf_probe: the GGUF reader seen from outside, for tests/python/test_gguf.py.
//   attnkit_gguf_probe FILE             gguf_dump_json(FILE) on stdout
//   attnkit_gguf_probe FILE --text      gguf_dump_text(FILE) on stdout
//   attnkit_gguf_probe FILE --tensors   every tensor, in file order, as one frame on stdout: a kind
//                                       byte ('F': float32 values in ggml order; 'E': the error
//                                       that converting it gave), the payload's length in bytes
//                                       (u64, little-endian), the payload
// An attnkit::Error ends it with the message on stderr and exit status 2.
#include "attnkit/error.h"
#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_dump.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

void write_frame(char kind, const void* payload, uint64_t size) {
  std::fputc(kind, stdout);
  std::fwrite(&size, sizeof(size), 1, stdout);  // x86-64: little-endian
  std::fwrite(payload, 1, size, stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[2] : "";
  if (argc < 2 || argc > 3 || (argc == 3 && mode != "--text" && mode != "--tensors")) {
    std::fprintf(stderr, "usage: attnkit_gguf_probe FILE [--text | --tensors]\n");
    return 1;
  }
  try {
    const attnkit::formats::GgufFile file = attnkit::formats::GgufFile::open(argv[1]);
    if (mode == "--text") {
      std::fputs(attnkit::formats::gguf_dump_text(file).c_str(), stdout);
    } else if (mode == "--tensors") {
      for (const attnkit::formats::GgufTensorInfo& tensor : file.tensors()) {
        try {
          const std::vector<float> values = file.dequantize(tensor);
          write_frame('F', values.data(), values.size() * sizeof(float));
        } catch (const attnkit::Error& e) {
          write_frame('E', e.what(), std::strlen(e.what()));
        }
      }
    } else {
      std::printf("%s\n", attnkit::formats::gguf_dump_json(file).c_str());
    }
    return std::fflush(stdout) == 0 ? 0 : 1;
  } catch (const attnkit::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
