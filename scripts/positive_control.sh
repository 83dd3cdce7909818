#!/usr/bin/env bash
# The positive control of the retrieval evaluations (issue 22, part 3): build the repeated-span corpus,
# train recipes/positive_control.toml, then measure copying (scripts/copy_loss.py: copied spans against
# first-seen ones, and random ids written twice) and needle, passkey and key-value retrieval at 480
# tokens (prompt and answer inside the 512-token training context), and the contextwise curve.
#   bash scripts/positive_control.sh OUT [BOOKS] [extra contextlab train arguments, e.g. --set train.device=cuda]
# BOOKS: a Gutenberg folder with manifest.jsonl (default ../shared/data/gutenberg_books).
set -euo pipefail
out=${1:?usage: positive_control.sh OUT [BOOKS] [train arguments]}
books=${2:-../shared/data/gutenberg_books}
shift $(( $# >= 2 ? 2 : 1 ))
kv=${KV_DATA:-../shared/data/lost_in_the_middle/kv-retrieval-75_keys.jsonl.gz}
cl=${CONTEXTLAB:-contextlab}
mkdir -p "$out"
python scripts/positive_control_corpus.py --books "$books" --out "$out/corpus" --doc-chars 2000 \
  --min-repeats 12 --max-repeats 20 --random-fraction 0.8 --min-span 40 --max-span 200 \
  --max-distance 1800 --word-pool 400 --log-distance
[ -d "$out/store" ] || $cl data ingest "$out/corpus/train.jsonl" --tokenizer bpe:4096 --out "$out/store" --no-progress
[ -d "$out/heldout" ] || $cl data ingest "$out/corpus/heldout.jsonl" --tokenizer "store:$out/store" \
  --out "$out/heldout" --no-progress
$cl train recipes/positive_control.toml --set data.store="$out/store" --set train.out_dir="$out/run" "$@"
python scripts/copy_loss.py --model "$out/run" --heldout "$out/corpus/heldout.jsonl" | tee "$out/copy_loss.txt"
$cl eval niah --model "$out/run" --out "$out/eval" --lengths 480 --samples 6 --scoring likelihood
$cl eval passkey --model "$out/run" --out "$out/eval" --lengths 480 --samples 30 --scoring likelihood
$cl eval kv --model "$out/run" --data "$kv" --out "$out/eval" --n-pairs 6 --n-examples 30 --scoring likelihood
$cl eval contextwise --model "$out/run" --data "$out/heldout" --out "$out/eval" --length 512 --max-docs 200
