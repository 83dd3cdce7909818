#!/usr/bin/env bash
# The positive control of the retrieval evaluations (issue 22, part 3): build the repeated-span corpus,
# train recipes/positive_control.toml, then measure copying (scripts/copy_loss.py) and needle, key-value
# and passkey retrieval at 512 tokens, inside the training context.
#   bash scripts/positive_control.sh OUT [BOOKS]     (BOOKS default: ../shared/data/gutenberg_books)
set -euo pipefail
out=${1:?usage: positive_control.sh OUT [BOOKS]}
books=${2:-../shared/data/gutenberg_books}
kv=${KV_DATA:-../shared/data/lost_in_the_middle/kv-retrieval-75_keys.jsonl.gz}
mkdir -p "$out"
python scripts/positive_control_corpus.py --books "$books" --out "$out/corpus" \
  --doc-chars 1500 --min-repeats 8 --max-repeats 14 --random-fraction 0.8
contextlab data ingest "$out/corpus/train.jsonl" --tokenizer byte --out "$out/store" --no-progress
contextlab data ingest "$out/corpus/heldout.jsonl" --tokenizer byte --out "$out/heldout" --no-progress
contextlab train recipes/positive_control.toml --set data.store="$out/store" --set train.out_dir="$out/run"
python scripts/copy_loss.py --model "$out/run" --heldout "$out/corpus/heldout.jsonl" | tee "$out/copy_loss.txt"
contextlab eval niah --model "$out/run" --out "$out/eval" --lengths 512 --samples 4 --scoring likelihood
contextlab eval passkey --model "$out/run" --out "$out/eval" --lengths 512 --samples 20 --scoring likelihood
contextlab eval kv --model "$out/run" --data "$kv" --out "$out/eval" --n-pairs 5 --n-examples 20 --scoring likelihood
contextlab eval contextwise --model "$out/run" --data "$out/heldout" --out "$out/eval" --length 1024 --max-docs 128
