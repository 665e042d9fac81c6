#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ (docs/robustness.md) for SECONDS each.
# Usage: scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]
#   BUILD_DIR  a build configured with -DATTNKIT_FUZZ=ON (make fuzz does that: build-fuzz)
#   SECONDS    per target (default 60); with FUZZ_RUNS set, the most a target may take
#   TARGET     names like safetensors_fuzz (default: every fuzz/*_fuzz.cpp)
# Environment:
#   FUZZ_RUNS     stop a target after this many executions (libFuzzer -runs; default: time only)
#   FUZZ_JOBS     targets fuzzed at once (default 1)
#   FUZZ_MAX_LEN  largest input libFuzzer makes (default: its own choice, the larger of 4096 bytes
#                 and the largest seed; inputs grow slowly past that and every execution costs more)
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
runs_limit="${FUZZ_RUNS:-}"
jobs="${FUZZ_JOBS:-1}"
max_len=()
[ -n "${FUZZ_MAX_LEN:-}" ] && max_len=(-max_len="$FUZZ_MAX_LEN")

# Fuzzes one target; returns non-zero on a finding or a missing binary.
fuzz_one() {
  local target="$1" name="${1%_fuzz}"
  local binary="$build/$target"
  if [ ! -x "$binary" ]; then echo "fuzz.sh: $binary is missing (make fuzz builds it)" >&2; return 1; fi
  local seeds="$root/fuzz/corpus/$name" regressions="$root/fuzz/regressions/$name"
  local work="$build/fuzz-corpus/$name" artifacts="$build/fuzz-artifacts/$name"
  local log="$build/fuzz-logs/$name.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  local inputs=("$work" "$seeds")
  [ -d "$regressions" ] && inputs+=("$regressions")
  local limits=(-max_total_time="$seconds")
  [ -n "$runs_limit" ] && limits+=(-runs="$runs_limit")
  echo "fuzz.sh: $target for ${seconds}s${runs_limit:+ or $runs_limit executions}"
  local start=$SECONDS
  "$binary" "${limits[@]}" -timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=1024 "${max_len[@]}" \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${inputs[@]}" > "$log" 2>&1
  local status=$?
  local took=$(( SECONDS - start ))
  local runs
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)"
  if [ "$status" -ne 0 ]; then
    echo "$target: FAILED (exit $status) after ${runs:-?} executions; log $log, input in $artifacts/" | tee -a "$summary"
    grep -m3 -E 'ERROR|FINDING|runtime error|Timeout|out-of-memory' "$log" >&2
    return 1
  fi
  echo "$target: ${runs:-?} executions in ${took}s, no finding" | tee -a "$summary"
}

failed=0
running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$(( running - 1 ))
  fi
  fuzz_one "$target" &
  running=$(( running + 1 ))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$(( running - 1 ))
done
exit "$failed"
