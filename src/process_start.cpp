// Thread-pool waiting defaults of attnkit's executables (the CLI, the benchmarks, the base tests).
//
// LibTorch on Debian runs two thread pools side by side: libgomp's (ATen's element-wise ops and
// attnkit's kernels, src/ops/cpu/parallel.cpp) and OpenBLAS's own pthreads (every GEMM). After a
// parallel region each pool's idle workers keep spinning for a while before they sleep: libgomp
// 300,000 spins by default, OpenBLAS 2^28 TSC cycles (about 0.1 s) calling sched_yield. On a
// 2-core machine the idle pool's spinning worker takes a core from the busy one's: a BERT-base
// forward at batch 16, n 128 spent about a quarter of its cycles in libgomp's spin loop and
// sched_yield (perf), and ran 746 tokens/s against 1070 with these defaults (docs/architecture.md).
//
// Both libraries read their settings from the environment in their ELF constructors, before
// main() runs, and the C library's own start-up resets the environment to the one the process was
// started with, so an early setenv() is lost. The defaults are therefore applied by starting the
// program again: the executable's DT_PREINIT_ARRAY entry runs before any shared library's
// constructor (the libraries are mapped and relocated, none has started; repeating that costs
// about 0.15 s with LibTorch's ~290 libraries), and when a default is missing from the
// environment it execve()s /proc/self/exe with the same arguments and the defaults added. A value the user set is kept:
//   GOMP_SPINCOUNT=10000          unless GOMP_SPINCOUNT or OMP_WAIT_POLICY is set
//   OPENBLAS_THREAD_TIMEOUT=16    (2^16 cycles) unless it is set
// With both present nothing happens, so the second start goes straight on; if execve() fails the
// program runs with the libraries' own defaults. With `--threads 1` neither pool runs a worker
// (OpenBLAS is capped at one thread, libgomp forms no team), so there is nothing to spin and no
// second start: 0.34-0.35 s to `attnkit --threads 1 --version` instead of 0.47-0.49 s (three
// processes each, 2026-11-29, the 2-core Zen 5 beside two niced jobs). A library that loads attnkit (libattnkit_ops.so
// in Python) cannot do this: set the two variables in that process's environment.
//
// One pool instead (Debian's OpenMP OpenBLAS, GEMMs on libgomp's workers) does not make this
// unnecessary: libgomp's default spin count is as costly there (docs/architecture.md, measured).
//
// This object is linked into executables only (a shared library has no preinit array). It is
// left out of sanitizer builds, whose runtimes initialise from the same array.
#include <cstring>

#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNKIT_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define ATTNKIT_SANITIZED 1
#endif

#if !defined(ATTNKIT_SANITIZED) && defined(__linux__)
namespace {

// Runs before the C library has started: only the arguments, no getenv() and no allocation.
bool has_variable(char** envp, const char* name) {
  const size_t length = std::strlen(name);
  for (char** entry = envp; *entry; ++entry)
    if (std::strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') return true;
  return false;
}

// Whether the arguments ask for one thread (`--threads 1` or `--threads=1`, the last occurrence):
// then no pool has workers to spin, and the second start is skipped.
bool one_thread(char** argv) {
  bool one = false;
  for (char** arg = argv + 1; *arg; ++arg) {
    if (std::strcmp(*arg, "--threads") == 0 && arg[1] != nullptr) {
      one = std::strcmp(arg[1], "1") == 0;
      ++arg;
    } else if (std::strncmp(*arg, "--threads=", 10) == 0) {
      one = std::strcmp(*arg + 10, "1") == 0;
    }
  }
  return one;
}

void start_with_thread_wait_defaults(int, char** argv, char** envp) {
  if (!argv || !envp || !argv[0] || one_thread(argv)) return;
  const bool spin = !has_variable(envp, "GOMP_SPINCOUNT") && !has_variable(envp, "OMP_WAIT_POLICY");
  const bool blas = !has_variable(envp, "OPENBLAS_THREAD_TIMEOUT");
  if (!spin && !blas) return;
  static char spin_default[] = "GOMP_SPINCOUNT=10000";
  static char blas_default[] = "OPENBLAS_THREAD_TIMEOUT=16";
  static char* env[4096];
  size_t count = 0;
  while (envp[count]) {
    if (count + 3 >= sizeof(env) / sizeof(env[0])) return;  // an unusual environment: leave it
    env[count] = envp[count];
    ++count;
  }
  if (spin) env[count++] = spin_default;
  if (blas) env[count++] = blas_default;
  env[count] = nullptr;
  execve("/proc/self/exe", argv, env);  // returns only on failure: go on without the defaults
}

}  // namespace

__attribute__((section(".preinit_array"), used)) static void (*const attnkit_preinit)(int, char**, char**) =
    &start_with_thread_wait_defaults;
#endif
