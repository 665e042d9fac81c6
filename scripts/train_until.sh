# Sourced by scripts/lm_linearize.sh and scripts/pretrained_linearize.sh, whose AK array holds the
# attnkit command line (niced, one thread, seed).
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
