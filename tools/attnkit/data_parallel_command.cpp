// attnkit data parallel: source<TAB>target train / val / test files for translation, from two
// SWORD Bible modules (verse-aligned, split by book) or from a user TSV of pairs
// (include/attnkit/data/parallel_corpus.h).
#include "attnkit/error.h"
#include "attnkit/parse.h"
#include "attnkit/data/parallel_corpus.h"
#include "attnkit/io/atomic_file.h"
#include "command.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <sstream>

namespace attnkit::cli {
namespace {

struct ParallelArguments {
  std::string out;
  std::string source_module = "engWEB2015eb";
  std::string target_module = "spaRV1909eb";
  std::string pairs;
  std::string validation_books;
  std::string test_books;
  double validation_fraction = 0.02;
  double test_fraction = 0.03;
  double near_duplicate_threshold = -1;  // unset: the default for SWORD modules, none for --pairs
  bool keep_near_duplicates = false;
};

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : separator) + s;
  return out;
}

// "Ruth,Jonah" -> {"Ruth", "Jonah"} (spaces around names dropped; book names may hold spaces).
std::vector<std::string> book_list(const std::string& text) {
  std::vector<std::string> books;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto first = item.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    books.push_back(item.substr(first, item.find_last_not_of(' ') - first + 1));
  }
  return books;
}

int run_parallel(const ParallelArguments& args, const GlobalOptions& global) {
  data::ParallelSplits splits;
  std::string what;
  if (!args.pairs.empty()) {
    splits = data::split_user_pairs(args.pairs, args.validation_fraction, args.test_fraction);
    what = args.pairs;
  } else {
    const auto validation = args.validation_books.empty() ? data::kDefaultValidationBooks
                                                          : book_list(args.validation_books);
    const auto test = args.test_books.empty() ? data::kDefaultTestBooks : book_list(args.test_books);
    const auto source = data::parse_mod2imp(data::export_sword_module(args.source_module));
    const auto target = data::parse_mod2imp(data::export_sword_module(args.target_module));
    const auto pairs = data::align_verses(source, target);
    if (pairs.empty())
      throw Error(fmt::format("SWORD modules {} and {} have no verse in common", args.source_module,
                              args.target_module));
    splits = data::split_by_book(pairs, validation, test);
    what = fmt::format("{} -> {} ({} verse pairs; val: {}; test: {})", args.source_module,
                       args.target_module, pairs.size(), join(validation, ", "), join(test, ", "));
  }
  // Held-out sources that (nearly) repeat a training source: measured, dropped, measured again.
  nlohmann::json report = {{"source", what}, {"near_duplicate_threshold", nullptr}};
  const auto before = data::measure_split_overlap(splits);
  report["overlap_before_filter"] = {{"validation", data::overlap_json(before.validation)},
                                     {"test", data::overlap_json(before.test)}};
  data::NearDuplicatesDropped dropped;
  const bool filter = !args.keep_near_duplicates && (args.near_duplicate_threshold >= 0 || args.pairs.empty());
  const double threshold =
      args.near_duplicate_threshold >= 0 ? args.near_duplicate_threshold : data::kDefaultNearDuplicateThreshold;
  if (filter) {
    dropped = data::drop_near_duplicates(splits, threshold);
    report["near_duplicate_threshold"] = threshold;
  }
  const auto after = data::measure_split_overlap(splits);
  report["dropped"] = {{"validation", dropped.validation}, {"test", dropped.test}};
  report["overlap"] = {{"validation", data::overlap_json(after.validation)}, {"test", data::overlap_json(after.test)}};
  report["pairs"] = {{"train", splits.train.size()}, {"validation", splits.validation.size()}, {"test", splits.test.size()}};
  const auto files = data::write_parallel_splits(splits, args.out);
  const std::string report_path = (std::filesystem::path(args.out) / "split.json").string();
  io::write_file_atomically(report_path, report.dump(2) + "\n");
  auto overlap_line = [](const char* name, const data::SplitOverlap& o) {
    return fmt::format("{} {}: {} share >= 50% of their word 4-grams with one training source, {} >= 80%, {} "
                       "repeat one", name, o.pairs, o.at_least_half, o.at_least_80, o.exact_repeats);
  };
  if (!global.quiet)
    fmt::print("{}\nbefore the near-duplicate filter: {}; {}\ndropped {} validation and {} test pairs{}\nnow: {}; {}\n"
               "wrote {} ({} pairs), {} ({}), {} ({}), {}\n",
               what, overlap_line("val", before.validation), overlap_line("test", before.test), dropped.validation,
               dropped.test,
               filter ? fmt::format(" (overlap >= {})", threshold) : std::string(" (no filter)"),
               overlap_line("val", after.validation), overlap_line("test", after.test), files.train,
               splits.train.size(), files.validation, splits.validation.size(), files.test, splits.test.size(),
               report_path);
  return 0;
}

}  // namespace

void add_data_parallel_command(CLI::App* data_cmd, GlobalOptions& global) {
  auto args = std::make_shared<ParallelArguments>();
  auto* cmd = data_cmd->add_subcommand(
      "parallel", "translation pairs: OUT/train.tsv, val.tsv, test.tsv (source<TAB>target per line)");
  cmd->footer(fmt::format(
      "From two SWORD Bible modules (exported with mod2imp, package libsword-utils; modules in\n"
      "/usr/share/sword/mods.d, e.g. Debian's sword-text-web, sword-text-sparv, sword-text-kjv):\n"
      "the verses present and non-empty in both, markup removed (footnotes and headings with\n"
      "their text), in the source module's order. Split by book, so that validation and test\n"
      "books are never seen in training. Defaults: val = {}; test = {}; train = every other book.\n"
      "With --pairs FILE (source<TAB>target lines, UTF-8): the file is checked (one tab, both\n"
      "sides non-empty; errors name the line, nothing is written) and split in file order: the\n"
      "last --test-fraction of its lines is the test file, the --val-fraction before it the\n"
      "validation file.\n"
      "Then every validation and test pair whose source shares at least --near-duplicate-threshold\n"
      "of its word 4-grams with one training source is dropped (by default for SWORD modules only);\n"
      "OUT/split.json records the overlap before and after (include/attnkit/data/parallel_corpus.h).",
      join(data::kDefaultValidationBooks, ", "), join(data::kDefaultTestBooks, ", ")));
  cmd->add_option("--out", args->out, "output directory")->required();
  cmd->add_option("--source-module", args->source_module, "SWORD module of the source side")->capture_default_str();
  cmd->add_option("--target-module", args->target_module, "SWORD module of the target side")->capture_default_str();
  cmd->add_option("--val-books", args->validation_books,
                  "comma-separated validation books, as mod2imp names them (default: above)");
  cmd->add_option("--test-books", args->test_books, "comma-separated test books (default: above)");
  auto* pairs = cmd->add_option("--pairs", args->pairs, "a user TSV of pairs instead of SWORD modules");
  cmd->add_option("--val-fraction", args->validation_fraction, "with --pairs: share of lines for validation")
      ->capture_default_str()->needs(pairs);
  cmd->add_option("--test-fraction", args->test_fraction, "with --pairs: share of lines for testing")
      ->capture_default_str()->needs(pairs);
  cmd->add_option("--near-duplicate-threshold", args->near_duplicate_threshold,
                  fmt::format("drop validation/test pairs sharing at least this share of their source's word "
                              "4-grams with one training source (default {} for SWORD modules, none for --pairs)",
                              data::kDefaultNearDuplicateThreshold))
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--keep-near-duplicates", args->keep_near_duplicates, "measure the overlap but drop nothing");
  cmd->callback([args, &global] {
    global.action = [args, &global] { return run_parallel(*args, global); };
  });
}

}  // namespace attnkit::cli
