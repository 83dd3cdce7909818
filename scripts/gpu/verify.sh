#!/usr/bin/env bash
# Issue 20, parts 1 and 2 on a CUDA machine (about 10 minutes on one H100; the device caps a command
# at 10, so give it 600 s or run the steps as separate commands):
#   the CUDA half of the device tests (tests/train/test_devices.py and tests/models/test_attention_masks.py run every
#   test on the CPU and again on CUDA; CI runs the CPU half), benchmarks/gpu_train.py (GPT-2 small, context 1024, bf16, compiled:
#   contextlab vs a nanoGPT-style loop vs HF GPT2LMHeadModel) and benchmarks/objective_overhead.py
#   (ContextLM and MTP against the GPT at the GPT-2-small shape); benchmarks/attention_cost.py is
#   scripts/gpu/attention.sh.
# Run from the repository root with .whl/ and .gpu/ carried:  bash scripts/gpu/verify.sh OUT_DIR
set -u
out=${1:?usage: verify.sh OUT_DIR}
mkdir -p "$out"
source scripts/gpu/setup.sh
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" | tee "$out/env.txt"
timeout 200 python3 -m pytest -p no:cacheprovider -rA -k cuda tests/train/test_devices.py tests/models/test_attention_masks.py \
  > "$out/gpu_tests.txt" 2>&1
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$out/gpu_tests.txt"
timeout 280 python3 benchmarks/gpu_train.py --corpus /tmp/books/texts --tokenizer gpt2:.gpu/gpt2 \
  --rounds 5 --steps 10 --out "$out/gpu_train.json" 2>&1 | grep -v Warning | tee "$out/gpu_train.txt"
timeout 140 python3 benchmarks/objective_overhead.py --device cuda --size gpt2-small --vocab 50257 \
  --context 1024 --rows 16 --rounds 2 --steps 6 --warmup 2 2>&1 | tee "$out/objective_overhead.txt"
