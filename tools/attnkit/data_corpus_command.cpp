// attnkit data corpus: train.txt / valid.txt for the LM tasks from Debian's fortunes or any text file
// (include/attnkit/data/corpus.h).
#include "command.h"

#include "attnkit/data/corpus.h"

#include <fmt/format.h>

#include <memory>

namespace attnkit::cli {

void add_data_corpus_command(CLI::App* data_cmd, GlobalOptions& global) {
  struct Args {
    data::CorpusOptions options;
    std::string out, format = "paragraphs";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = data_cmd->add_subcommand(
      "corpus",
      "a text corpus for the LM tasks: OUT/train.txt and OUT/valid.txt, documents separated by blank lines "
      "(the split is a hash of each document's text, so a document is never in both)");
  cmd->add_option("sources", args->options.sources,
                  "fortunes (Debian's English fortunes, one document per fortune), fortunes-zh (chinese, "
                  "tang300, song100; ANSI colour codes removed), tang300, song100, or text files")
      ->required();
  cmd->add_option("--out", args->out, "output directory")->required();
  cmd->add_option("--valid-fraction", args->options.valid_fraction, "share of documents held out for valid.txt")
      ->capture_default_str();
  cmd->add_option("--format", args->format,
                  "how the documents of text files are separated: paragraphs (blank lines) or fortune "
                  "(lines holding only %)")
      ->capture_default_str()
      ->check(CLI::IsMember({"paragraphs", "fortune"}));
  cmd->callback([args, &global] {
    global.action = [args, &global] {
      args->options.file_format =
          args->format == "fortune" ? data::DocumentFormat::kFortune : data::DocumentFormat::kParagraphs;
      const auto s = data::write_corpus(args->options, args->out);
      if (!global.quiet)
        fmt::print("read {} file(s); wrote {} ({} documents, {} bytes) and {} ({} documents, {} bytes)\n",
                   s.files.size(), s.train_path, s.train_documents, s.train_bytes, s.valid_path,
                   s.valid_documents, s.valid_bytes);
      return 0;
    };
  });
}

}  // namespace attnkit::cli
