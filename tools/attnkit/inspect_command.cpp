// attnkit inspect FILE.safetensors: validates a safetensors file as every attnkit loader does
// (the whole header, then every tensor read) and prints one JSON line per tensor
// {"name", "dtype", "shape", "data_offsets"} and the metadata, or one error line (exit 2).
// tests/python/test_safetensors_differential.py compares its verdict with the reference package.
#include "attnkit/io/safetensors.h"
#include "command.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace attnkit::cli {

void register_inspect_command(CLI::App& app, GlobalOptions& global) {
  auto* command = app.add_subcommand("inspect", "validate a .safetensors file and list its tensors");
  auto path = std::make_shared<std::string>();
  command->add_option("file", *path, "the .safetensors file")->required();
  command->callback([&global, path] {
    global.action = [path] {
      const io::SafetensorsFile file = io::SafetensorsFile::open(*path);
      for (const io::TensorEntry& entry : file.entries()) {
        (void)file.tensor(entry.name);  // reads (and checks) the bytes
        const nlohmann::json line = {{"name", entry.name},
                                     {"dtype", entry.dtype},
                                     {"shape", entry.shape},
                                     {"data_offsets", {entry.begin, entry.end}}};
        std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      }
      if (!file.metadata().empty()) {
        const nlohmann::json metadata = {{"__metadata__", file.metadata()}};
        std::printf("%s\n", metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      }
      return 0;
    };
  });
}

}  // namespace attnkit::cli
