#!/usr/bin/env bash
# Runs the test suite once per machine kind it can imitate (docs/testing.md): each copy of
# attnkit's fused kernels (ATTNKIT_KERNEL_ISA), LibTorch's own CPU kernels at the same level
# (ATEN_CPU_CAPABILITY), and other OpenBLAS kernels (OPENBLAS_CORETYPE). A test that passes only
# with the bits of one machine fails here.
# Usage: scripts/test_isa.sh [BUILD_DIR] [ctest -R regex]     (BUILD_DIR defaults to build)
set -euo pipefail
build="${1:-build}"
regex="${2:-}"
jobs="${JOBS:-$(nproc)}"

flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]]; }
# name | ATTNKIT_KERNEL_ISA | ATEN_CPU_CAPABILITY | OPENBLAS_CORETYPE ("" = the library's choice)
configs=("native|auto||")
if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
  configs+=("avx512-skylakex|avx512|avx512|SkylakeX")
fi
if has avx2 && has fma; then
  configs+=("avx2-haswell|avx2|avx2|Haswell")
fi
configs+=("baseline|baseline|default|" "baseline-sandybridge|baseline|default|Sandybridge")

failed=()
for config in "${configs[@]}"; do
  IFS='|' read -r name isa aten blas <<<"$config"
  echo "=== $name: ATTNKIT_KERNEL_ISA=$isa ATEN_CPU_CAPABILITY=${aten:-(auto)} OPENBLAS_CORETYPE=${blas:-(auto)}"
  env_args=(ATTNKIT_KERNEL_ISA="$isa" OPENBLAS_NUM_THREADS=1)
  [ -n "$aten" ] && env_args+=(ATEN_CPU_CAPABILITY="$aten")
  [ -n "$blas" ] && env_args+=(OPENBLAS_CORETYPE="$blas")
  ctest_args=(--test-dir "$build" --output-on-failure -j "$jobs")
  [ -n "$regex" ] && ctest_args+=(-R "$regex")
  if ! env "${env_args[@]}" ctest "${ctest_args[@]}"; then failed+=("$name"); fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "test_isa: failed under: ${failed[*]}"
  exit 1
fi
echo "test_isa: passed under every configuration (${#configs[@]})"
