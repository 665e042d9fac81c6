// attnkit data lra-text / lra-retrieval: the Long-Range Arena's byte-level text tasks built from
// Debian's fortunes (include/attnkit/data/lra_text.h).
#include "command.h"

#include "attnkit/error.h"
#include "attnkit/data/lra_text.h"

#include <fmt/format.h>

#include <memory>

namespace attnkit::cli {

namespace {

struct TextArguments {
  std::string out;
  std::vector<std::string> categories;
  data::LraTextOptions options;
};

void add_one(CLI::App* data_cmd, GlobalOptions& global, const std::string& name, bool retrieval) {
  auto args = std::make_shared<TextArguments>();
  args->options = retrieval ? data::retrieval_text_options() : data::LraTextOptions{};
  args->categories = args->options.categories;
  auto* cmd = data_cmd->add_subcommand(
      name, retrieval ? "LRA Retrieval stand-in: pairs of fortune passages, same category or not "
                        "(retrieval_{train,val,test}.tsv)"
                      : "LRA Text stand-in: fortune passages labelled by category (text_{train,val,test}.tsv)");
  cmd->add_option("--out", args->out, "output directory")->required();
  cmd->add_option("--categories", args->categories, "fortune files (categories), at least 2")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--fortunes-dir", args->options.fortunes_dir, "where the fortune files are")->capture_default_str();
  cmd->add_option("--min-bytes", args->options.min_bytes, "shortest passage")->capture_default_str();
  cmd->add_option("--max-bytes", args->options.max_bytes, "longest passage")->capture_default_str();
  cmd->add_option("--stride", args->options.stride, "fortunes between the starts of consecutive passages")
      ->capture_default_str();
  cmd->add_option("--val-fraction", args->options.val_fraction, "share of fortunes for validation")
      ->capture_default_str();
  cmd->add_option("--test-fraction", args->options.test_fraction, "share of fortunes for test")->capture_default_str();
  auto* seed = cmd->add_option("--seed", args->options.seed, "random seed (default: the global --seed)");
  cmd->callback([args, seed, retrieval, &global] {
    const bool seed_given = seed->count() > 0;
    global.action = [args, seed_given, retrieval, &global] {
      data::LraTextOptions options = args->options;
      options.categories = args->categories;
      if (!seed_given) options.seed = global.seed;
      const auto files = retrieval ? data::write_lra_retrieval(options, args->out)
                                   : data::write_lra_text(options, args->out);
      if (!global.quiet)
        fmt::print("wrote {} ({}), {} ({}), {} ({})\n", files.train, files.train_count, files.val, files.val_count,
                   files.test, files.test_count);
      return 0;
    };
  });
}

}  // namespace

void add_data_lra_text_command(CLI::App* data_cmd, GlobalOptions& global) {
  add_one(data_cmd, global, "lra-text", false);
  add_one(data_cmd, global, "lra-retrieval", true);
}

}  // namespace attnkit::cli
