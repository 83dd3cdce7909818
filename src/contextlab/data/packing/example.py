"""Example packing baselines: ``ep`` (random documents) and ``ep-domain`` (random documents
of one domain), as expansions for the shared ``Sequencer``.

``ep`` is GPT-3 style example packing: documents in a seeded random order, laid end to end
with a separator, cut into sequences. ``ep-domain`` (the seed's Within-Domain EP) draws the
next document at random from the *same domain* (``docs_meta()["domain"]``: the top folder,
e.g. the book or the repository) as the document before it; when that domain is exhausted
the sequence continues with a random document of any domain. So sequences span one domain
except where a domain runs out. Neither uses a retriever, so both cost O(n) in total.
"""

from __future__ import annotations

from collections.abc import Iterator

from contextlab.data.packing.sequencer import NAN, Sequencer


def pack_ep(seq: Sequencer, retriever=None, cfg=None) -> None:
    """Random unused documents, one after another."""

    def expand(d: int, _k: int) -> Iterator[tuple[int, float]]:
        j = seq.random_unused()
        if j is not None:
            yield j, NAN

    seq.run(expand, 1)


def pack_ep_domain(seq: Sequencer, retriever=None, cfg=None) -> None:
    """Random unused documents of the previous document's domain."""

    def expand(d: int, _k: int) -> Iterator[tuple[int, float]]:
        j = seq.random_in_domain(int(seq.domains[d]))
        if j is not None:
            yield j, NAN

    seq.run(expand, 1)
