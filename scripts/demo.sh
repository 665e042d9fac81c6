#!/usr/bin/env bash
# make demo -> bash scripts/demo.sh BUILD_DIR: `attnkit demo`, every stage, into demo-output/
# (not tracked), ending with demo-output/report.html. DEMO_ARGS adds options (e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
OUT="${DEMO_OUT:-demo-output}"
rm -rf "$OUT"
start=$(date +%s)
# shellcheck disable=SC2086
"$BUILD/attnkit" demo --out "$OUT" ${DEMO_ARGS:-}
echo "demo: done in $(( $(date +%s) - start )) s; open $OUT/report.html in a browser"
