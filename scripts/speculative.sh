#!/usr/bin/env bash
# MTP self-speculative decoding (issue 18, part 3): train recipes/mtp_code.toml on the Python standard
# library (its test packages held out), then compare speculative and plain cached greedy decoding on
# held-out code prompts, in fp32 and with the model cast to bf16.
#   bash scripts/speculative.sh [OUT]     (OUT default: /tmp/mtp_code; the recipe's paths assume it)
set -euo pipefail
out=${1:-/tmp/mtp_code}
stdlib=$(python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
mkdir -p "$out"
contextlab data ingest "$stdlib" --tokenizer byte --include '**/*.py' --encoding skip --no-progress \
  --exclude 'test/**,idlelib/idle_test/**,lib2to3/tests/**,tkinter/test/**,site-packages/**' --out "$out/store"
contextlab data ingest "$stdlib" --tokenizer byte --include 'test/**/*.py' --encoding skip --no-progress \
  --out "$out/heldout"
contextlab data pack "$out/store" --method ep --context 512 --seed 0 --val-fraction 0 --no-progress --out "$out/packed"
contextlab train recipes/mtp_code.toml --set data.packed="$out/packed" --set train.out_dir="$out/run"
for dtype in fp32 bf16; do
  python benchmarks/speculative.py "$out/run" --heldout "$out/heldout" --prompts 8 --prompt-tokens 256 \
    --new-tokens 128 --repeats 3 --threads 1 --dtype "$dtype" | tee "$out/speculative_$dtype.txt"
done
