#!/usr/bin/env bash
# Issue 20 (a) on a CUDA machine: recipes/optimal_context_gpu.toml (ingest the books with a BPE of 8192 on the
# machine's cores, then the 18-run sweep, four runs at a time on the one GPU). Resumable: started again (a
# later command on the same machine) it skips finished runs. Copies results.csv, compute_optimal.json and the
# plots to OUT_DIR.  Run from the repository root with .whl/ and .gpu/ carried:
#   bash scripts/gpu/optimal_context.sh OUT_DIR [extra contextlab sweep arguments, e.g. --only 'max_flops-5e\+14']
set -u
out=${1:?usage: optimal_context.sh OUT_DIR [sweep arguments]}
shift
mkdir -p "$out"
source scripts/gpu/setup.sh
cl="python3 -m contextlab"
[ -d stores/gutenberg_bpe8k_train ] || $cl data ingest /tmp/books/texts --tokenizer bpe:8192 --exclude 'pg9*.txt' \
  --out stores/gutenberg_bpe8k_train
[ -d stores/gutenberg_bpe8k_heldout ] || $cl data ingest /tmp/books/texts \
  --tokenizer store:stores/gutenberg_bpe8k_train --include 'pg9??.txt' --out stores/gutenberg_bpe8k_heldout
$cl sweep recipes/optimal_context_gpu.toml "$@" 2>&1 | tee "$out/sweep.log" | grep -v -i warn | tail -40
for f in results.csv compute_optimal.json u_curves.png optimal_context.png gap_curves.png; do
  [ -f "sweeps/optimal_context_gpu/$f" ] && cp "sweeps/optimal_context_gpu/$f" "$out/"
done
