#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ (docs/robustness.md) for FUZZ_SECONDS each.
# Usage: scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]
#   BUILD_DIR  a build configured with -DATTNKIT_FUZZ=ON (make fuzz does that: build-fuzz)
#   SECONDS    per target (default 60)
#   TARGET     names like safetensors_fuzz (default: every fuzz/*_fuzz.cpp)
# Each target first replays its seeds (fuzz/corpus/NAME) and past findings (fuzz/regressions/NAME),
# then fuzzes with a working corpus under BUILD_DIR/fuzz-corpus/NAME (kept between runs, not in
# git). A crash, sanitizer report, leak, hang (-timeout) or over-limit allocation stops the target
# and leaves its input under BUILD_DIR/fuzz-artifacts/NAME/; the script then exits 1. The last
# line per target gives the executions done: BUILD_DIR/fuzz-summary.txt collects them.
set -uo pipefail
build="${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]}"
seconds="${2:-60}"
shift $(( $# >= 2 ? 2 : 1 ))
root="$(cd "$(dirname "$0")/.." && pwd)"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  for source in "$root"/fuzz/*_fuzz.cpp; do targets+=("$(basename "$source" .cpp)"); done
fi
# LibTorch and OpenBLAS start thread pools; one thread keeps executions per second up and the
# machine shared fairly.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# Scratch files in memory when possible: every input is written to a file first.
scratch_base="${TMPDIR:-/tmp}"
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then scratch_base=/dev/shm; fi
export TMPDIR="$scratch_base/attnkit-fuzz.$$"
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
summary="$build/fuzz-summary.txt"
: > "$summary"
failed=0
for target in "${targets[@]}"; do
  name="${target%_fuzz}"
  binary="$build/$target"
  if [ ! -x "$binary" ]; then echo "fuzz.sh: $binary is missing (make fuzz builds it)" >&2; failed=1; continue; fi
  seeds="$root/fuzz/corpus/$name"
  regressions="$root/fuzz/regressions/$name"
  work="$build/fuzz-corpus/$name"
  artifacts="$build/fuzz-artifacts/$name"
  mkdir -p "$work" "$artifacts"
  log="$build/fuzz-logs/$name.log"
  mkdir -p "$(dirname "$log")"
  inputs=("$work" "$seeds")
  [ -d "$regressions" ] && inputs+=("$regressions")
  echo "fuzz.sh: $target for ${seconds}s"
  "$binary" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" "${inputs[@]}" > "$log" 2>&1
  status=$?
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
  if [ "$status" -ne 0 ]; then
    failed=1
    echo "$target: FAILED (exit $status) after ${runs:-?} executions; log $log, input in $artifacts/" | tee -a "$summary"
    grep -m3 -E 'ERROR|FINDING|runtime error|Timeout|out-of-memory' "$log" >&2
  else
    echo "$target: ${runs:-?} executions in ${seconds}s, no finding" | tee -a "$summary"
  fi
done
exit "$failed"
