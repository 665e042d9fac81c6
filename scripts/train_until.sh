# Sourced by scripts/lm_linearize.sh and scripts/pretrained_linearize.sh, whose AK array holds the
# attnkit command line (niced, one thread, seed): their runs' resume logic and their cells' stage 1.
# train_until DIR LOG ARGS...: `train ARGS --run.dir DIR` (stdout and stderr appended to LOG, its
# /usr/bin/time -v report to LOG.time), or `train --resume DIR` when DIR has a step checkpoint;
# DIR/done when it has finished, and nothing at all once DIR/done exists.
train_until() {
  local dir="$1" log="$2"
  shift 2
  if [ -f "$dir/done" ]; then return; fi
  if [ -d "$dir/checkpoints" ] && ls "$dir/checkpoints" | grep -q step-; then
    /usr/bin/time -a -o "$log.time" -v "${AK[@]}" train --resume "$dir" >> "$log" 2>&1
  else
    /usr/bin/time -a -o "$log.time" -v "${AK[@]}" train "$@" --run.dir "$dir" >> "$log" 2>&1
  fi
  touch "$dir/done"
}

# linearize_cell CELL KIND TEACHER DATA_DIR BATCH: stage 1 of a cell, `attnkit linearize` of every
# layer of TEACHER to KIND (LIN_STEPS steps, default 300, of BATCH windows of 128 tokens of
# DATA_DIR/train.txt; held-out transfer losses on DATA_DIR/val.txt) into CELL/student, unless its
# transfer.json is there; KIND softmax (the control) has none. Sets INIT to the model stage 2
# starts from: CELL/student, or TEACHER for softmax.
linearize_cell() {
  local cell="$1" kind="$2" teacher="$3" data="$4" batch="$5"
  INIT="$teacher"
  [ "$kind" != softmax ] || return 0
  INIT="$cell/student"
  [ ! -f "$cell/student/transfer.json" ] || return 0
  /usr/bin/time -o "$cell/linearize.time" -v "${AK[@]}" linearize --model "$teacher" --kind "$kind" \
    --data "$data/train.txt" --eval-data "$data/val.txt" --max-length 128 --batch-size "$batch" \
    --steps "${LIN_STEPS:-300}" --out "$cell/student" > "$cell/linearize.log" 2>&1
}
