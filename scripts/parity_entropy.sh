#!/usr/bin/env bash
# Recipes (a) and (b) of issue 7, end to end (see docs/entropy.md):
#   (a) the seed's 3x208 RoPE transformer on 60-bit / 100-task sparse parity (21 minutes with 64 tasks
#       per bit string drawn uniformly and half the bit strings biased, then 6 minutes on unbiased bits),
#       then its answer cross-entropy vs the exact Bayes risk at each visible context, on ordinary
#       single-task rows of unbiased bits;
#   (b) intrinsic entropy / dimension of its hidden states vs that cross-entropy: at the task token
#       (position -1) and at the nearest bit (position -2, a feature that has not seen the task; scored
#       for l <= 55 because at l = 60 that position holds bit 60 itself instead of a masked `?`).
# Then the per-task breakdown with the task-weighted loss on 20,000 rows, and the figures of
# docs/results.md copied to docs/figures/issue7/.
# Usage: bash scripts/parity_entropy.sh   (from the repository root; re-running resumes/skips)
set -euo pipefail
CL=${CONTEXTLAB:-.venv/bin/contextlab}
DATA=runs/data/parity
[ -d $DATA/train_q64_uniform ] || $CL data synthetic parity --out $DATA/train_q64_uniform --n-samples 200000 \
    --queries 64 --query-tasks uniform --mask-fraction 0.5 --bias-fraction 0.5 --seed 0
[ -d $DATA/train_q64_uniform_unbiased ] || $CL data synthetic parity --out $DATA/train_q64_uniform_unbiased \
    --n-samples 200000 --queries 64 --query-tasks uniform --mask-fraction 0.5 --seed 3
[ -d $DATA/val_q64 ] || $CL data synthetic parity --out $DATA/val_q64 --n-samples 2000 --queries 64 --seed 1
[ -d $DATA/val ] || $CL data synthetic parity --out $DATA/val --n-samples 20000 --seed 2
$CL train recipes/parity_transformer.toml           # stage 1: biased bits, 21 min
$CL train recipes/parity_transformer_anneal.toml    # stage 2: unbiased bits, 6 min
CTX=11,13,15,17,20,23,25,28,30,35,40,45,50,55,60
$CL analyze entropy --model runs/parity_transformer --data $DATA/val --samples 2000 --contexts $CTX \
    --out runs/parity_transformer/eval
$CL analyze entropy --model runs/parity_transformer --data $DATA/val --samples 2000 --contexts ${CTX%,60} \
    --position -2 --out runs/parity_transformer/eval_nearest_bit
${PYTHON:-.venv/bin/python} scripts/parity_tasks.py runs/parity_transformer $DATA/val --samples 20000 \
    --contexts 17,20,23,25,28,30,35,40,50,60
cp runs/parity_transformer/eval/entropy.png docs/figures/issue7/parity_transformer_entropy.png
cp runs/parity_transformer/eval_nearest_bit/entropy.png docs/figures/issue7/parity_transformer_entropy_nearest_bit.png
