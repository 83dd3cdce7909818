#!/usr/bin/env bash
# SPLICE vs EP where SPLICE has little to arrange: Paul Graham's 49 essays (median ~2,000 BPE tokens)
# at context 512, so most sequences hold a piece of one essay whatever the packing. 41 essays train
# (a BPE of 4,096 trained on them), 8 are a separate validation store both runs read; the two runs
# (a 2x128 GPT, 3M tokens each, the same seed) differ only in the packing (dense retrieval for
# SPLICE). Then `contextlab profile` pairs them on the 8 held-out essays and `report` draws both.
#   bash scripts/splice_vs_ep_essays.sh [OUT]   (OUT default: /tmp/essays; 5 min 17 s on 2 cores)
set -euo pipefail
out=${1:-/tmp/essays}
essays=${ESSAYS:-../shared/data/paul_graham_essays}
held=vb.txt,vcsqueeze.txt,vw.txt,want.txt,web20.txt,weird.txt,wisdom.txt,worked.txt  # the last 8 by name
mkdir -p "$out"
contextlab data ingest "$essays" --tokenizer bpe:4096 --exclude "SOURCE.*,$held" --out "$out/train" --no-progress
contextlab data ingest "$essays" --tokenizer "store:$out/train" --include "$held" --out "$out/val" --no-progress
contextlab data pack "$out/train" --method ep --context 512 --val-fraction 0 --out "$out/ep" --no-progress
contextlab data pack "$out/train" --method splice --retriever dense --context 512 --val-fraction 0 --out "$out/splice" --no-progress
contextlab data pack-stats "$out/splice" --no-progress --no-plot
for m in ep splice; do
  contextlab train --set data.packed="$out/$m" --set data.val_store="$out/val" --set train.context=512 \
    --set model.size=tiny-2x128 --set train.max_tokens=3000000 --set train.progress=false \
    --set train.out_dir="$out/runs/$m" | grep -v '^step '
done
contextlab profile --model "$out/runs/ep" --compare "$out/runs/splice" --split run --out "$out/profile" --no-progress
contextlab report "$out/runs"
