#!/usr/bin/env bash
# SPLICE vs EP on Paul Graham's essays over three draws of the held-out essays: the study of
# scripts/splice_vs_ep_essays_packed_holdout.sh (split seed 0 is that study, run for run) repeated with
# the packs' --split-seed 1 and 2, each split's EP and SPLICE runs read on their own 8 held-out essays by
# `profile --compare`, then `contextlab compare ... --and ...` pools each headline difference over the
# three pairs (a t interval over pairs, which holds what another draw of the essays moves).
#   bash scripts/splice_vs_ep_essays_splits.sh [OUT]   (OUT default: /tmp/essays_splits)
set -euo pipefail
out=${1:-/tmp/essays_splits}
essays=${ESSAYS:-../shared/data/paul_graham_essays}
mkdir -p "$out"
contextlab data ingest "$essays" --tokenizer bpe:4096 --exclude "SOURCE.*" --out "$out/store" --no-progress
pairs=()
for s in 0 1 2; do
  for m in ep splice; do
    extra=(); [ "$m" = splice ] && extra=(--retriever dense)
    contextlab data pack "$out/store" --method "$m" "${extra[@]}" --context 512 --val-fraction 0.16 \
      --split-seed "$s" --out "$out/s$s/$m" --no-progress | grep -v '^note: '
    contextlab train --set data.packed="$out/s$s/$m" --set train.context=512 \
      --set model.size=tiny-2x128 --set train.max_tokens=3000000 --set train.progress=false \
      --set train.out_dir="$out/s$s/runs/$m" | grep '^done: '
  done
  contextlab profile --model "$out/s$s/runs/ep" --compare "$out/s$s/runs/splice" --split run \
    --out "$out/s$s/profile" --no-progress | grep -A20 '^  pairing'
  if [ "$s" = 0 ]; then pairs+=("$out/s$s/profile/models/splice" "$out/s$s/profile/models/ep")
  else pairs+=(--and "$out/s$s/profile/models/splice" "$out/s$s/profile/models/ep"); fi
done
contextlab compare "${pairs[@]}" --out "$out/pooled"
