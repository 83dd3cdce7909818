#!/usr/bin/env bash
# Makes the two ignored folders every GPU command carries (scripts/gpu/README.md), on the CPU machine, from
# ../shared/data, a Debian mirror and the package index; run once per checkout (about 2 minutes):
#
#   bash scripts/gpu/prepare.sh          # then: bash scripts/gpu/rehearse.sh
#
# .gpu/books.tar.xz      the 127 Gutenberg books (texts/) and their manifest.jsonl
# .gpu/gpt2/             GPT-2's BPE files (encoder.json, vocab.bpe)
# .gpu/kv-retrieval-75_keys.jsonl.gz   the lost-in-the-middle key-value file
# .gpu/debian.tar.xz     scripts/gpu/prepare_debian.sh (kept when present: it takes a minute)
# .whl/                  pure-Python wheels for the GPU image's Python 3.12 that it lacks: contextlab's
#                        dependencies not in its package list (bm25s, tomli-w, powerlaw); one version each
# Files already in place are made again (but debian.tar.xz), so a rerun mends a partial folder.
set -euo pipefail
data=${DATA:-../shared/data}
for d in gutenberg_books gpt2_tokenizer lost_in_the_middle; do
  [ -d "$data/$d" ] || { echo "error: $data/$d is missing; set DATA to the folder holding the shared data" >&2; exit 1; }
done
mkdir -p .gpu/gpt2 .gpu/state .whl
tar --sort=name --owner=0 --group=0 --mtime=2026-01-01 -cJf .gpu/books.tar.xz.partial \
  -C "$data/gutenberg_books" texts manifest.jsonl
mv .gpu/books.tar.xz.partial .gpu/books.tar.xz
cp "$data/gpt2_tokenizer/encoder.json" "$data/gpt2_tokenizer/vocab.bpe" .gpu/gpt2/
cp "$data/lost_in_the_middle/kv-retrieval-75_keys.jsonl.gz" .gpu/
[ -f .gpu/debian.tar.xz ] || bash scripts/gpu/prepare_debian.sh .gpu/debian.tar.xz
rm -f .whl/*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .whl \
  bm25s tomli-w powerlaw 2>/dev/null \
  || { echo "error: pip download failed (no package index reachable)" >&2; exit 1; }
du -sh .gpu .whl
ls .whl
