#!/usr/bin/env bash
# The essays study of scripts/splice_vs_ep_essays.sh as a user runs it without preparing a validation
# store: all 49 essays in one token store, packed with EP and with SPLICE (dense), each pack holding
# out the same 8 essays (`--val-fraction 0.16`, drawn once from the store, packed by neither). The two
# runs (a 2x128 GPT, 3M tokens each, the same seed) validate on the same rows, `profile --compare
# --split run` pairs them on those 8 essays, and `report` draws their validation curves together;
# `data export` of the SPLICE pack writes those same rows as its validation split.
#   bash scripts/splice_vs_ep_essays_packed_holdout.sh [OUT]   (OUT default: /tmp/essays_holdout)
set -euo pipefail
out=${1:-/tmp/essays_holdout}
essays=${ESSAYS:-../shared/data/paul_graham_essays}
mkdir -p "$out"
contextlab data ingest "$essays" --tokenizer bpe:4096 --exclude "SOURCE.*" --out "$out/store" --no-progress
contextlab data pack "$out/store" --method ep --context 512 --val-fraction 0.16 --out "$out/ep" --no-progress
contextlab data pack "$out/store" --method splice --retriever dense --context 512 --val-fraction 0.16 \
  --out "$out/splice" --no-progress
for m in ep splice; do
  contextlab train --set data.packed="$out/$m" --set train.context=512 \
    --set model.size=tiny-2x128 --set train.max_tokens=3000000 --set train.progress=false \
    --set train.out_dir="$out/runs/$m" | grep -v '^step '
done
python - "$out" <<'PY'
import json, sys
from pathlib import Path
runs = Path(sys.argv[1]) / "runs"
for m in ("ep", "splice"):
    state = sorted((runs / m / "checkpoints").glob("step_*"))[-1] / "state.json"
    print(m, "validation rows", json.loads(state.read_text())["data"]["validation_rows"][:16])
PY
contextlab profile --model "$out/runs/ep" --compare "$out/runs/splice" --split run --out "$out/profile" --no-progress
contextlab report "$out/runs"
# the SPLICE pack exported for another trainer: its validation split is the runs' validation rows
contextlab data export "$out/splice" --out "$out/export" --overwrite --no-progress
python - "$out" <<'PY'
import json, sys
from pathlib import Path
import datasets, numpy as np
from contextlab.data.training import rows_hash
out = Path(sys.argv[1])
val = datasets.load_dataset("parquet", data_dir=str(out / "export"), cache_dir=str(out / "hf_cache"))["validation"]
state = sorted((out / "runs/splice/checkpoints").glob("step_*"))[-1] / "state.json"
same = rows_hash(np.array(val["input_ids"], dtype=np.int64)) == json.loads(state.read_text())["data"]["validation_rows"]
print(f"export validation split: {len(val)} rows; the runs' validation rows: {'the same' if same else 'DIFFERENT'}")
PY
