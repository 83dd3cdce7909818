#!/usr/bin/env bash
# Issue 20, part 2 on a CUDA machine: benchmarks/attention_cost.py at contexts 1K .. 32K (one attention layer
# of the GPT-2-small shape, 32K tokens per step), then whole GPT-2-small training steps, document-masked vs
# causal. FlexAttention compiles once per shape (~20-40 s each): allow about 5 + 4 minutes.
# Run from the repository root with .whl/ and .gpu/ carried:  bash scripts/gpu/attention.sh OUT_DIR
set -u
out=${1:?usage: attention.sh OUT_DIR}
mkdir -p "$out"
source scripts/gpu/setup.sh
timeout 330 python3 benchmarks/attention_cost.py --device cuda --reps 8 --warmup 2 > "$out/attention_cost_gpu.txt" 2>&1
grep -v -i warn "$out/attention_cost_gpu.txt" | tail -9
timeout 240 python3 benchmarks/attention_cost.py --device cuda --no-cells --model gpt2-small \
  --model-contexts 1024 4096 16384 32768 --reps 5 --warmup 2 > "$out/attention_model.txt" 2>&1
grep "step T=" "$out/attention_model.txt"
