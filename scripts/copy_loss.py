"""Loss on copied spans vs first-seen text: does a model copy from its context?

Reads held-out documents written by ``scripts/positive_control_corpus.py`` (each with the character
offsets of its repeats), tokenizes each with the model's own tokenizer, scores its first
``--context`` + 1 tokens (``token_logprobs``) and averages the loss (nats per token) over: copies of
random-word blocks and their first occurrences, copies of text spans and their first occurrences,
and all other text. A model that copies has a far lower loss on the copies than on the first
occurrences (random words cannot be predicted without the context). The first ``--skip`` tokens of
each copy are left out: they are where the model finds out which span repeats.

A document is encoded piece by piece, cut at the space before every span and at every span's end,
so each token belongs to one kind; the cuts fall where a byte-level or GPT-2-style BPE splits
anyway, so the ids are those of the whole text. Also the classic induction test: ``--repeat-rows`` rows
of ``--repeat-len`` uniformly random token ids written twice; a model with induction heads has a far
lower loss on the second half than on the first (``repeat_second`` vs ``repeat_first``). Last line:
one JSON object.

    python scripts/copy_loss.py --model RUN --heldout DIR/heldout.jsonl [--docs 200]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from contextlab.data.store import TokenStore
from contextlab.eval import load_model

KINDS = ("random_copy", "random_first", "text_copy", "text_first", "other")


def pieces(text: str, repeats: list) -> list[tuple[int, int, str]]:
    """(start, end, kind) character ranges covering ``text``: each span (with the space before it)
    and the text between spans."""
    marks = []
    for first, copy, length, rnd in repeats:
        base = "random" if rnd else "text"
        for start, what in ((first, "first"), (copy, "copy")):
            a = start - 1 if start > 0 and text[start - 1] == " " else start
            marks.append((a, min(start + length, len(text)), f"{base}_{what}"))
    out, at = [], 0
    for a, b, kind in sorted(marks):
        if a > at:
            out.append((at, a, "other"))
        out.append((max(a, at), b, kind))
        at = max(at, b)
    if at < len(text):
        out.append((at, len(text), "other"))
    return out


def labelled_ids(adapter, text: str, repeats: list, n: int, skip: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` token ids of ``text`` and the kind index of each."""
    ids: list[int] = []
    kinds: list[int] = []
    for a, b, kind in pieces(text, repeats):
        piece = adapter.encode(text[a:b])
        k = KINDS.index(kind)
        lead = skip if kind.endswith("copy") else 0
        ids += piece
        kinds += [KINDS.index("other")] * min(lead, len(piece)) + [k] * max(len(piece) - lead, 0)
        if len(ids) >= n:
            break
    return np.array(ids[:n]), np.array(kinds[:n])


def repeated_random(
    adapter, rows: int, n: int, vocab: int, pool: np.ndarray | None = None, seed: int = 0
) -> tuple[float, float]:
    """Mean loss (nats/token) on the first and second half of ``rows`` rows of n random ids (from 1 to
    vocab - 1, or drawn from ``pool``) written twice."""
    rng = np.random.default_rng(seed)
    x = rng.integers(1, vocab, size=(rows, n)) if pool is None else rng.choice(pool, size=(rows, n))
    loss = -adapter.token_logprobs(np.concatenate([x, x], axis=1)).double().numpy()  # target t + 1
    return float(loss[:, : n - 1].mean()), float(loss[:, n:].mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a run or checkpoint (any tokenizer)")
    ap.add_argument("--heldout", required=True, help="heldout.jsonl of positive_control_corpus.py")
    ap.add_argument("--docs", type=int, default=200, help="documents scored")
    ap.add_argument("--context", type=int, default=512, help="tokens the model sees per document")
    ap.add_argument("--skip", type=int, default=1, help="leading tokens of each copy not counted")
    ap.add_argument("--repeat-rows", type=int, default=16, help="rows of the repeated-random-tokens test")
    ap.add_argument("--repeat-len", type=int, default=200, help="random tokens per half of those rows")
    ap.add_argument(
        "--repeat-store",
        help="draw that test's ids from the ids a token store uses (20+ times in its first 2,000 documents), "
        "not from the whole vocabulary: for a model trained on a few token kinds only",
    )
    args = ap.parse_args()
    adapter = load_model(args.model, batch_size=8)
    sums, counts = np.zeros(len(KINDS)), np.zeros(len(KINDS))
    rows = [json.loads(line) for line in open(args.heldout, encoding="utf-8")][: args.docs]
    labelled = [labelled_ids(adapter, r["text"], r["repeats"], args.context + 1, args.skip) for r in rows]
    labelled = [x for x in labelled if len(x[0]) == args.context + 1]
    for i in range(0, len(labelled), 8):
        batch = labelled[i : i + 8]
        ids = np.stack([b[0] for b in batch])
        loss = -adapter.token_logprobs(ids).double().numpy()  # (b, context): target t + 1
        for (_, kind), row_loss in zip(batch, loss):
            np.add.at(sums, kind[1:], row_loss)
            np.add.at(counts, kind[1:], 1)
    means = {k: (sums[j] / counts[j] if counts[j] else None) for j, k in enumerate(KINDS)}
    for j, k in enumerate(KINDS):
        shown = "n/a" if means[k] is None else f"{means[k]:.3f}"
        print(f"{k:<13} {shown} nats/token over {int(counts[j]):,} tokens")
    pool = None
    if args.repeat_store:
        store = TokenStore(args.repeat_store)
        ids = np.concatenate([store.doc(i) for i in range(min(2000, store.n_docs))]).astype(np.int64)
        pool = np.flatnonzero(np.bincount(ids) >= 20)
    means["repeat_first"], means["repeat_second"] = repeated_random(
        adapter, args.repeat_rows, args.repeat_len, adapter.model.config.vocab_size, pool
    )
    print(
        f"random ids written twice ({args.repeat_rows} x {args.repeat_len}): first half "
        f"{means['repeat_first']:.3f}, second half {means['repeat_second']:.3f} nats/token"
    )
    print(json.dumps({"model": args.model, "docs": len(labelled), **means}))


if __name__ == "__main__":
    main()
