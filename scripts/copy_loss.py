"""Loss on copied spans vs first-seen text: does a model copy from its context?

Reads held-out documents written by ``scripts/positive_control_corpus.py`` (each with the character
offsets of its repeats), scores the first ``--context`` + 1 bytes of each with a byte-level model
(``token_logprobs``) and averages the loss (nats per byte) over: copies of random-word blocks and
their first occurrences, copies of text spans and their first occurrences, and all other text. A
model that copies has a far lower loss on the copies than on the first occurrences (random words
cannot be predicted without the context). The first ``--skip`` bytes of each copy are left out:
they are where the model finds out which span repeats. Last line: one JSON object.

    python scripts/copy_loss.py --model RUN --heldout DIR/heldout.jsonl [--docs 200]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from contextlab.eval import load_model

KINDS = ("random_copy", "random_first", "text_copy", "text_first", "other")


def categories(text: str, repeats: list, n: int, skip: int) -> np.ndarray:
    """(n,) the kind index of each byte position (as a target) of the first n bytes of ``text``."""
    offset = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])  # char -> byte offset
    kind = np.full(n, KINDS.index("other"))
    for first, copy, length, rnd in repeats:
        base = "random" if rnd else "text"
        for start, what, lead in ((first, "first", 0), (copy, "copy", skip)):
            a, b = int(offset[start]) + lead, int(offset[min(start + length, len(text))])
            kind[max(a, 0) : max(min(b, n), 0)] = KINDS.index(f"{base}_{what}")
    return kind


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a byte-level run or checkpoint")
    ap.add_argument("--heldout", required=True, help="heldout.jsonl of positive_control_corpus.py")
    ap.add_argument("--docs", type=int, default=200, help="documents scored")
    ap.add_argument("--context", type=int, default=512, help="bytes the model sees per document")
    ap.add_argument("--skip", type=int, default=2, help="leading bytes of each copy not counted")
    args = ap.parse_args()
    adapter = load_model(args.model, batch_size=8)
    sums, counts = np.zeros(len(KINDS)), np.zeros(len(KINDS))
    rows = [json.loads(line) for line in open(args.heldout, encoding="utf-8")][: args.docs]
    for i in range(0, len(rows), 8):
        batch = rows[i : i + 8]
        ids = np.array([list(r["text"].encode("utf-8")[: args.context + 1]) for r in batch])
        loss = -adapter.token_logprobs(ids).double().numpy()  # (b, context): target t + 1
        for r, row_loss in zip(batch, loss):
            kind = categories(r["text"], r["repeats"], args.context + 1, args.skip)[1:]
            np.add.at(sums, kind, row_loss)
            np.add.at(counts, kind, 1)
    means = {k: (sums[j] / counts[j] if counts[j] else None) for j, k in enumerate(KINDS)}
    for j, k in enumerate(KINDS):
        shown = "n/a" if means[k] is None else f"{means[k]:.3f}"
        print(f"{k:<13} {shown} nats/byte over {int(counts[j]):,} bytes")
    print(json.dumps({"model": args.model, "docs": len(rows), **{k: means[k] for k in KINDS}}))


if __name__ == "__main__":
    main()
