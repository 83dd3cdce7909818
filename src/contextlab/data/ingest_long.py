"""Long documents in ingest: streamed through the tokenizer and the store writer in pieces.

A text file larger than ``--long-doc-mb`` comes from the source as a ``LongText`` (its
length, and its text again chunk by chunk). ``batches`` gives such a document a batch of its
own and ``add_streamed`` encodes it chunk by chunk: each chunk is cut where the tokenizer
proves a cut changes no id, the ids go straight to the store's token file, and only the
tail after the last cut waits for the next chunk. Memory is a few chunks, not about 14x the
document as when its pieces and their ids were all held at once. Trade-off: the file is
read twice (a scan for its length, emptiness and encoding, then the tokenizing pass), and
a tokenizer that knows no safe cut points still gets the whole text at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from contextlab.data.source_files import LongText
from contextlab.data.sources import Document
from contextlab.data.store import StoreWriter
from contextlab.data.tokenizers import Tokenizer


def batches(docs: Iterator[Document], skip: int, batch_chars: int) -> Iterator[list[Document]]:
    """Documents in batches of about ``batch_chars``; a long document (``LongText``) is a batch alone."""
    batch: list[Document] = []
    size = 0
    for pos, doc in enumerate(docs):
        if pos < skip:
            continue
        if isinstance(doc.text, LongText):
            if batch:
                yield batch
            yield [doc]
            batch, size = [], 0
            continue
        batch.append(doc)
        size += len(doc.text)
        if size >= batch_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def add_streamed(
    writer: StoreWriter,
    doc: Document,
    tokenizer: Tokenizer,
    piece_chars: int,
    config: Any,  # IngestConfig (min_tokens, max_tokens)
    counts: dict,
    progress: Callable[[int], object],
) -> None:
    """Add one long document (a ``LongText``) without holding it: its chunks are cut where the
    tokenizer allows and the ids of each chunk go to the store file at once. A document outside
    the length filters is taken back out of the file and counted."""
    ids = stream_ids(tokenizer, doc.text.chunks(), piece_chars, progress)
    n = writer.add_parts(ids, doc.meta, max(config.min_tokens, 1), config.max_tokens)
    if n < max(config.min_tokens, 1):
        counts["skipped_short"] += 1
    elif config.max_tokens and n > config.max_tokens:
        counts["skipped_long"] += 1


def stream_ids(tokenizer: Tokenizer, chunks: Iterable[str], piece_chars: int, progress=None) -> Iterator:
    """Ids of the text made of ``chunks``, piece by piece: each chunk is cut at the tokenizer's
    ``cut_points`` (where a cut changes no id) and the tail after the last cut waits for the
    next chunk, so the concatenated ids equal those of the whole text. A tokenizer without cut
    points gets the whole text at once (memory as for a short document)."""
    carry = ""
    for chunk in chunks:
        text, carry = carry + chunk, ""
        cuts = tokenizer.cut_points(text, piece_chars) if len(text) > piece_chars else []
        if cuts:
            carry = text[cuts[-1] :]
            yield from tokenizer.encode_batch([text[a:b] for a, b in zip([0, *cuts[:-1]], cuts)])
            if progress is not None:
                progress(cuts[-1])
        else:
            carry = text
    if carry:
        yield from tokenizer.encode_pieces([carry], piece_chars)
        if progress is not None:
            progress(len(carry))
