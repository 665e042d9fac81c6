// attnkit: command-line entry point. Global options apply to every subcommand; each subcommand
// is registered from its own file (see command.h).
#include "attnkit/error.h"
#include "attnkit/runtime.h"
#include "attnkit/version.h"
#include "command.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <thread>

namespace attnkit::cli {

std::vector<int64_t> parse_id_list(const std::string& text, const char* option) {
  std::vector<int64_t> values;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    if (token.back() == ',') token.pop_back();
    if (token.empty()) continue;
    const auto v = try_parse_int(token);
    if (!v) throw Error(fmt::format("{}: '{}' is not an integer (give token ids separated by spaces)", option, token));
    if (*v < 0) throw Error(fmt::format("{}: '{}' is not a token id (ids are >= 0)", option, token));
    values.push_back(*v);
  }
  if (values.empty()) throw Error(fmt::format("{}: no ids given", option));
  return values;
}

}  // namespace attnkit::cli

namespace {

void apply_threads(int threads) {
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
  at::set_num_interop_threads(n);
  attnkit::set_blas_threads(n);
  // Read ATTNKIT_GEMM (and hold oneDNN to ATTNKIT_KERNEL_ISA's copy) before any work: a bad value
  // is one line here, not an exception inside a kernel's parallel loop.
  attnkit::gemm_library_name();
  attnkit::fused_decoding_step();  // ATTNKIT_FUSED_STEP, likewise
}

// Ends the process with `status` once the command is done. The output is flushed first, and a
// failed write of it (a full disk behind a redirection) is an error of its own; then _exit, which
// skips the static destructors: LibTorch's deregister its thousands of operators one by one, ~60 ms
// at the end of every command (perf of `attnkit --threads 1 --version`), and nothing attnkit writes
// waits on them (every file is closed with the command's scope). Sanitizer builds exit normally:
// their leak check runs at exit.
[[noreturn]] void end_process(int status) {
  std::cout.flush();
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "attnkit: error: cannot write the output%s%s\n", errno ? ": " : "",
                 errno ? std::strerror(errno) : "");
    if (status == 0) status = 2;
  }
  std::fflush(stderr);
#if defined(__SANITIZE_ADDRESS__)
  std::exit(status);
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  std::exit(status);
#endif
#endif
  std::_Exit(status);
}

int run(int argc, char** argv) {
  using namespace attnkit::cli;
  attnkit::reuse_freed_memory();
  CLI::App app{"attnkit: build, train, decode and dissect Transformer attention"};
  app.set_version_flag("--version", attnkit::version());
  app.require_subcommand(1);
  GlobalOptions global;
  global.argv.assign(argv, argv + argc);
  app.add_option("--threads", global.threads,
                 "CPU threads for intra- and inter-op parallelism (default: all cores)")
      ->check(attnkit::cli::at_least(0));
  app.add_option("--seed", global.seed, "random seed")->capture_default_str();
  app.add_flag("--quiet", global.quiet, "print less");

  register_analyze_command(app, global);
  register_heads_commands(app, global);
  register_attention_command(app, global);
  register_bleu_command(app, global);
  register_demo_command(app, global);
  register_generate_command(app, global);
  register_gguf_command(app, global);
  register_inspect_command(app, global);
  register_linearize_command(app, global);
  register_model_commands(app, global);
  register_report_command(app, global);
  register_train_commands(app, global);
  register_tokenize_commands(app, global);

  if (const auto status = parse_flags(app, argc, argv, "attnkit")) return *status;
  try {
    apply_threads(global.threads);
    return global.action ? global.action() : 0;
  } catch (const attnkit::Error& e) {
    std::fprintf(stderr, "attnkit: error: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "attnkit: error: %s\n", e.what_without_backtrace());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnkit: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) { end_process(run(argc, argv)); }
