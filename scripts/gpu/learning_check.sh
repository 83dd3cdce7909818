#!/usr/bin/env bash
# Does training on this GPU learn? benchmarks/gpu_learning.py on the studies' corpus: the ContextLM study's
# 4 x 256 model for 200 steps of 65,536 tokens in six variants (compiled as the studies ran, eager, and
# compiled with one suspect changed each: contiguous q/k/v, PyTorch's RMSNorm, math SDPA; eager without the
# fused AdamW), three at a time; writes OUT/learning.json (per variant: loss over the last quarter, held-out
# loss, tokens/s, learns or not; the setting the studies should use). On 2026-11-26 every GPU-trained model
# stalled near a bigram's loss while the CPU trained the same model well (docs/results.md).
# THEN=1 goes on, in the same command, to the ContextLM study (seed 0) with the setting that learns
# (COMPILE=false when only eager training does), and skips it when no variant learns.
#   DEADLINE=$(( $(date +%s) + 470 )) THEN=1 bash scripts/gpu/learning_check.sh OUT
# LEARNING_ARGS: extra benchmark options (the CPU rehearsal passes a tiny model and --device cpu).
set -u
out=${1:?usage: learning_check.sh OUT_DIR}
mkdir -p "$out"
source scripts/gpu/setup.sh
source scripts/gpu/lm_corpus.sh
# shellcheck disable=SC2086  # LEARNING_ARGS is a list of options
python3 benchmarks/gpu_learning.py --store stores/lm_train --val-store stores/lm_heldout --out /tmp/learning \
  ${LEARNING_ARGS:-}
cp /tmp/learning/learning.json "$out/" || { echo "error: the learning check wrote no learning.json"; exit 1; }
with=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['train_with'])" "$out/learning.json")
echo "learning check: ${SECONDS} s; train with: $with"
[ -n "${THEN:-}" ] || exit 0
case $with in
  compiled) compile=true ;;
  eager) compile=false ;;
  *) echo "no variant learns: the ContextLM study is not run"; exit 0 ;;
esac
COMPILE=$compile bash scripts/gpu/contextlm_vs_gpt.sh "$out" 0
