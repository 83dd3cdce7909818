# Sourced by scripts/gpu/setup.sh. Every GPU command starts on a fresh machine (a held one is given back
# after seconds of idleness), so work that takes more than one command travels between them without
# checkpoints: a finished run's config, metrics, evaluations and the sweep's state file are enough for
# `contextlab sweep` (and the study drivers) to skip it on the next machine.
#   save_state DIR ARCHIVE     DIR minus checkpoints/ into ARCHIVE (.tar.gz) -- put it under $OUT
#   restore_state ARCHIVE      unpack ARCHIVE where it was made, when it exists
#   sweep_slice NAME RECIPE OUT [ARGS]   a sweep command of a slice of a grid, between the two (below)
# Between two commands, copy the archive that came back into .gpu/state/ so it travels with the checkout.
save_state() {
  local dir=${1:?save_state DIR ARCHIVE} archive=${2:?save_state DIR ARCHIVE}
  [ -d "$dir" ] || { echo "save_state: no $dir"; return 0; }
  tar -czf "$archive" --exclude=checkpoints --exclude='*.partial' "$dir" \
    && echo "saved $dir without checkpoints: $archive ($(du -h "$archive" | cut -f1))"
}
restore_state() {
  local archive=${1:?restore_state ARCHIVE}
  [ -f "$archive" ] || return 0
  tar -xzf "$archive" && echo "restored $(tar -tzf "$archive" | head -1) from $archive"
}
# sweep_slice NAME RECIPE OUT [contextlab sweep arguments]: restore sweeps/NAME from .gpu/state/NAME.tar.gz,
# run the sweep until LIMIT_S seconds (default 480; a run the limit stops starts again from scratch next time;
# DEADLINE, epoch seconds, instead stops it then, so a command whose corpus build took long still ends in time),
# list every run's status, and write OUT/NAME.tar.gz (the state for the next command) and OUT/results.csv.
sweep_slice() {
  local name=${1:?sweep_slice NAME RECIPE OUT} recipe=${2:?} out=${3:?}
  shift 3
  restore_state ".gpu/state/$name.tar.gz"
  local limit=${LIMIT_S:-480}
  [ -z "${DEADLINE:-}" ] || limit=$((DEADLINE - $(date +%s)))
  echo "sweep $name: stops in $limit s at the latest"
  timeout -s INT "$limit" python3 -m contextlab sweep "$recipe" "$@" 2>&1 \
    | tr '\r' '\n' | grep -v -i -e warn -e '%|' | tee "$out/sweep.log" | tail -40
  python3 -m contextlab sweep "$recipe" --dry-run | tail -20
  save_state "sweeps/$name" "$out/$name.tar.gz"
  cp "sweeps/$name/results.csv" "$out/" 2>/dev/null
}
