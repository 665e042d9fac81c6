// attnkit_gguf_probe: the GGUF reader seen from outside, for tests/python/test_gguf.py.
//   attnkit_gguf_probe FILE                 gguf_dump_json(FILE) on stdout
//   attnkit_gguf_probe FILE --text          gguf_dump_text(FILE) on stdout
//   attnkit_gguf_probe FILE --tensors DIR   also writes tensor i as DIR/i.f32 (float32, ggml order)
//                                           or, when it cannot be converted, its error as DIR/i.err
// An attnkit::Error ends it with the message on stderr and exit status 2.
#include "attnkit/error.h"
#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_dump.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw attnkit::Error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (argc > 2 && std::strcmp(argv[2], "--text") != 0 && std::strcmp(argv[2], "--tensors") != 0) ||
      (argc > 2 && std::strcmp(argv[2], "--tensors") == 0 && argc != 4)) {
    std::fprintf(stderr, "usage: attnkit_gguf_probe FILE [--text | --tensors DIR]\n");
    return 1;
  }
  try {
    const attnkit::formats::GgufFile file = attnkit::formats::GgufFile::open(argv[1]);
    if (argc > 2 && std::strcmp(argv[2], "--text") == 0) {
      std::fputs(attnkit::formats::gguf_dump_text(file).c_str(), stdout);
      return 0;
    }
    if (argc == 4) {
      const std::string directory = argv[3];
      for (size_t i = 0; i < file.tensors().size(); ++i) {
        const std::string stem = directory + "/" + std::to_string(i);
        try {
          const std::vector<float> values = file.dequantize(file.tensors()[i]);
          write_file(stem + ".f32", values.data(), values.size() * sizeof(float));
        } catch (const attnkit::Error& e) {
          write_file(stem + ".err", e.what(), std::strlen(e.what()));
        }
      }
    }
    std::printf("%s\n", attnkit::formats::gguf_dump_json(file).c_str());
    return 0;
  } catch (const attnkit::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
