#!/usr/bin/env bash
# make demo -> bash scripts/demo.sh BUILD_DIR: `attnkit demo`, every stage, into demo-output/
# (not tracked), ending with demo-output/report.html. DEMO_ARGS adds options (e.g. --quick).
# Exit status: attnkit demo's. 0 when every stage ran, whether or not each met its targets (missed
# targets are in the report and in its last line); 1 when a stage failed (the report is still
# written, with what failed); 2 for bad options.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
OUT="${DEMO_OUT:-demo-output}"
rm -rf "$OUT"
start=$(date +%s)
status=0
# shellcheck disable=SC2086
"$BUILD/attnkit" demo --out "$OUT" ${DEMO_ARGS:-} || status=$?
if [ -f "$OUT/report.html" ]; then
  echo "demo: done in $(( $(date +%s) - start )) s; open $OUT/report.html in a browser"
fi
exit "$status"
