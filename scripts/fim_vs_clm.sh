#!/usr/bin/env bash
# FIM vs CLM on code (issue 18, part 4): ingest the Python standard library byte-level, train
# recipes/fim_vs_clm.toml (a FIM and a CLM 4x256 GPT, same data and token budget, one after the
# other), then measure infilling and left-to-right loss of both on the files they held out.
#   bash scripts/fim_vs_clm.sh [OUT]      (OUT default: /tmp/fim; the recipe's paths assume it)
set -euo pipefail
out=${1:-/tmp/fim}
stdlib=$(python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
contextlab data ingest "$stdlib" --tokenizer byte --encoding replace --include '*.py' \
  --exclude 'site-packages/,**/test/,**/tests/,**/idle_test/,__pycache__/' --out "$out/stores/stdlib_byte" --no-progress
contextlab sweep recipes/fim_vs_clm.toml --no-analysis \
  --set sweep.out_dir="$out/sweep" --set base.data.store="$out/stores/stdlib_byte"
for name in fim clm; do
  contextlab eval infill --model "$out/sweep/runs/name-$name" --data "$out/stores/stdlib_byte" \
    --out "$out/eval/$name" --samples 200 --threads 1 --progress false
done
python scripts/fim_vs_clm_table.py "$out/eval/fim/infill.json" "$out/eval/clm/infill.json"
