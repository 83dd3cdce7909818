#!/usr/bin/env bash
# Recipes (a) and (b) of issue 7, end to end (see docs/entropy.md):
#   (a) the seed's 3x208 RoPE transformer on 60-bit / 100-task sparse parity, then its answer
#       cross-entropy vs the exact Bayes risk at each visible context;
#   (b) intrinsic entropy / dimension of its last-token hidden states vs that cross-entropy.
# Usage: bash scripts/parity_entropy.sh   (from the repository root; re-running resumes/skips)
set -euo pipefail
CL=${CONTEXTLAB:-.venv/bin/contextlab}
DATA=runs/data/parity
[ -d $DATA/train ] || $CL data synthetic parity --out $DATA/train --n-samples 500000 --mask-fraction 0.5 --seed 0
[ -d $DATA/val ] || $CL data synthetic parity --out $DATA/val --n-samples 20000 --seed 1
$CL train recipes/parity_transformer.toml
$CL analyze entropy --model runs/parity_transformer --data $DATA/val --threads 1 --samples 2000 \
    --contexts 11,13,15,17,20,23,25,28,30,35,40,45,50,55,60 --out runs/parity_transformer/eval
