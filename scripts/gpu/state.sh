# Sourced by scripts/gpu/setup.sh. Every GPU command starts on a fresh machine (a held one is given back
# after seconds of idleness), so work that takes more than one command travels between them without
# checkpoints: a finished run's config, metrics, evaluations and the sweep's state file are enough for
# `contextlab sweep` (and the study drivers) to skip it on the next machine.
#   save_state DIR ARCHIVE     DIR minus checkpoints/ into ARCHIVE (.tar.gz) -- put it under $OUT
#   restore_state ARCHIVE      unpack ARCHIVE where it was made, when it exists
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
