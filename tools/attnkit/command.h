#pragma once
// Subcommand plumbing for the attnkit CLI. Each subcommand lives in its own file and exposes a
// register_*_command function that main.cpp calls; the callback stores the action to run after
// the global options (threads, seed) have been applied.
#include <CLI/CLI.hpp>

#include "flags.h"  // tools/flags.h: at_least, one-line parse errors

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attnkit::cli {

struct GlobalOptions {
  int threads = 0;          // 0 = all cores
  uint64_t seed = 0;
  bool quiet = false;
  std::vector<std::string> argv;  // the command line as given (for re-launching workers)
  std::function<int()> action;  // set by the chosen subcommand
};

// Token ids separated by spaces (a trailing comma on an id is allowed), for --ids / --prompt-ids.
// Throws attnkit::Error "OPTION: 'TOKEN' is not an integer ..." / "... is not a token id ..."
// for a token that is not a non-negative integer, and "OPTION: no ids given" for none.
std::vector<int64_t> parse_id_list(const std::string& text, const char* option);

// `attnkit data X` writers that live in their own files (data_X_command.cpp).
void add_data_corpus_command(CLI::App* data_cmd, GlobalOptions& global);

void register_analyze_command(CLI::App& app, GlobalOptions& global);
void register_attention_command(CLI::App& app, GlobalOptions& global);
void register_bleu_command(CLI::App& app, GlobalOptions& global);  // bleu_command.cpp
void register_demo_command(CLI::App& app, GlobalOptions& global);
void register_generate_command(CLI::App& app, GlobalOptions& global);
void register_gguf_command(CLI::App& app, GlobalOptions& global);  // gguf FILE.gguf
void register_inspect_command(CLI::App& app, GlobalOptions& global);  // inspect FILE.safetensors
void register_linearize_command(CLI::App& app, GlobalOptions& global);  // linearize_command.cpp
void register_model_commands(CLI::App& app, GlobalOptions& global);  // encode, convert
// analyze heads (after register_analyze_command), prune
void register_heads_commands(CLI::App& app, GlobalOptions& global);
void register_report_command(CLI::App& app, GlobalOptions& global);
void register_train_commands(CLI::App& app, GlobalOptions& global);  // train, eval, data
void register_tokenize_commands(CLI::App& app, GlobalOptions& global);
// attnkit data parallel (data_parallel_command.cpp), called by register_train_commands.
void add_data_parallel_command(CLI::App* data_cmd, GlobalOptions& global);
// data lra-pathfinder (data_lra_command.cpp), under `attnkit data`
void add_data_lra_command(CLI::App* data_cmd, GlobalOptions& global);
// data lra-text, lra-retrieval (data_lra_text_command.cpp), under `attnkit data`
void add_data_lra_text_command(CLI::App* data_cmd, GlobalOptions& global);

}  // namespace attnkit::cli
