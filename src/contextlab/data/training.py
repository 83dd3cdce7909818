"""The run's ``[data]`` section turned into what training needs, in one call.

``build_training_data(data, context=..., rows=..., seed=..., val_tokens=..., rank=..., world=...)``
resolves the three kinds of training data into a ``TrainingData``:

* ``data.store``: a token store, split into train and validation by documents or by each
  document's tail (``data.val_split``), optionally cut to ``data.train_tokens``; rows are
  windows over the documents end to end, or every window of every long document read
  column-major (``data.mode = "long_docs"``, ``loader.LongDocRows``).
* ``data.packed``: a packed store; it validates on the documents it was packed without (``data pack
  --val-fraction``, the default), else on a seeded share of its sequences held out.
* ``data.mixture``: several packed stores with weights; each validates on what it holds out (as
  ``data.packed``), the training loader draws the weighted rows (``mixture.py``) and the validation
  rows follow the same shares. Packings of one token store must hold out the same documents (else
  one trains on what another validates on: refused), and their shares read on along one stream of
  windows over them.

``data.val_store`` replaces the held-out share with a separate store in every case. The
validation rows are fixed: the first ``ceil(val_tokens / context)`` rows of the held-out
sources in their own order (documents in a ``split_seed``-ed order: data.split_seed, or for a
pack's held-out documents the split_seed they were drawn with), each rank keeping every w-th.
Trade-off: the data layer reads the run config's ``[data]`` fields by name (``DataOptions``)
instead of importing the training config, so data stays below train in the layering, and the
trainer sees one loader and one array of rows whatever the data is.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from contextlab.data.loader import PackedRows, RowSource, TokenLoader, document_rows
from contextlab.data.mixture import MixtureLoader, exact_shares
from contextlab.data.packing.packed_store import PACKED_META, PackedStore, is_packed_store, packed_split
from contextlab.data.store import TokenStore, is_store
from contextlab.data.store_meta import packed_from, read_meta
from contextlab.data.views import (
    DocView,
    all_documents,
    first_tokens,
    split_documents,
    split_tail,
)
from contextlab.errors import UserError


class MixtureEntry(Protocol):
    packed: str
    weight: float


class DataOptions(Protocol):
    """The fields of the run config's ``[data]`` section read here (see contextlab.train.config)."""

    store: str
    val_store: str
    val_fraction: float
    val_split: str
    split_seed: int
    train_tokens: int
    packed: str
    mode: str
    mixture: list[MixtureEntry]
    verify: bool


@dataclass
class TrainingData:
    loader: TokenLoader | MixtureLoader  # this rank's training batches, resumable
    val_rows: np.ndarray  # (n, context + 1) int64: this rank's share of the fixed validation rows
    store: TokenStore  # the token store every row comes from (tokenizer, hashes)
    val_documents: int = 0  # distinct documents all processes' validation rows read (of their store)
    val_rows_total: int = 0  # the validation rows of all processes together
    val_rows_hash: str = ""  # of every process's validation rows: one for runs that score the same rows
    more_validation: str = "raise data.val_fraction"  # how to validate on more documents, in words
    notes: list[str] = field(default_factory=list)  # lines for the user at the run's start


ValSources = list[tuple[RowSource, int]]  # validation: (row source, rows wanted from it)


def build_training_data(
    data: DataOptions, *, context: int, rows: int, seed: int, val_tokens: int, rank: int = 0, world: int = 1
) -> TrainingData:
    """The training loader (``rows`` rows per global step in a ``seed``-ed order), this rank's
    validation rows (about ``val_tokens`` tokens in all) and the token store of the run's data."""
    packed = packed_sources(data)
    store = token_store(data, packed)
    if getattr(data, "verify", True):
        for checked in [store] + ([TokenStore(data.val_store)] if data.val_store else []):
            checked.check_content(skip="data.verify=false")
    n_val = max(1, math.ceil(val_tokens / context))
    if packed:
        train, val = _split_packed(data, packed, store, context, n_val)
        loader = _packed_loader(data, train, rows, seed, rank, world)
    else:
        source, val = _split_documents(data, store, context, n_val, seed)
        loader = TokenLoader(source, rows, seed=seed, rank=rank, world_size=world)
    held = [p.meta["heldout"] for p in packed if p.meta.get("heldout")] if not data.val_store else []
    fix = "pack with a larger --val-fraction or another --split-seed" if held else "raise data.val_fraction"
    rows_all = validation_rows(val, context, fix)
    more = _more_validation(val, held)
    rows_id = rows_hash(rows_all)
    notes = _unused_heldout(packed) if data.val_store else []
    if data.mixture:
        notes.append(_mixture_line(data, packed, rows, val))
    if len(val) > 1:
        notes += _short_shares(val)
    return TrainingData(
        loader,
        rows_all[rank::world],
        store,
        validation_documents(val),
        len(rows_all),
        rows_id,
        more,
        notes,
    )


def _mixture_line(data: DataOptions, packed: list[PackedStore], rows: int, val: ValSources) -> str:
    """What a mixture draws, in one line at the run's start: each source's rows per step under the
    exact rule, beside its weight (a typo in a weight shows here, not in the loss curve), and the
    validation rows each gives (one blended validation loss is computed over them)."""
    weights = [m.weight for m in data.mixture]
    per_step = exact_shares(rows, weights)
    total = sum(weights)
    each = ", ".join(
        f"{p.path.name} {k:,} ({100 * w / total:.3g}%)" for p, k, w in zip(packed, per_step, weights)
    )
    if len(val) == len(packed):
        held = " + ".join(f"{min(k, src.n_rows):,}" for src, k in val)
        return f"data.mixture: each step of {rows:,} rows draws {each}; validation rows {held}"
    return f"data.mixture: each step of {rows:,} rows draws {each}"


def _short_shares(val: ValSources) -> list[str]:
    """One line when a mixture source holds out fewer validation rows than its weight's share: the
    validation rows then mix the sources otherwise than the weights say."""
    short = [(s, k) for s, k in val if s.n_rows < k]
    if not short:
        return []
    got = " / ".join(f"{min(k, s.n_rows):,}" for s, k in val)
    asked = " / ".join(f"{k:,}" for _, k in val)
    which = "1 source holds" if len(short) == 1 else f"{len(short)} sources hold"
    its = "its" if len(short) == 1 else "their"
    return [
        f"note: the validation rows mix the data.mixture sources {got} where their weights ask {asked}: "
        f"{which} out too little text for {its} share (pack with a larger --val-fraction, or lower "
        "train.val_tokens)"
    ]


def _more_validation(val: ValSources, held: list[dict]) -> str:
    """How to validate on more text, in words: read more of the held-out rows when there are more than
    are read, else hold out more documents (the pack's --val-fraction, or data.val_fraction)."""
    there, read = sum(s.n_rows for s, _ in val), sum(min(k, s.n_rows) for s, k in val)
    if there > read:
        return f"raise train.val_tokens (the held-out text gives {there:,} rows; {read:,} are read)"
    if held:
        return f"pack with a larger --val-fraction (it held out {held[0]['val_fraction']:g} of the documents)"
    return "raise data.val_fraction"


def _unused_heldout(packed: list[PackedStore]) -> list[str]:
    """A note per packed store that holds documents out while data.val_store replaces them: text that
    neither trains nor validates the run."""
    notes = []
    for p in packed:
        held = p.meta.get("heldout")
        if held:
            n = held["documents"]
            notes.append(
                f"note: {p.path} was packed without {n:,} document{'s' * (n != 1)} ({held['tokens']:,} "
                "tokens) held out for validation, and data.val_store replaces them, so this run neither "
                "trains nor validates on them; pack with --val-fraction 0 to train on every document"
            )
    return notes


def rows_hash(rows: np.ndarray) -> str:
    """sha256 of rows (their shape and int64 tokens): two runs whose validation rows have one hash
    score the same text, whatever data they trained on."""
    h = hashlib.sha256(repr(rows.shape).encode())
    h.update(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
    return h.hexdigest()


def validation_documents(sources: ValSources) -> int:
    """How many distinct documents the validation rows read (each source's first k rows; a mixture's
    sources may share documents of one store, and are counted once per (source's store, document))."""
    seen = set()
    for source, k in sources:
        store = source.packed.store if isinstance(source, PackedRows) else source.view.store
        seen.update((str(store.path), int(d)) for d in np.unique(source.documents(k)))
    return len(seen)


def validation_rows(sources: ValSources, context: int, fix: str = "raise data.val_fraction") -> np.ndarray:
    """The first k rows of every (source, k), stacked: (n, context + 1) int64; ``fix``: how to hold
    out more text, in words, for the error when a source gives no row."""
    if any(source.n_rows == 0 for source, _ in sources):
        raise UserError(
            f"the validation documents are too few or too short for context {context}; "
            f"{fix} or use data.val_store"
        )
    return np.stack([source.row(r) for source, k in sources for r in range(min(k, source.n_rows))])


def data_context(data: DataOptions) -> int:
    """The training context the data itself fixes (for ``train.context = 0``): a packed store's
    context, or, with ``data.mode = "long_docs"``, the length - 1 of documents that all have one
    length (synthetic tasks: one sample per row)."""
    packed = packed_sources(data)
    if packed:
        contexts = sorted({p.context for p in packed})
        if len(contexts) > 1:
            raise UserError(
                f"the data.mixture stores were packed for contexts {contexts}, and a run reads rows of one "
                "length; pack them with one --context"
            )
        return contexts[0]
    if data.mode != "long_docs":
        raise UserError(
            "train.context = 0 takes the context from the data: a packed store, or data.mode = "
            "long_docs over documents of one length; set train.context"
        )
    stores = [TokenStore(data.store)] + ([TokenStore(data.val_store)] if data.val_store else [])
    lengths = np.unique(np.concatenate([s.lengths() for s in stores]))
    if len(lengths) != 1 or lengths[0] < 2:
        span = f"{lengths.min()}..{lengths.max()}" if len(lengths) else "none"
        raise UserError(
            f"train.context = 0 needs documents of one length (one sample per row), but the "
            f"documents of {', '.join(str(s.path) for s in stores)} have lengths {span}; set train.context"
        )
    return int(lengths[0]) - 1


# ---------------------------------------------------------------------------------------
# Which stores


def packed_sources(data: DataOptions) -> list[PackedStore]:
    """The packed stores of data.packed or data.mixture ([] when training on data.store)."""
    if not data.store and not data.packed and not data.mixture:
        raise UserError(
            "no training data: set data.store (e.g. --set data.store=STORE), data.packed or data.mixture"
        )
    _check_kinds(data)
    if not data.mixture:
        return [_open_packed(data.packed, data)] if data.packed else []
    if data.packed:
        raise UserError("set data.packed or data.mixture, not both (add data.packed to the mixture)")
    if any(not m.packed for m in data.mixture):
        raise UserError("every data.mixture entry needs packed = a packed store")
    sources = [_open_packed(m.packed, data) for m in data.mixture]
    for p in sources[1:]:
        if p.store.tokenizer_hash != sources[0].store.tokenizer_hash:
            raise UserError(
                f"the data.mixture stores {sources[0].path} and {p.path} use different tokenizers; "
                "ingest all sources with the same --tokenizer"
            )
    return sources


def _check_kinds(data: DataOptions) -> None:
    """A packed store where a token store is read, or the other way round, is one line naming the
    key that takes it (both are folders with a meta.json, and users swap them)."""
    for key, path in (("data.store", data.store), ("data.val_store", data.val_store)):
        if path and is_packed_store(path):
            fix = (
                f"train on it with data.packed={path} (data.store may stay empty)"
                if key == "data.store"
                else f"give its token store ({packed_from(path) or 'the store it was packed from'}), or "
                "leave data.val_store empty to hold out a share of the training sequences"
            )
            raise UserError(f"{key} {path} is a packed store, but {key} takes a token store; {fix}")
    packed = [("data.packed", data.packed)] + [
        (f"data.mixture entry {i + 1}", m.packed) for i, m in enumerate(data.mixture)
    ]
    for key, path in packed:
        if path and is_store(path):
            alone = "" if key.startswith("data.mixture") else f"train on it with data.store={path}, or "
            raise UserError(
                f"{key} {path} is a token store, but it takes a packed store; {alone}pack it first "
                f"(`contextlab data pack {path} --out PACKED --context N`)"
            )


def _open_packed(path: str, data: DataOptions) -> PackedStore:
    """A packed store, read through data.store when that holds the content it was packed from (a
    token store that moved since: the packed store records its old path)."""
    if data.store and is_store(data.store) and is_packed_store(path):
        store = TokenStore(data.store)
        if read_meta(Path(path), PACKED_META)["store"].get("content_hash") == store.hash:
            return PackedStore(path, store=store)
    return PackedStore(path)


def token_store(data: DataOptions, packed: list[PackedStore]) -> TokenStore:
    """data.store, or the token store the (first) packed store was packed from."""
    if not packed:
        return TokenStore(data.store)
    store = packed[0].store
    if data.store and TokenStore(data.store).hash != store.hash:
        raise UserError(
            f"{packed[0].path} was packed from {store.path}, not from data.store "
            f"{data.store}; leave data.store empty or pack {data.store}"
        )
    return store


# ---------------------------------------------------------------------------------------
# Train / validation splits


def _split_documents(
    data: DataOptions, store: TokenStore, context: int, n_val: int, seed: int
) -> tuple[RowSource, ValSources]:
    """The training rows of a token store (documents in a ``seed``-ed order) and its validation sources."""
    if data.val_store:
        train, val = all_documents(store), _val_store(data, store)
    elif data.val_split == "tail":
        train, val = split_tail(store, data.val_fraction)
    elif data.val_split != "documents":
        raise UserError(f"data.val_split must be documents or tail, got {data.val_split!r}")
    elif store.n_docs < 2:
        raise UserError(
            f"{store.path} has {store.n_docs} document(s): set data.val_split=tail to hold "
            f"out the end of each document, or data.val_store"
        )
    else:
        train, val = split_documents(store, data.val_fraction, data.split_seed)
    if data.train_tokens:
        train = first_tokens(train, data.train_tokens, data.split_seed)
    eot = store.tokenizer_spec.get("eot_id")
    source = document_rows(train, context, data.mode, separator=eot, seed=seed)
    return source, _val_documents(data, val, eot, context, n_val)


def _check_one_context(packed: list[PackedStore], context: int) -> None:
    """One line for packed stores of other contexts than train.context, naming all of them: a mixture's
    first mismatch said "or set train.context = 16384", which the next source then refused."""
    other = [p for p in packed if p.context != int(context)]
    if len(packed) < 2 or not other:
        return  # one store: PackedRows says it, with both ways out
    each = ", ".join(f"{p.path}: {p.context:,}" for p in packed)
    raise UserError(
        f"the mixture's packed stores are not all packed for train.context {context:,} ({each}); pack "
        f"{'that one' if len(other) == 1 else 'those'} again with --context {context} (a mixture trains "
        "every source at one context)"
    )


def _split_packed(
    data: DataOptions, packed: list[PackedStore], store: TokenStore, context: int, n_val: int
) -> tuple[list[RowSource], ValSources]:
    """The training rows of every packed store and the validation sources in the mixture's shares: the
    documents a store was packed without (``data pack --val-fraction``: the same for every packing of
    one token store), else its held-out sequences (data.val_fraction of them); or data.val_store."""
    if data.train_tokens:
        raise UserError(
            "data.train_tokens works on a token store (data.store), not on packed stores; "
            "train from data.store or pack a smaller store"
        )
    _check_one_context(packed, context)
    if data.val_store:
        eot = store.tokenizer_spec.get("eot_id")
        val_docs = _val_documents(data, _val_store(data, store), eot, context, n_val)
        return [PackedRows(p, context) for p in packed], val_docs
    _check_one_holdout(packed)
    shares = exact_shares(n_val, [m.weight for m in data.mixture] or [1.0])
    train, val, of_store = [], [], {}  # of_store: (a token store's hash, separator) -> its entry in val
    for p, k in zip(packed, shares):
        held = p.heldout_documents()
        if held is None:
            ids, val_ids = packed_split(p, data.val_fraction, data.split_seed)
            train.append(PackedRows(p, context, ids))
            val.append((PackedRows(p, context, val_ids), int(k)))
            continue
        train.append(PackedRows(p, context))  # packed holding documents out: every sequence trains
        sep = p.separator_id  # the pack's own policy: --separator none trains and validates without one
        if (p.store.hash, sep) in of_store:  # another packing of one store: the same windows, read on
            i = of_store[p.store.hash, sep]
            val[i] = (val[i][0], val[i][1] + int(k))
        else:
            of_store[p.store.hash, sep] = len(val)  # in the split_seed's order, as a data.store run's
            order = int(p.meta["heldout"]["split_seed"])
            val += _val_documents(data, DocView(p.store, held), sep, context, int(k), order)
    return train, val


def _check_one_holdout(packed: list[PackedStore]) -> None:
    """Mixture sources packed from one token store must hold out the same documents: a source holding
    out other documents, or sequences (``--val-fraction 0``), trains on the text another validates on."""
    first: dict[str, PackedStore] = {}
    for p in packed:
        a = first.setdefault(p.store.hash, p)
        ha, hb = a.heldout_documents(), p.heldout_documents()
        if a is p or (ha is not None and hb is not None and np.array_equal(ha, hb)):
            continue
        raise UserError(
            f"the data.mixture stores {a.path} and {p.path} were packed from one token store "
            f"({p.store.path}) but hold out {_held_out(a)} and {_held_out(p)}, so each trains on text "
            "the other validates on; pack both with one --val-fraction and --split-seed, or set "
            "data.val_store"
        )


def _held_out(p: PackedStore) -> str:
    """What a packed store holds out for validation, in words."""
    held = p.meta.get("heldout")
    if not held:
        return "sequences (packed with --val-fraction 0)"
    n, split = held["documents"], f"val_fraction {held['val_fraction']:g}, split_seed {held['split_seed']}"
    return f"{n:,} document{'s' * (n != 1)} ({split})"


def _packed_loader(data: DataOptions, train: list[RowSource], rows: int, seed: int, rank: int, world: int):
    """One loader over a packed store, or the weighted mixture of one loader per packed store."""
    if not data.mixture:
        return TokenLoader(train[0], rows, seed=seed, rank=rank, world_size=world)
    loaders = [TokenLoader(source, 1, seed=seed + i) for i, source in enumerate(train)]
    return MixtureLoader(loaders, [m.weight for m in data.mixture], rows, rank=rank, world_size=world)


def _val_store(data: DataOptions, store: TokenStore) -> DocView:
    val_store = TokenStore(data.val_store)
    val_store.check_tokenizer(store.tokenizer_spec, f"the training store {store.path}")
    return all_documents(val_store)


def _val_documents(
    data: DataOptions, view: DocView, eot: int | None, context: int, n_val: int, seed: int | None = None
) -> ValSources:
    """Validation rows over documents: the same kind of rows as training, documents in the order of
    ``seed`` (default data.split_seed)."""
    order = data.split_seed if seed is None else seed
    return [(document_rows(view, context, data.mode, separator=eot, seed=order), n_val)]
