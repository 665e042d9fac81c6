#include "kernel_isa.h"

#include "attnkit/error.h"
#include "attnkit/runtime.h"

#include <cstdlib>
#include <string>

namespace attnkit::ops::cpu {

KernelIsa best_kernel_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma"))
    return KernelIsa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KernelIsa::Avx2;
  return KernelIsa::Baseline;
}

const char* kernel_isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::Avx512: return "avx512";
    case KernelIsa::Avx2: return "avx2";
    default: return "baseline";
  }
}

namespace {

KernelIsa choose_kernel_isa() {
  const KernelIsa best = best_kernel_isa();
  const char* forced = std::getenv("ATTNKIT_KERNEL_ISA");
  if (forced == nullptr || *forced == '\0' || std::string(forced) == "auto") return best;
  for (KernelIsa isa : {KernelIsa::Baseline, KernelIsa::Avx2, KernelIsa::Avx512}) {
    if (forced != std::string(kernel_isa_name(isa))) continue;
    if (static_cast<int>(isa) > static_cast<int>(best))
      throw Error(std::string("ATTNKIT_KERNEL_ISA=") + forced + ": this CPU runs at most '" +
                  kernel_isa_name(best) + "'");
    return isa;
  }
  throw Error(std::string("ATTNKIT_KERNEL_ISA: unknown value '") + forced +
              "'; use baseline, avx2, avx512 or auto");
}

}  // namespace

KernelIsa kernel_isa() {
  static const KernelIsa chosen = choose_kernel_isa();
  return chosen;
}

}  // namespace attnkit::ops::cpu

namespace attnkit {

std::string kernel_instruction_set() { return ops::cpu::kernel_isa_name(ops::cpu::kernel_isa()); }

}  // namespace attnkit
