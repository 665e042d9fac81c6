// attnkit tokenize / attnkit tokenizer train: the tokenizer module (include/attnkit/text) on the
// command line. See docs/tokenizers.md for the input and output formats.
#include <fmt/format.h>

#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/formats/gguf_tokenizer.h"
#include "attnkit/parse.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/trainer.h"
#include "command.h"

namespace attnkit::cli {
namespace {

using text::Encoding;
using text::EncodeInput;
using text::Tokenizer;

struct TokenizeOptions {
  std::string tokenizer_path;
  bool pair = false;
  bool offsets = false;
  bool type_ids = false;
  bool decode = false;
  bool no_special_tokens = false;
  bool keep_special_tokens = false;
  bool cased = false;
  size_t max_length = 0;
  std::string truncation = "longest-first";
};

struct TrainOptions {
  std::string kind = "bpe";
  size_t vocab_size = 0;
  std::string out;
  uint64_t min_frequency = 2;
  bool cased = false;
  std::vector<std::string> files;
};

constexpr size_t kLinesPerBatch = 4096;

void print_encoding(const Encoding& encoding, const TokenizeOptions& options, std::string& out) {
  for (size_t i = 0; i < encoding.ids.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(encoding.ids[i]);
  }
  if (options.type_ids) {
    out += '\t';
    for (size_t i = 0; i < encoding.type_ids.size(); ++i) {
      if (i > 0) out += ' ';
      out += std::to_string(encoding.type_ids[i]);
    }
  }
  if (options.offsets) {
    out += '\t';
    for (size_t i = 0; i < encoding.offsets.size(); ++i) {
      if (i > 0) out += ' ';
      out += fmt::format("{}:{}", encoding.offsets[i].first, encoding.offsets[i].second);
    }
  }
  out += '\n';
}

EncodeInput parse_input(std::string line, size_t number, bool pair) {
  if (!pair) return {std::move(line), std::nullopt};
  size_t tab = line.find('\t');
  if (tab == std::string::npos) {
    throw Error(fmt::format("stdin line {}: --pair expects two texts separated by a tab", number));
  }
  return {line.substr(0, tab), line.substr(tab + 1)};
}

std::vector<uint32_t> parse_ids(const std::string& line, size_t number) {
  std::vector<uint32_t> ids;
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && is_space(line[pos])) ++pos;
    if (pos >= line.size()) break;
    size_t end = pos;
    while (end < line.size() && !is_space(line[end])) ++end;
    const auto id = try_parse_unsigned(std::string_view(line).substr(pos, end - pos));
    if (!id || *id > std::numeric_limits<uint32_t>::max()) {
      throw Error(fmt::format("stdin line {}: '{}' is not a list of token ids separated by spaces", number, line));
    }
    ids.push_back(static_cast<uint32_t>(*id));
    pos = end;
  }
  return ids;
}

int run_tokenize(const TokenizeOptions& options, int threads) {
  text::LoadOptions load;
  load.bert.lowercase = !options.cased;
  const bool gguf = options.tokenizer_path.size() > 5 &&
                    options.tokenizer_path.compare(options.tokenizer_path.size() - 5, 5, ".gguf") == 0;
  Tokenizer tokenizer = gguf ? formats::read_gguf_tokenizer(options.tokenizer_path)
                             : text::load_tokenizer(options.tokenizer_path, load);
  if (options.max_length > 0) {
    text::TruncationOptions truncation;
    truncation.max_length = options.max_length;
    truncation.strategy = text::truncation_strategy_from_string(options.truncation);
    tokenizer.set_truncation(truncation);
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  size_t number = 0;
  std::string out;
  if (options.decode) {
    while (std::getline(std::cin, line)) {
      std::vector<uint32_t> ids = parse_ids(line, ++number);
      out = tokenizer.decode(ids, !options.keep_special_tokens);
      out += '\n';
      std::cout << out;
    }
    return 0;
  }
  std::vector<EncodeInput> batch;
  auto flush = [&] {
    out.clear();
    for (const Encoding& encoding : tokenizer.encode_batch(batch, threads, !options.no_special_tokens)) {
      print_encoding(encoding, options, out);
    }
    std::cout << out;
    batch.clear();
  };
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    batch.push_back(parse_input(std::move(line), ++number, options.pair));
    if (batch.size() == kLinesPerBatch) flush();
  }
  if (!batch.empty()) flush();
  std::cout.flush();
  return 0;
}

int run_train(const TrainOptions& options, int threads, bool quiet) {
  std::optional<Tokenizer> tokenizer;
  if (options.kind == "wordpiece") {
    text::WordPieceTrainerOptions trainer;
    trainer.vocab_size = options.vocab_size;
    trainer.min_frequency = options.min_frequency;
    trainer.lowercase = !options.cased;
    trainer.threads = threads;
    tokenizer.emplace(text::train_wordpiece(options.files, trainer));
  } else if (options.kind == "unigram") {
    text::UnigramTrainerOptions trainer;
    trainer.vocab_size = options.vocab_size;
    trainer.threads = threads;
    tokenizer.emplace(text::train_unigram(options.files, trainer));
  } else {
    text::BpeTrainerOptions trainer;
    trainer.vocab_size = options.vocab_size;
    trainer.min_frequency = options.min_frequency;
    trainer.threads = threads;
    tokenizer.emplace(text::train_byte_level_bpe(options.files, trainer));
  }
  text::save_tokenizer(*tokenizer, options.out);
  if (!quiet) {
    std::cout << fmt::format("trained a {} vocabulary of {} tokens; wrote {}/tokenizer.json{}\n", options.kind,
                             tokenizer->vocab_size(), options.out,
                             options.kind == "wordpiece" ? " and vocab.txt" : options.kind == "unigram" ? "" : " and vocab.json + merges.txt");
  }
  return 0;
}

}  // namespace

void register_tokenize_commands(CLI::App& app, GlobalOptions& global) {
  auto tokenize_options = std::make_shared<TokenizeOptions>();
  CLI::App* tokenize = app.add_subcommand(
      "tokenize",
      "Encode stdin lines to token ids (one line of space-separated ids per input line), or decode id lines");
  tokenize->add_option("--tokenizer", tokenize_options->tokenizer_path,
                       "tokenizer.json, vocab.txt, vocab.json (+merges.txt), encoder.json (+vocab.bpe), a directory with one, "
                       "or a GGUF file (*.gguf: its tokenizer.ggml.* metadata)")
      ->required();
  tokenize->add_flag("--pair", tokenize_options->pair, "each line holds two texts separated by a tab");
  tokenize->add_flag("--offsets", tokenize_options->offsets,
                     "append a tab and each token's character span BEGIN:END in its text");
  tokenize->add_flag("--type-ids", tokenize_options->type_ids, "append a tab and the token type ids");
  tokenize->add_flag("--decode", tokenize_options->decode, "read lines of ids and print their text");
  tokenize->add_flag("--no-special-tokens", tokenize_options->no_special_tokens, "do not add [CLS]/[SEP] or similar");
  tokenize->add_flag("--keep-special-tokens", tokenize_options->keep_special_tokens, "with --decode: print special tokens");
  tokenize->add_flag("--cased", tokenize_options->cased, "for a bare vocab.txt: do not lower-case or strip accents");
  tokenize->add_option("--max-length", tokenize_options->max_length, "truncate to this many tokens (0: no truncation)");
  tokenize->add_option("--truncation", tokenize_options->truncation, "longest-first, only-first or only-second")
      ->check(CLI::IsMember({"longest-first", "only-first", "only-second"}));
  tokenize->callback([tokenize_options, &global] {
    global.action = [tokenize_options, &global] { return run_tokenize(*tokenize_options, global.threads); };
  });

  auto train_options = std::make_shared<TrainOptions>();
  CLI::App* tokenizer = app.add_subcommand("tokenizer", "Tokenizer vocabularies");
  tokenizer->require_subcommand(1);
  CLI::App* train = tokenizer->add_subcommand("train", "Train a WordPiece, byte-level BPE or Unigram vocabulary from text files");
  train->add_option("--kind", train_options->kind, "wordpiece (BERT), bpe (GPT-2 byte-level) or unigram (SentencePiece: NFKC, Metaspace)")
      ->check(CLI::IsMember({"wordpiece", "bpe", "unigram"}))
      ->required();
  train->add_option("--vocab-size", train_options->vocab_size, "number of tokens, special tokens and alphabet included")
      ->required()
      ->check(CLI::PositiveNumber);
  train->add_option("--out", train_options->out, "output directory (tokenizer.json plus vocab.txt or vocab.json + merges.txt)")
      ->required();
  train->add_option("--min-frequency", train_options->min_frequency, "stop when the best pair occurs fewer times");
  train->add_flag("--cased", train_options->cased, "wordpiece: keep case and accents");
  train->add_option("files", train_options->files, "text files, one text per line")->required()->check(CLI::ExistingFile);
  train->callback([train_options, &global] {
    global.action = [train_options, &global] { return run_train(*train_options, global.threads, global.quiet); };
  });
}

}  // namespace attnkit::cli
