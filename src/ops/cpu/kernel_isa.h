#pragma once
// Which instruction-set copy of the fused kernels runs. Every kernel entry point is compiled three
// times (ATTNKIT_KERNEL_ENTRY below: GCC `target` attributes on copies of one body) and a switch
// picks the copy of kernel_isa() on each call. kernel_isa() is decided once per process: the best
// copy this CPU runs, or the one the environment variable ATTNKIT_KERNEL_ISA names (baseline,
// avx2, avx512; `auto` or unset = best), so a test run can force a lower copy and see the bits a
// machine without AVX-512 (or without AVX2) computes. No LibTorch here.
#include <cstdint>

namespace attnkit::ops::cpu {

enum class KernelIsa : int {
  Baseline = 0,  // x86-64 (SSE2)
  Avx2 = 1,      // AVX2 + FMA (Haswell and later, Zen)
  Avx512 = 2,    // AVX-512 F/VL/BW/DQ + FMA (Skylake-SP and later, Zen 4)
};

KernelIsa best_kernel_isa();  // the highest copy this CPU can run
KernelIsa kernel_isa();       // the copy that runs (read once; throws attnkit::Error on a bad value)
const char* kernel_isa_name(KernelIsa isa);

// Defines `void NAME PARAMS` (declared in a kernel header) as a dispatch over three copies of
// `IMPL ARGS`. IMPL and everything it calls must be inline-able (ATTNKIT_INLINE for helpers that
// GCC may not inline on its own), or they run with the baseline instruction set.
#define ATTNKIT_KERNEL_ENTRY(NAME, IMPL, PARAMS, ARGS)                                            \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))) static void              \
      NAME##_avx512 PARAMS {                                                                      \
    IMPL ARGS;                                                                                    \
  }                                                                                               \
  __attribute__((target("avx2,fma"))) static void NAME##_avx2 PARAMS { IMPL ARGS; }               \
  static void NAME##_baseline PARAMS { IMPL ARGS; }                                               \
  void NAME PARAMS {                                                                              \
    switch (::attnkit::ops::cpu::kernel_isa()) {                                                  \
      case ::attnkit::ops::cpu::KernelIsa::Avx512: return NAME##_avx512 ARGS;                     \
      case ::attnkit::ops::cpu::KernelIsa::Avx2: return NAME##_avx2 ARGS;                         \
      default: return NAME##_baseline ARGS;                                                       \
    }                                                                                             \
  }

}  // namespace attnkit::ops::cpu
