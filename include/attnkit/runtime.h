#pragma once
// Process-wide settings for CPU work, applied by attnkit's executables (the CLI and the
// benchmarks) before any model runs. No LibTorch in this header. The executables also start
// LibTorch's thread pools with short spin-waits (src/process_start.cpp, an object linked into
// executables, not into the library: docs/architecture.md "Thread pools").

#include <string>

namespace attnkit {

// Caps the BLAS that LibTorch links (Debian: OpenBLAS, which runs its own thread pool and ignores
// at::set_num_threads) at `threads`. Without this, `--threads 1` still ran every GEMM on all
// cores, and at 2 threads OpenBLAS's spinning workers competed with ATen's pool. A no-op when the
// BLAS is not OpenBLAS, or is OpenBLAS's OpenMP build (whose thread count is libgomp's, shared with
// LibTorch: setting it would cap ATen's loops too).
void set_blas_threads(int threads);

// glibc malloc: serve large blocks from the heap and keep up to 1 GiB of freed memory there instead
// of unmapping it. Training allocates the same large temporaries (logits, activations, their
// gradients) on every step; by default each block above 32 MiB is a fresh mmap whose pages fault
// in again, which on some virtual machines costs more than the arithmetic. Call once at start-up,
// before threads start; a no-op on other C libraries.
void reuse_freed_memory();

// While alive (a loader building the model it fills, models::DeferredInit), blocks of 1 MiB and
// more are mappings of their own again, as glibc makes them by default, where reuse_freed_memory
// turned that off; nothing otherwise (nested scopes count). A parameter whose block a loader
// replaces with the file's pages (DeferredInit::adopt) then gives that block back to the system:
// left in the heap, the never-touched hole was where later blocks came from, and they faulted in
// during decoding (the Marian model, int8: ~10 ms more over its first 32 greedy steps).
class LargeBlocksMapped {
 public:
  LargeBlocksMapped();
  ~LargeBlocksMapped();
  LargeBlocksMapped(const LargeBlocksMapped&) = delete;
  LargeBlocksMapped& operator=(const LargeBlocksMapped&) = delete;
};

// The instruction-set copy of attnkit's fused CPU kernels that runs: "avx512", "avx2" or
// "baseline" — the best this CPU supports, or the one the environment variable
// ATTNKIT_KERNEL_ISA forces (read once; docs/testing.md). Throws attnkit::Error for a value that
// is unknown or above what the CPU runs.
std::string kernel_instruction_set();

// The library attnkit's float32 GEMMs run on (the kernels' tiles, the dense layers: ops/cpu/blas.h):
// "onednn" (Debian's libdnnl, where the build has it and the kernels run their AVX-512 copy: the
// default there) or "blas", as the environment variable ATTNKIT_GEMM (onednn, blas, auto) chooses
// (read once). Throws attnkit::Error for an unknown value, or onednn in a build without it.
std::string gemm_library_name();

// Whether decoding steps of one column per row take the fused block step where a model's blocks
// allow it (src/layers/fused_step.h: float32, softmax over a KV cache and a memory), as the
// environment variable ATTNKIT_FUSED_STEP (1, the default, or 0) says (read once). Throws
// attnkit::Error for another value.
bool fused_decoding_step();

}  // namespace attnkit
