#!/usr/bin/env bash
# Issue 22 part 3 on a CUDA machine: the positive control (scripts/positive_control.sh) with a batch of 8 rows
# and 40,000 steps (164M tokens; induction heads are expected near 32M tokens at this batch), on the GPU.
# Copies the copy-loss table, the evaluations and the training metrics to OUT_DIR. Run from the repository
# root with .whl/ and .gpu/ carried (.gpu/ also holds the key-value file: cp
# ../shared/data/lost_in_the_middle/kv-retrieval-75_keys.jsonl.gz .gpu/):
#   bash scripts/gpu/positive_control.sh OUT_DIR
set -u
out=${1:?usage: positive_control.sh OUT_DIR}
mkdir -p "$out"
source scripts/gpu/setup.sh
export CONTEXTLAB="python3 -m contextlab" KV_DATA=.gpu/kv-retrieval-75_keys.jsonl.gz
bash scripts/positive_control.sh /tmp/pc /tmp/books --set train.device=cuda --set model.n_embd=256 \
  --set train.tokens_per_step=4096 --set train.max_steps=40000 --set train.ckpt_every=5000 \
  2>&1 | grep -v -i warn | tail -60
cp -r /tmp/pc/copy_loss.txt /tmp/pc/eval "$out/" 2>/dev/null
cp /tmp/pc/run/metrics.jsonl "$out/" 2>/dev/null
