"""Rows of random frequent words in which spans recur: the induction probe's data as text, for the trainer.

Takes the ``--pool`` most frequent whole words of a store that its BPE writes as one token (" the",
" and", ...), and writes ``--docs`` documents of ``--words`` words drawn uniformly from them, in each
of which ``--spans`` spans of ``--span`` words are copied to random later positions
(``scripts/induction_probe.py``'s random layout, in the store's own tokens). ``--mix JSONL`` shuffles
the first ``--mix-docs`` lines of another corpus in. Ingest the result with ``--tokenizer store:STORE``
so the ids are the store's. Last line: one JSON object with counts.

    python scripts/synthetic_copy_corpus.py --store STORE --out DIR/train.jsonl --words 32 --spans 2
"""

from __future__ import annotations

import argparse
import json
import random

import numpy as np

from contextlab.data.store import TokenStore


def single_token_words(store: TokenStore, n: int, sample_docs: int = 3000) -> list[str]:
    """The n most frequent tokens of the store's first documents that are a space and a word of 2+
    letters, and that the tokenizer writes back as the same single token."""
    tok = store.tokenizer()
    ids = np.concatenate([store.doc(i) for i in range(min(sample_docs, store.n_docs))]).astype(np.int64)
    pool = []
    for t in np.argsort(-np.bincount(ids)):
        w = tok.decode([int(t)])
        if len(w) > 2 and w[0] == " " and w[1:].isalpha() and tok.encode(w) == [int(t)]:
            pool.append(w)
            if len(pool) == n:
                break
    return pool


def document(rng: random.Random, pool: list[str], words: int, spans: int, span: int) -> str:
    x = [rng.choice(pool) for _ in range(words)]
    for _ in range(spans):
        a = rng.randrange(0, words - 2 * span)
        d = rng.randrange(a + span, words - span + 1)
        x[d : d + span] = x[a : a + span]
    return "".join(x).lstrip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--store", required=True, help="a token store with a BPE tokenizer (its words make the pool)"
    )
    ap.add_argument("--out", required=True, help="JSONL file to write")
    ap.add_argument("--pool", type=int, default=256, help="frequent single-token words drawn from")
    ap.add_argument("--docs", type=int, default=200_000, help="documents written")
    ap.add_argument("--words", type=int, default=32, help="words per document")
    ap.add_argument("--spans", type=int, default=2, help="copied spans per document")
    ap.add_argument("--span", type=int, default=6, help="words per copied span")
    ap.add_argument("--mix", help="a JSONL corpus whose first --mix-docs lines are shuffled in")
    ap.add_argument("--mix-docs", type=int, default=0, help="lines of --mix taken")
    ap.add_argument("--seed", type=int, default=0, help="seed of the words, spans and order")
    a = ap.parse_args()
    if a.words < 2 * a.span + 1:
        ap.error("--words must exceed twice --span")
    pool = single_token_words(TokenStore(a.store), a.pool)
    rng = random.Random(a.seed)
    lines = [json.dumps({"text": document(rng, pool, a.words, a.spans, a.span)}) for _ in range(a.docs)]
    if a.mix:
        with open(a.mix, encoding="utf-8") as f:
            lines += [line.rstrip("\n") for _, line in zip(range(a.mix_docs), f)]
        rng.shuffle(lines)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(json.dumps({"pool": len(pool), "docs": len(lines), "first_words": pool[:8]}))


if __name__ == "__main__":
    main()
