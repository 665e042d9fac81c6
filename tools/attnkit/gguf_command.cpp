// attnkit gguf FILE [--json]: a GGUF file's metadata and tensor table (name, type, shape, bytes),
// laid out as the gguf package's gguf_dump script prints them (include/attnkit/formats/
// gguf_dump.h); --json prints gguf_dump --json --json-array's object with attnkit's additions.
// The whole file is checked first (GgufFile::open): a bad file is one error line, exit 2.
// tests/python/test_gguf.py compares both with gguf_dump.
#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_dump.h"
#include "command.h"

#include <cstdio>
#include <memory>
#include <string>

namespace attnkit::cli {

void register_gguf_command(CLI::App& app, GlobalOptions& global) {
  struct Arguments {
    std::string path;
    bool json = false;
  };
  auto args = std::make_shared<Arguments>();
  auto* command = app.add_subcommand("gguf", "print a GGUF file's metadata and tensor table");
  command->add_option("file", args->path, "the .gguf file")->required();
  command->add_flag("--json", args->json, "one JSON object (every array in full) instead of text");
  command->callback([&global, args] {
    global.action = [args] {
      const formats::GgufFile file = formats::GgufFile::open(args->path);
      const std::string text = args->json ? formats::gguf_dump_json(file) + "\n"
                                          : formats::gguf_dump_text(file);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    };
  });
}

}  // namespace attnkit::cli
