#!/usr/bin/env bash
# Issue 20 (a) on a CUDA machine: recipes/optimal_context_gpu.toml (the books and Debian corpus of
# scripts/gpu/lm_corpus.sh, then the 18-run sweep, four runs at a time on the one GPU), in slices that fit the
# device's 10 minutes per command. Each command restores the finished runs that came back from the previous
# one (.gpu/state/optimal_context_gpu.tar.gz, without checkpoints), runs what is pending among the runs
# --only selects until LIMIT_S seconds (default 480; an unfinished run is stopped and starts again from
# scratch next time), and writes to OUT_DIR the state for the next command, results.csv,
# compute_optimal.json and the plots. Run from the repository root with .whl/ and .gpu/ carried:
#   bash scripts/gpu/optimal_context.sh OUT_DIR [--only REGEX]
# e.g. first --only 'max_flops-(5e\+14|1.58e\+15)', then (after cp OUT_DIR/optimal_context_gpu.tar.gz
# .gpu/state/) --only 'max_flops-5e\+15'.
set -u
out=${1:?usage: optimal_context.sh OUT_DIR [sweep arguments]}
shift
mkdir -p "$out"
source scripts/gpu/setup.sh
source scripts/gpu/lm_corpus.sh
sweep_slice optimal_context_gpu "${RECIPE:-recipes/optimal_context_gpu.toml}" "$out" "$@"  # RECIPE: a small copy
for f in compute_optimal.json u_curves.png optimal_context.png gap_curves.png; do
  [ -f "sweeps/optimal_context_gpu/$f" ] && cp "sweeps/optimal_context_gpu/$f" "$out/"
done
