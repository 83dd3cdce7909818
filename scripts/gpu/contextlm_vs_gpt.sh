#!/usr/bin/env bash
# Issue 20 (b) on a CUDA machine: recipes/contextlm_vs_gpt_gpu.toml for one seed (GPT 12 blocks, GPT 14 blocks,
# ContextLM 12 + 2, side by side on the one GPU, then contextwise on the held-out documents), then the paired
# ContextLM - GPT comparison. Restores the runs of earlier commands (.gpu/state/contextlm_vs_gpt_gpu.tar.gz),
# stops at LIMIT_S seconds (default 540), and writes to OUT_DIR the state for the next command (the runs
# without checkpoints: metrics, configs, evaluations), results.csv and the comparisons.
# FLOPS, when set, replaces the recipe's training FLOPs per run (4e15): give both seeds the same.
# COMPILE=false trains eagerly (scripts/gpu/learning_check.sh sets it when only eager training learns).
# Run from the repository root with .whl/ and .gpu/ carried:
#   bash scripts/gpu/contextlm_vs_gpt.sh OUT_DIR SEED
set -u
out=${1:?usage: contextlm_vs_gpt.sh OUT_DIR SEED}
seed=${2:?usage: contextlm_vs_gpt.sh OUT_DIR SEED}
mkdir -p "$out"
source scripts/gpu/setup.sh
source scripts/gpu/lm_corpus.sh
echo "setup and corpus: ${SECONDS} s"
recipe=${RECIPE:-recipes/contextlm_vs_gpt_gpu.toml}  # RECIPE: a small copy, for a rehearsal on a CPU
layers=${LAYERS:-4}  # the recipe's decoder depth (the parameter-matched GPT has two blocks more)
only="^name-(clm__n_layer-($layers|$((layers + 2)))|contextlm__n_layer-$layers)__seed-$seed\$"
LIMIT_S=${LIMIT_S:-540} sweep_slice contextlm_vs_gpt_gpu "$recipe" "$out" --only "$only" --no-analysis \
  ${FLOPS:+--set base.train.max_flops=$FLOPS} ${COMPILE:+--set base.train.compile=$COMPILE}
runs=sweeps/contextlm_vs_gpt_gpu/runs
for base in "clm__n_layer-$layers" "clm__n_layer-$((layers + 2))"; do
  a=$runs/name-contextlm__n_layer-${layers}__seed-$seed b=$runs/name-${base}__seed-$seed
  [ -f "$a/eval/contextwise.json" ] && [ -f "$b/eval/contextwise.json" ] \
    && python3 -m contextlab compare "$a" "$b" --out "$out/compare_seed${seed}_contextlm_vs_$base" 2>&1 | grep -v -i warn
done
echo "contextlm_vs_gpt.sh seed $seed: ${SECONDS} s in all"
