# Sourced by the part-3 GPU scripts after setup.sh: the studies' shared corpus of long documents, built on the
# GPU machine's cores in about a minute. /tmp/books (unpacked by setup.sh) holds the 127 Gutenberg books
# (texts/) and the Debian trees (debian/: glibc and xorg-server sources, the Python documentation;
# scripts/gpu/prepare_debian.sh makes .gpu/debian.tar.xz on a machine with a Debian mirror). One BPE of 8192
# is trained on the training part:
#   stores/lm_train    everything except the held-out part: 18,617 documents, 56.5M tokens
#   stores/lm_heldout  two whole books (pg976, pg983) and the Python library reference (317 files):
#                      319 documents, 2.0M tokens; 246 are >= 1,024 tokens, 127 are >= 4,096
# (counts from the CPU machine with the same archives). The other pg9* books are in neither store.
need_debian
heldout='texts/pg9??.txt,debian/docs/python/library/*'
[ -d stores/lm_train ] || python3 -m contextlab data ingest /tmp/books --tokenizer bpe:8192 --no-progress \
  --exclude "texts/pg9*.txt,debian/docs/python/library/*,manifest.jsonl,debian/SOURCE.txt" --out stores/lm_train
[ -d stores/lm_heldout ] || python3 -m contextlab data ingest /tmp/books --tokenizer store:stores/lm_train \
  --no-progress --include "$heldout" --out stores/lm_heldout
