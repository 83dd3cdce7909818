#!/usr/bin/env bash
# Rehearse the GPU commands of issue 20 part 3 on this CPU machine before spending GPU minutes on them: the
# same scripts, run as a GPU session runs them, on small copies of the recipes (scripts/gpu/small_copy.py).
# The checkout is copied as the device copies it (tracked and untracked files that git does not ignore, with
# .gpu/ and .whl/) to a scratch folder; before each command sweeps/, stores/ and runs/ are removed (a fresh
# machine) and the state archive of the previous command is put in .gpu/state/ (as one does between device
# calls). Each step's output is checked; the first failure stops it with the log's path. About 8 minutes
# on 2 cores.
#   bash scripts/gpu/rehearse.sh [WORK_DIR]      (default /tmp/contextlab_rehearsal; PYTHON: .venv/bin/python)
set -eu
repo=$PWD
work=${1:-/tmp/contextlab_rehearsal}
python=${PYTHON:-$repo/.venv/bin/python}
for f in .gpu/books.tar.xz .gpu/debian.tar.xz .gpu/kv-retrieval-75_keys.jsonl.gz; do
  [ -f "$f" ] || { echo "error: $f is missing (scripts/gpu/README.md says what .gpu/ holds)"; exit 1; }
done
rm -rf "$work" && mkdir -p "$work/repo"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$work/repo"
cp -r .gpu "$work/repo/" && rm -rf "$work/repo/.gpu/state" && mkdir -p "$work/repo/.gpu/state"
"$python" scripts/gpu/small_copy.py "$work/recipes"
export REHEARSAL=1 PATH="$(dirname "$python"):$PATH"
cd "$work/repo"

step() {  # step NAME CHECK-COMMAND -- ENV... SCRIPT ARGS...: a fresh machine, the command, then its check
  local name=$1 check=$2; shift 3
  rm -rf sweeps stores runs
  echo "== $name"
  env "$@" > "$work/$name.log" 2>&1 || true
  bash -c "$check" || { echo "FAILED: $name: $check (log: $work/$name.log)"; exit 1; }
}
done_rows() { grep -c ",done," "$1" 2>/dev/null || true; }
export -f done_rows

step l "python3 -c \"import json; d = json.load(open('$work/l/learning.json')); assert len(d['variants']) == 6 and all('learns' in v for v in d['variants'].values()), d\"" \
  -- "LEARNING_ARGS=--device cpu --size tiny-2x128 --context 128 --rows 8 --micro 4 --steps 20 --warmup 5 --val-tokens 4096 --threads 1 --parallel 2" \
  bash scripts/gpu/learning_check.sh "$work/l"

oc="RECIPE=$work/recipes/optimal_context.toml"
step a1 "[ \$(done_rows $work/a1/results.csv) = 2 ]" -- "$oc" bash scripts/gpu/optimal_context.sh "$work/a1" --only 'max_flops-2e\+11'
cp "$work/a1/optimal_context_gpu.tar.gz" .gpu/state/
step a2 "[ \$(done_rows $work/a2/results.csv) = 4 ] && grep -q '"600000000000.0"' $work/a2/compute_optimal.json && grep -q '"200000000000.0"' $work/a2/compute_optimal.json" \
  -- "$oc" bash scripts/gpu/optimal_context.sh "$work/a2" --only 'max_flops-6e\+11'

cg="RECIPE=$work/recipes/contextlm_vs_gpt.toml"
step b0 "[ \$(done_rows $work/b0/results.csv) = 3 ] && [ -f $work/b0/compare_seed0_contextlm_vs_clm__n_layer-2/compare_contextwise.json ]" \
  -- "$cg" LAYERS=2 bash scripts/gpu/contextlm_vs_gpt.sh "$work/b0" 0
cp "$work/b0/contextlm_vs_gpt_gpu.tar.gz" .gpu/state/
step b1 "[ \$(done_rows $work/b1/results.csv) = 6 ] && [ -f $work/b1/compare_seed1_contextlm_vs_clm__n_layer-4/compare_contextwise.json ]" \
  -- "$cg" LAYERS=2 bash scripts/gpu/contextlm_vs_gpt.sh "$work/b1" 1

step c "grep -q 'SPLICE minus EP' $work/c/summary.md && [ -f $work/c/compare/compare_contextwise.json ]" \
  -- "RECIPE=$work/recipes/splice_vs_ep.toml" bash scripts/gpu/splice_vs_ep.sh "$work/c"
echo "rehearsal passed: every GPU command of part 3 ran on small copies; outputs in $work"
