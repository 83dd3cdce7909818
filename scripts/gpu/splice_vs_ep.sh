#!/usr/bin/env bash
# Issue 20 (c) on a CUDA machine: recipes/splice_vs_ep_extension_gpu.toml through scripts/splice_vs_ep_extension.py
# (corpus, pretraining at 512, the EP and SPLICE extensions to 4096, evaluations, paired difference, compare).
# Stops at LIMIT_S seconds (default 540). Writes to OUT_DIR the tables (summary.md/.json), plots, timings,
# evaluations, comparisons and training metrics. The study must finish in one command: a later command
# starts on a fresh machine, and the base model's weights are too large to travel back with the checkout.
# Run from the repository root with .whl/ and .gpu/ carried (.gpu/ holds the key-value file: cp
# ../shared/data/lost_in_the_middle/kv-retrieval-75_keys.jsonl.gz .gpu/):
#   bash scripts/gpu/splice_vs_ep.sh OUT_DIR
set -u
out=${1:?usage: splice_vs_ep.sh OUT_DIR}
mkdir -p "$out"
source scripts/gpu/setup.sh
need_debian
recipe=${RECIPE:-recipes/splice_vs_ep_extension_gpu.toml}  # RECIPE: a small copy, for a rehearsal on a CPU
study=$(python3 -c "import sys; from contextlab.config import read_toml; print(read_toml(sys.argv[1])['out']['dir'])" "$recipe")
timeout -s INT "${LIMIT_S:-540}" python3 scripts/splice_vs_ep_extension.py "$recipe" 2>&1 \
  | tr '\r' '\n' | grep -v -i -e warn -e '%|' > "$out/study.log"
grep -E '^\$ |^wrote|error|Error' "$out/study.log" | cut -c1-240 | tail -30
tail -40 "$out/study.log"
cp -r "$study"/summary.md "$study"/summary.json "$study"/timings.json "$study"/*.png "$study"/eval "$study"/compare "$out/" 2>/dev/null
for m in base ep splice; do cp "$study/runs/$m/metrics.jsonl" "$out/metrics_$m.jsonl" 2>/dev/null; done
