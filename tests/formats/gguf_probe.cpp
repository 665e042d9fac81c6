// attnkit_gguf_probe: the GGUF reader seen from outside, for tests/python/test_gguf.py.
//   attnkit_gguf_probe FILE             gguf_dump_json(FILE) on stdout
//   attnkit_gguf_probe FILE --text      gguf_dump_text(FILE) on stdout
//   attnkit_gguf_probe FILE --tensors   every tensor, in file order, as one frame on stdout: a kind
//                                       byte ('F': float32 values in ggml order; 'E': the error
//                                       that converting it gave), the payload's length in bytes
//                                       (u64, little-endian), the payload
//   attnkit_gguf_probe FILE --tokenizer  {"tokenizer": gguf_tokenizer_json, "config":
//                                       gguf_tokenizer_config_json} on stdout
//   attnkit_gguf_probe FILE --encode     reads a JSON array of texts on stdin; prints, per text,
//                                       {"ids": with special tokens, "plain_ids": without,
//                                       "text": decode(ids), "all_text": decode(ids, keep special)}
// An attnkit::Error ends it with the message on stderr and exit status 2.
#include "attnkit/error.h"
#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_dump.h"
#include "attnkit/formats/gguf_tokenizer.h"

#include <cstdio>
#include <iostream>
#include <iterator>
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
  if (argc < 2 || argc > 3 || (argc == 3 && mode != "--text" && mode != "--tensors" && mode != "--tokenizer" && mode != "--encode")) {
    std::fprintf(stderr, "usage: attnkit_gguf_probe FILE [--text | --tensors | --tokenizer | --encode]\n");
    return 1;
  }
  try {
    const attnkit::formats::GgufFile file = attnkit::formats::GgufFile::open(argv[1]);
    if (mode == "--text") {
      std::fputs(attnkit::formats::gguf_dump_text(file).c_str(), stdout);
    } else if (mode == "--tokenizer") {
      const nlohmann::json both = {{"tokenizer", attnkit::formats::gguf_tokenizer_json(file)},
                                   {"config", attnkit::formats::gguf_tokenizer_config_json(file)}};
      std::printf("%s\n", both.dump().c_str());
    } else if (mode == "--encode") {
      const attnkit::text::Tokenizer tokenizer = attnkit::formats::gguf_tokenizer(file);
      const nlohmann::json texts = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()));
      nlohmann::json results = nlohmann::json::array();
      for (const nlohmann::json& text : texts) {
        const std::vector<uint32_t> ids = tokenizer.encode(text.get<std::string>()).ids;
        results.push_back({{"ids", ids},
                           {"plain_ids", tokenizer.encode(text.get<std::string>(), false).ids},
                           {"text", tokenizer.decode(ids)},
                           {"all_text", tokenizer.decode(ids, false)}});
      }
      std::printf("%s\n", results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
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
