#!/usr/bin/env bash
# The long experiments still to fill (issue 44), one after another on one core, at nice 19 in a
# scheduling group of their own; every cell resumes from its checkpoints, and a cell recorded in
# docs/cells/ (kept in git) is skipped, so a session runs this again wherever the last one stopped.
#
#   setsid nohup scripts/experiments_queue.sh BUILD LANE > LOG 2>&1 &
#
# BUILD: a build directory (copy build/ elsewhere first if you will rebuild while this runs; its
# libattnkit.so is used through LD_LIBRARY_PATH). LANE 1 and LANE 2 hold disjoint cells: run one
# per core.
#   lane 1: ListOps by seeds (bench/listops_seeds.py: 9 runs of ~40 CPU min)
#   lane 2: cosFormer's Figure 4 at 3,600 CPU s per kind (softmax, cosFormer, linear:relu), ALBERT
#           shared vs un-shared by seeds, the LRA Retrieval pilot (linear:elu, one CPU hour), MLM-
#           pretrained vs scratch by seeds for the three Figure 4 kinds
set -euo pipefail
if [ $# -ne 2 ] || { [ "$2" != 1 ] && [ "$2" != 2 ]; }; then
  echo "usage: scripts/experiments_queue.sh BUILD LANE (LANE: 1 or 2)" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
[ -x "$BUILD/attnkit" ] || { echo "experiments_queue: $BUILD/attnkit not found" >&2; exit 2; }
cd "$(dirname "$0")/.."
# Linux groups a session's processes; nice inside a group does not yield to other sessions' work,
# the group's own nice value does (setsid gives this queue a group of its own).
echo 19 > /proc/self/autogroup 2>/dev/null || true
export LD_LIBRARY_PATH="$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
py() { /usr/bin/python3 "$@" --build "$BUILD" --nice 19; }
if [ "$2" = 1 ]; then
  py bench/listops_seeds.py
else
  py bench/pretrain_results.py --budget 3600 --experiments a --kinds softmax,cosformer,linear:relu
  py bench/finetune_seeds.py --studies albert
  py bench/lra_results.py --pilot --budget 3600 --tasks retrieval --kinds linear:elu --eval-every 100
  py bench/finetune_seeds.py --studies albert,pretrained-softmax,pretrained-cosformer,pretrained-linear-relu
fi
echo "experiments_queue: lane $2 done"
