"""Which L-token pieces of a token store an evaluation reads, and what share of its text they are.

``sequences`` picks the (document, start) of consecutive L-token pieces round-robin over the
documents (every document's first piece, then second pieces, ...), so a few pieces come from as
many documents as possible and many come from a few long documents; ``cut_pieces`` adds the
default of the contextwise loss (fill ``max_docs`` from few documents; with ``max_docs`` 0, one
piece per document) and their tokens. The contextwise loss and the attention analysis read the
same pieces, so the two measure the same text. Trade-off: a piece starts at a multiple of L in its
document, never at a sentence, so pieces are cheap to name and reproduce, not aligned to the text.
"""

from __future__ import annotations

import numpy as np

from contextlab.errors import UserError


def sequences(store, length: int, max_docs: int, pieces_per_doc: int) -> list[tuple[int, int]]:
    """(document, start) of the L-token pieces to score: first pieces of every document, then second pieces...

    Round-robin over documents, so that ``max_docs`` pieces come from as many documents as possible.
    """
    lengths = store.lengths()
    docs = np.flatnonzero(lengths >= length)
    n_pieces = {int(d): int(lengths[d] // length) for d in docs}
    if pieces_per_doc:
        n_pieces = {d: min(n, pieces_per_doc) for d, n in n_pieces.items()}
    out = [
        (d, k * length) for k in range(max(n_pieces.values(), default=0)) for d in n_pieces if k < n_pieces[d]
    ]
    return out[:max_docs] if max_docs else out


def cut_pieces(
    docs, L: int, max_docs: int, pieces_per_doc: int | None, what: str
) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The (document, start) of the pieces to score, as positions in ``docs`` (a store or a view of one;
    ``what`` names it), and their tokens (N, L) int64."""
    per_doc = pieces_per_doc
    if per_doc is None:  # the default: fill max_docs from few documents; all documents: one piece each
        per_doc = 0 if max_docs else 1
    pieces = sequences(docs, L, max_docs, per_doc)
    if not pieces:
        longest = int(docs.lengths().max()) if len(docs.lengths()) else 0
        raise UserError(f"no document of {what} has {L} tokens (longest: {longest}); lower --length")
    return pieces, np.stack([np.asarray(docs.doc(d)[s : s + L], dtype=np.int64) for d, s in pieces])


def read_share(read: int, there: int) -> str | None:
    """What the pieces read of the data, when it is a part: by default 64 pieces of the first tokens of
    each document, 9% of two held-out books, while the line named only the books' 185,179 tokens."""
    if not there or read >= there:
        return None
    from contextlab.data.packing.stats import whole_percent  # the packing modules load only here

    return (
        f"{read:,} of its {there:,} tokens ({whole_percent(read / there)}; --max-docs 0 --pieces-per-doc 0 "
        "reads every piece)"
    )
