#!/usr/bin/env bash
# Issue 43's start: wall time of a one-token `attnkit generate` on the Marian benchmark model
# (bench/decode_ct2_marian.py prepare), as published (its hf/ directory) and converted to attnkit's
# format (weights laid out to be mapped), in alternating rounds; optionally a second build first in
# each round (e.g. the previous commit's) on the published directory.
#   bash bench/marian_start.sh BUILD [OTHER_BUILD] [ROUNDS]
# Prints one line per process: wall, user and system seconds (/usr/bin/time) and --json's load_s,
# prefill_s and total_s. Run it on an idle machine.
set -euo pipefail
build=${1:?usage: bash bench/marian_start.sh BUILD [OTHER_BUILD] [ROUNDS]}
other=${2:-}
rounds=${3:-5}
model=${MARIAN_DIR:-$HOME/.cache/attnkit/decode-bench-marian}/hf
[ -f "$model/model.safetensors" ] || { echo "marian_start.sh: no $model (run bench/decode_ct2_marian.py prepare)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "In the beginning God created the heaven and the earth." > "$work/source.txt"
"$build/attnkit" --threads 1 --quiet convert --from "$model" --to "$work/attnkit-format" > /dev/null
one() {  # label, attnkit binary, model directory
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$2" --threads 1 --quiet generate --model "$3" \
      --sources "$work/source.txt" --max-new-tokens 1 --json > "$work/out.json"
  python3 - "$1" "$work/time" "$work/out.json" <<'PY'
import json, sys
label, time_file, out_file = sys.argv[1:]
wall, user, system = open(time_file).read().split()[-3:]
t = json.load(open(out_file))["timing"]
print(f"{label:<22} wall {wall} s  user {user}  sys {system}  load_s {t['load_s']:.3f}  "
      f"prefill_s {t['prefill_s']:.3f}  total_s {t['total_s']:.3f}")
PY
}
for _ in $(seq "$rounds"); do
  [ -n "$other" ] && one "other build, published" "$other/attnkit" "$model"
  one "published" "$build/attnkit" "$model"
  one "attnkit format" "$build/attnkit" "$work/attnkit-format"
done
