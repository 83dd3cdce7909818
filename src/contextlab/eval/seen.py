"""Whether a text an evaluation builds its prompts from was in the model's training data.

A needle's haystack is plain text (by default the books shipped in the package, which are Project
Gutenberg books): a contextlab run trained on Gutenberg may have read the very passages it is then
asked to search, and a model that predicts memorised text well reads the needle's surroundings
without its context. ``haystack_in_training`` looks for passages of the haystack, verbatim as
token ids, in the token stores the run trained on, and says how many it found.

Only contextlab runs (and their Hugging Face exports) record their training stores; for any other
model nothing is known and nothing is said. Trade-off: it samples ``PROBES`` passages of
``PROBE_TOKENS`` tokens and reads at most ``SCAN_TOKENS`` tokens of each store (seconds on a store
of millions), so a haystack of which only a small part was trained on can go unseen; a passage of
that length found verbatim in unrelated text is rare enough that two found are evidence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PROBES = 8  # passages of the haystack looked for
PROBE_TOKENS = 16  # tokens in each
SCAN_TOKENS = 256 * 2**20  # the most tokens of a store read
BLOCK = 16 * 2**20  # tokens read at a time
FOUND = 2  # passages found that make the note


def training_stores_of(model_path: str) -> list[Path]:
    """The token stores a contextlab run (or the run a Hugging Face export was made from) trained on,
    those still on disk; empty for any other model."""
    from contextlab import rundir

    path = Path(model_path)
    run = rundir.run_of(path) if rundir.is_run(rundir.run_of(path)) else None
    if run is None:
        made = rundir.exported_from(path)
        run = rundir.run_of(made) if made is not None else None
    if run is None:
        return []
    stores = rundir.training_stores(rundir.read_config(run), rundir.trained_in(run))
    return [s for s in dict.fromkeys(stores) if (s / "meta.json").is_file()]


def probes(encode, text: str, n: int = PROBES, size: int = PROBE_TOKENS) -> list[np.ndarray]:
    """``n`` passages of ``size`` token ids at evenly spaced places of ``text``, each cut from the
    middle of a longer encoded stretch (its first and last tokens depend on where the cut fell)."""
    window = 12 * size  # characters: enough for size tokens of any tokenizer after the cut's edges
    if len(text) < window:
        return []
    found = []
    for at in np.linspace(0, len(text) - window, n).astype(int):
        ids = list(encode(text[at : at + window]))
        if len(ids) >= size + 4:
            found.append(np.asarray(ids[2 : 2 + size], dtype=np.int64))
    return found


def occurs(tokens: np.ndarray, probe: np.ndarray, limit: int = SCAN_TOKENS) -> bool:
    """Whether ``probe`` occurs in the first ``limit`` tokens of ``tokens`` (read in blocks)."""
    size, end = len(probe), min(len(tokens), limit)
    for start in range(0, end, BLOCK):
        block = np.asarray(tokens[start : min(end, start + BLOCK + size - 1)], dtype=np.int64)
        hits = np.flatnonzero(block[: len(block) - size + 1] == probe[0]) if len(block) >= size else []
        for i in range(1, size):
            if not len(hits):
                break
            hits = hits[block[hits + i] == probe[i]]
        if len(hits):
            return True
    return False


def haystack_in_training(adapter, text: str) -> dict | None:
    """``{"store", "probes", "found"}`` for the first training store of the model (of its tokenizer)
    that holds at least ``FOUND`` of the haystack's probe passages verbatim; None otherwise."""
    from contextlab.data.store import TokenStore
    from contextlab.data.tokenizers import same_tokenizer

    passages = None  # encoded once, for the first store of the model's tokenizer
    for path in training_stores_of(adapter.info.path):
        try:
            store = TokenStore(path)
        except Exception:  # a store the run trained on that is unreadable now: nothing to say
            continue
        if not same_tokenizer(adapter.tokenizer.spec(), store.tokenizer_spec):
            continue
        passages = probes(adapter.encode, text) if passages is None else passages
        found = sum(occurs(store.tokens, p) for p in passages)
        if found >= FOUND:
            return {"store": str(path), "probes": len(passages), "found": found}
    return None


def haystack_note(seen: dict, what: str = "the haystack") -> str:
    """The line said when ``haystack_in_training`` found the haystack in training data."""
    return (
        f"{seen['found']} of {seen['probes']} passages of {what} ({PROBE_TOKENS} tokens each) occur verbatim "
        f"in {seen['store']}, a store the model trained on: it may have memorised this text, and reads it "
        "without needing the context; pass --data a text it never trained on"
    )
