"""``--split run``: the part of its token store a contextlab run did not train on, as a view.

An evaluation read on the store a model trained on measures mostly what the model saw. Every
run holds part of its data out for validation, and ``--split run`` reads exactly that part,
recomputed from the config its checkpoint saved, so no second store has to be ingested:

* ``data.val_split = "documents"`` (the default): the ``data.val_fraction`` of the documents
  drawn with ``data.split_seed``, as training drew them;
* ``data.val_split = "tail"``: the last ``val_fraction`` of every document's tokens (a piece or
  window then starts inside a document, as the run's validation rows did);
* ``data.packed``: the text of no training sequence (the run held out a seeded fraction of
  sequences): the documents no piece of which lies in a training sequence, whole, and of a
  document that spans several sequences (a book longer than the context) the pieces that lie in
  held-out sequences only, each read from its own start (an evaluation of whole files reads the
  former only);
* ``data.mixture``: the same, over every packed store of the mixture packed from the store read
  (a mixture may draw on several token stores: ``--data`` names the one to read);
* ``data.val_store``: that store, every document of it.

A model read this way is a run, a checkpoint, or a Hugging Face export of one (found through the
checkpoint its config.json names). Which store the run trained on is told by content hash (what
its checkpoints record), so a store that moved is still accepted and another store is refused.
Trade-off: the held-out part is recomputed rather than recorded, so it depends on the split
functions staying as they are; they are the ones training calls, and a test pins the ids.
"""

from __future__ import annotations

import json
from functools import reduce
from pathlib import Path

import numpy as np

from contextlab.data.packing.packed_store import packed_split
from contextlab.data.views import DocView, all_documents, split_documents, split_tail
from contextlab.errors import UserError

SPLITS = ("all", "run")
SPLIT_HELP = (
    "all: every document of --data; run: only what the run held out for validation (its "
    "val_fraction of documents, document tails or val_store, recomputed from its config), on its own "
    "store (the default --data then)"
)
NEVER_SAW = "--split all with --data a store of text it never saw (ingested with the same --tokenizer)"


def of_option():
    """The ``heldout_of`` field of an options dataclass: whose held-out part ``--split run`` reads."""
    from contextlab.config import opt

    return opt(
        "",
        "with --split run: the contextlab run (or checkpoint, or export of one) whose held-out part is "
        "read; empty = the model's own (set it to read a base model on what its continued run held out)",
    )


def run_source(model: str) -> Path:
    """The run or checkpoint ``model`` is (or, for an export, was made from); one line for other models."""
    from contextlab.rundir import exported_from, is_checkpoint, is_run

    path = Path(model)
    if is_run(path) or is_checkpoint(path):
        return path
    if not path.exists():
        raise UserError(
            f"{model} not found: --split run reads what a contextlab run (or checkpoint, or export of "
            "one) held out; check the path"
        )
    made = exported_from(path)
    if made is None:
        raise UserError(
            f"--split run reads what a contextlab run held out for validation, and {model} is no contextlab "
            f"run, checkpoint, or export whose run is still there; pass {NEVER_SAW}"
        )
    return made


def _config(source: Path) -> dict:
    from contextlab.rundir import read_config, run_of

    data = (read_config(source) or read_config(run_of(source))).get("data") or {}
    if not data:
        raise UserError(f"{source} has no config.toml with a [data] section, so what it held out is unknown")
    return data


def _recorded(source: Path) -> dict:
    """What the checkpoint records of each [data] path: {key: content hash or fingerprint}."""
    from contextlab.rundir import data_record

    paths = (data_record(source) or {}).get("paths") or {}
    return {k: v.get("content") for k, v in paths.items() if isinstance(v, dict)}


def _resolve(path: str, source: Path) -> Path:
    """A [data] path as training took it: relative to the directory the run was trained in."""
    from contextlab.rundir import trained_in

    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    folder = trained_in(source)
    return folder / p if folder is not None and (folder / p).exists() else p


def _is(store, key: str, data: dict, recorded: dict, source: Path) -> bool:
    """Whether ``store`` is the run's data.<key>: by recorded content hash, else by place."""
    from contextlab.data.store import TokenStore, is_store

    if recorded.get(f"data.{key}"):
        return recorded[f"data.{key}"] == store.hash
    path = _resolve(str(data.get(key) or ""), source) if data.get(key) else None
    if path is None or not is_store(path):
        return False
    return path.resolve() == Path(store.path).resolve() or TokenStore(path).hash == store.hash


def default_store(model: str) -> str | None:
    """The store ``--split run`` reads when no --data is given: the run's data.val_store, else the token
    store it trained on (data.store, or the store its packed data was packed from); None when unknown."""
    from contextlab.rundir import trained_in, training_stores

    source = run_source(model)
    data = _config(source)
    if data.get("val_store"):
        return str(_resolve(data["val_store"], source))
    folder = trained_in(source)
    for base in ([folder] if folder is not None else []) + [None]:
        stores = [s for s in training_stores({"data": data}, base) if (s / "meta.json").is_file()]
        distinct = list(dict.fromkeys(str(s.resolve()) for s in stores))
        if len(distinct) > 1:
            raise UserError(
                f"{source} trained on a mixture of packed stores made from {len(distinct)} token stores "
                f"({', '.join(distinct)}); give --data the one whose held-out part to read"
            )
        if stores:
            return str(stores[0])
    return None


def documents(store, model: str, split: str, whole: bool = False, of: str = "") -> tuple[DocView, dict]:
    """The documents of ``store`` an evaluation reads, and what to record of them: every document for
    ``split = "all"``; for ``"run"`` the part the run ``of`` (default: ``model`` itself) held out (see
    the module docstring). ``whole``: the evaluation needs whole documents (files), so held-out tails
    are refused."""
    from contextlab.rundir import run_of

    if split not in SPLITS:
        raise UserError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    if split == "all":
        if of:
            raise UserError(f"--heldout-of {of} names whose held-out part --split run reads; add --split run")
        return all_documents(store), {}
    source = run_source(of or model)
    data, recorded = _config(source), _recorded(source)
    fraction, seed = float(data.get("val_fraction", 0.02)), int(data.get("split_seed", 0))
    packed = [_resolve(str(p), source) for p in _packed_paths(data)]
    if data.get("val_store"):
        if not _is(store, "val_store", data, recorded, source):
            raise UserError(
                f"{source} held out a separate store, data.val_store = {data['val_store']}, not "
                f"{store.path}; "
                "leave --data out (it is the default with --split run) or pass that store"
            )
        view, how = all_documents(store), "its validation store, data.val_store: every document"
    elif data.get("mixture"):
        _packed_unchanged(data, packed, recorded, source)
        view, parts, by_documents = _packed_heldout(
            store, _packed_from(store, packed, source), source, fraction, seed, whole
        )
        how = (
            parts
            if by_documents
            else (
                f"the text of no training sequence of the mixture's stores packed from it, data.mixture with "
                f"val_fraction {fraction:g} of their sequences and split_seed {seed}: {parts}"
            )
        )
    elif not _is(store, "store", data, recorded, source):
        own = default_store(of or model)
        if own and Path(own).resolve() == Path(store.path).resolve():  # its own place, other content
            raise UserError(
                f"{store.path} is where {source} read its data, but it changed since the run trained (its "
                f"content hash {store.hash[:12]} is not the run's record): it was written again, so "
                f"--split run cannot tell what the run held out of it; pass {NEVER_SAW}, or train again"
            )
        raise UserError(
            f"{source} trained on {data.get('store') or data.get('packed')}, not on {store.path}: "
            f"--split run reads the run's own store (leave --data out), or pass {NEVER_SAW}"
        )
    elif data.get("packed"):
        _packed_unchanged(data, packed, recorded, source)
        view, parts, by_documents = _packed_heldout(store, packed, source, fraction, seed, whole)
        how = (
            parts
            if by_documents
            else (
                f"the text of no training sequence, data.packed with val_fraction {fraction:g} of its "
                f"sequences and split_seed {seed}: {parts}"
            )
        )
    elif data.get("val_split", "documents") == "tail":
        if whole:
            raise UserError(
                f"{source} held out the last {fraction:g} of every document's tokens "
                f"(data.val_split = tail), not whole files; pass {NEVER_SAW}"
            )
        view = split_tail(store, fraction)[1]
        how = f"the last {fraction:g} of every document's tokens, data.val_split = tail"
    else:
        view = split_documents(store, fraction, seed)[1]
        how = f"val_fraction {fraction:g} of the documents, split_seed {seed}"
    documents = len(np.unique(view.indices))  # a packed run's pieces of one document count it once
    record = {"split": "run", "held_out": how, "documents": documents, "tokens": view.n_tokens()}
    record["held_out_id"] = view_id(view)  # what was held out, whatever the words (a pack's path) say
    return view, {**record, "held_out_by": str(Path(run_of(source)).resolve())}


def view_id(view) -> str:
    """A short hash of which tokens a view of a store holds: its documents and each one's token range
    (two packings of one store hold out the same documents; their descriptions name each pack)."""
    import hashlib

    h = hashlib.sha256(np.ascontiguousarray(view.indices, dtype=np.int64).tobytes())
    for bound in (view.begin, view.end):
        if bound is not None:
            h.update(np.ascontiguousarray(bound, dtype=np.int64).tobytes())
    h.update(str(int(view.max_len)).encode())
    return h.hexdigest()[:16]


def _packed_unchanged(data: dict, packed: list[Path], recorded: dict, source: Path) -> None:
    """One line when a packed store the run trained on was packed again since (another fingerprint than
    the checkpoint recorded, e.g. ``data pack --overwrite`` with another --val-fraction): what it holds
    out now is not what the run held out."""
    from contextlab.data.packing.packed_store import is_packed_store
    from contextlab.data.store_meta import content_id

    keys = ["data.packed"] if data.get("packed") else [f"data.mixture.{i}.packed" for i in range(len(packed))]
    for key, path in zip(keys, packed):
        was = recorded.get(key)
        now = content_id(path) if was and is_packed_store(path) else was
        if now != was:
            raise UserError(
                f"{path} was packed again since {source} trained on it (its fingerprint is {str(now)[:12]}, "
                f"the run recorded {str(was)[:12]}), so what it holds out now is not what the run held out; "
                f"read the run on the packed store it trained on, or pass {NEVER_SAW}"
            )


def _packed_paths(data: dict) -> list[str]:
    """The packed stores of a run's [data]: data.packed, or every data.mixture entry's, as written."""
    if data.get("packed"):
        return [str(data["packed"])]
    return [str(m["packed"]) for m in data.get("mixture", []) if isinstance(m, dict) and m.get("packed")]


def _packed_from(store, packed: list[Path], source: Path) -> list[Path]:
    """The packed stores of a mixture run made from ``store`` (by the content hash their meta.json
    records); one line naming the stores they were made from when none was."""
    from contextlab.data.packing.packed_store import is_packed_store

    made_from, missing = {}, []
    for path in packed:
        if not is_packed_store(path):
            missing.append(str(path))
            continue
        meta = (json.loads((path / "meta.json").read_text()).get("store")) or {}
        made_from[path] = (meta.get("content_hash"), meta.get("path"))
    if missing:  # it may have been made from this store: what it trained on is unknown
        raise UserError(
            f"packed store not found: {', '.join(missing)} (of the run's data.mixture), which --split run "
            f"needs to tell its training sequences; pass {NEVER_SAW}"
        )
    mine = [path for path, (content, _) in made_from.items() if content == store.hash]
    if mine:
        return mine
    stores = ", ".join(dict.fromkeys(str(p) for _, p in made_from.values()))
    raise UserError(
        f"{source} trained on a mixture of packed stores made from {stores}, not from {store.path}: "
        f"give --data one of them, or pass {NEVER_SAW}"
    )


def _packed_heldout(
    store, packed: list[Path], source: Path, fraction: float, seed: int, whole: bool = False
) -> tuple[DocView, str, bool]:
    """The text of ``store`` that no training sequence of the run's packed stores ``packed`` (each made
    from ``store``) holds: the documents with no piece in a training sequence, whole, and of the others
    the pieces in held-out sequences only (a long document spans many sequences, some held out; pieces
    that meet are joined). With ``whole`` (an evaluation of whole files) only the former. The view
    holds every document's first piece, then every second, and so on, so that an evaluation that takes
    its first N reads as many documents as it can. Stores packed holding documents out (``data pack
    --val-fraction``) trained on every sequence: when all were, the text is the documents they all left
    out. Returns the view, what it holds in words, and whether it is such documents."""
    from contextlab.data.packing.packed_store import PackedStore, is_packed_store

    trained, held = [], []  # (doc, begin, end) entries of training and of held-out sequences
    packed_without = []  # per packed store: the documents it was packed without, or None
    how = []  # per packed store: how it drew them, in words
    for path in packed:
        if not is_packed_store(path):
            raise UserError(
                f"packed store not found: {path} (the run's data.packed), which --split run needs "
                f"to tell its training sequences; pass {NEVER_SAW}"
            )
        p = PackedStore(path, store=store)
        kept = p.heldout_documents()  # packed without them: every sequence trained
        is_train = np.zeros(len(p), bool)
        is_train[packed_split(p, fraction, seed)[0] if kept is None else slice(None)] = True
        packed_without.append(kept)
        drawn = p.meta.get("heldout") or {}
        how.append(
            f"{path} (val_fraction {drawn.get('val_fraction', 0):g}, split_seed {drawn.get('split_seed', 0)})"
        )
        sequence_of = np.repeat(np.arange(len(p)), np.diff(np.asarray(p.seq_offsets)))  # per entry
        entries = np.asarray(p.entries, dtype=np.int64)
        trained.append(entries[is_train[sequence_of]])
        held.append(entries[~is_train[sequence_of]])
    trained, held = np.concatenate(trained), np.concatenate(held)
    seen = np.zeros(store.n_docs, bool)
    seen[trained[:, 0]] = True
    unseen = np.flatnonzero(~seen)
    by_documents = all(kept is not None for kept in packed_without)
    if by_documents:  # what they validated on, not documents left unpacked (near-duplicates dropped)
        unseen = np.intersect1d(unseen, reduce(np.intersect1d, packed_without))
    pieces = np.zeros((0, 3), np.int64) if whole else _unseen_ranges(held[seen[held[:, 0]]], trained)
    if not len(unseen) and not len(pieces) and any(kept is not None for kept in packed_without):
        raise UserError(
            f"{source} trained on packed stores of {store.path} that hold out different text "
            f"({'; '.join(how)}; the others hold out sequences), so each trained on what another held "
            f"out and no text is unseen by the run; pass {NEVER_SAW}"
        )
    if not len(unseen) and not len(pieces):
        which = ", ".join(str(p) for p in packed)
        raise UserError(
            f"{source} held out {fraction:g} of the sequences of {which}, and every document of {store.path} "
            f"has a piece in a training sequence (a document longer than the context spans several), so "
            f"none is unseen whole, as files are read; pass {NEVER_SAW}"
        )
    docs = np.concatenate([unseen, pieces[:, 0]])
    begin = np.concatenate([np.zeros(len(unseen), np.int64), pieces[:, 1]])
    end = np.concatenate([store.lengths()[unseen].astype(np.int64), pieces[:, 2]])
    order = np.lexsort((begin, docs))  # by document, then place in it
    docs, begin, end = docs[order], begin[order], end[order]
    first = np.searchsorted(docs, docs)  # where each document's pieces start
    order = np.lexsort((docs, np.arange(len(docs)) - first))  # every first piece, then every second, ...
    parts = f"{len(unseen):,} whole document{'s' * (len(unseen) != 1)}"
    if len(pieces):
        others = len(np.unique(pieces[:, 0]))
        parts += (
            f" and {len(pieces):,} piece{'s' * (len(pieces) != 1)} of {others:,} other{'s' * (others != 1)}"
        )
    if by_documents:
        parts = (
            f"the documents {' and '.join(how)} {'was' if len(how) == 1 else 'were'} packed without: {parts}"
        )
    return DocView(store, docs[order], 0, begin[order], end[order]), parts, by_documents


def _merged(ranges: np.ndarray) -> list[list[int]]:
    """(doc, begin, end) token ranges (N, 3) as sorted, disjoint ranges: those that overlap or meet joined."""
    out: list[list[int]] = []
    for d, b, e in ranges[np.lexsort((ranges[:, 1], ranges[:, 0]))].tolist():
        if out and out[-1][0] == d and b <= out[-1][2]:
            out[-1][2] = max(out[-1][2], e)
        else:
            out.append([d, b, e])
    return out


def _unseen_ranges(held: np.ndarray, trained: np.ndarray) -> np.ndarray:
    """The token ranges of ``held`` that no range of ``trained`` covers (both (N, 3): doc, begin, end),
    joined where they meet: (M, 3) int64. (A document packed twice, as a mixture of two packings of one
    store may, can lie in a held-out sequence of one and a training sequence of the other.)"""
    from bisect import bisect_right

    covered: dict[int, tuple[list[int], list[int]]] = {}  # doc -> (begins, ends) of its trained ranges
    for d, b, e in _merged(trained):
        begins, ends = covered.setdefault(d, ([], []))
        begins.append(b), ends.append(e)
    out = []
    for d, b, e in _merged(held):
        begins, ends = covered.get(d, ([], []))
        i = bisect_right(ends, b)  # the first trained range that ends after b
        while i < len(begins) and begins[i] < e:
            if begins[i] > b:
                out.append((d, b, begins[i]))
            b = max(b, ends[i])
            i += 1
        if b < e:
            out.append((d, b, e))
    return np.asarray(out, np.int64).reshape(-1, 3)


def announced(held: dict) -> str | None:
    """The settings line's value for the split: None for every document."""
    if not held:
        return None
    n = held["documents"]
    return f"run: {n:,} held-out document{'s' * (n != 1)}, {held['tokens']:,} tokens ({held['held_out']})"


def in_store(view: DocView, places) -> np.ndarray:
    """(position in ``view``, token offset in that view's document) pairs as the store's (document id,
    token offset): (N, 2) int64, what result files record so that two results' samples compare."""
    arr = np.asarray(places, dtype=np.int64).reshape(-1, 2)
    begin = np.asarray(view.begin, dtype=np.int64)[arr[:, 0]] if view.begin is not None else 0
    return np.stack([np.asarray(view.indices, dtype=np.int64)[arr[:, 0]], arr[:, 1] + begin], axis=1)


def shared_run(models: list[str], store) -> str:
    """The model whose run's held-out part of ``store`` every model of one reading (a profile, a pair)
    reads with ``--split run``: the first that is a contextlab run (checkpoint, export of one) that
    trained on ``store`` or held it out as its validation store. A model that never trained on it (a
    Hugging Face base model, a run of another corpus) reads that same part: it is unseen by it too.
    When two runs trained on it they must have held out the same part, or their paired numbers would
    be of different text: one line."""
    runs = [model for model in models if _trained_with(model, store)]
    if not runs:
        if len(models) == 1:
            run_source(models[0])  # no run at all: that line
        raise UserError(
            f"--split run reads what a contextlab run held out of its own store, and "
            f"{' and '.join(models)} {'is' if len(models) == 1 else 'are'} no run that trained on "
            f"{store.path}; pass {NEVER_SAW}"
        )
    parts = {run: _ranges(documents(store, run, "run")[0]) for run in runs}
    for run in runs:  # the first whose held-out part every other run held out too is unseen by all
        if all(parts[run] <= parts[other] for other in runs):
            return str(Path(run).resolve())
    other = next(r for r in runs[1:] if not parts[runs[0]] <= parts[r])
    shared = len({d for d, _, _ in parts[runs[0]] & parts[other]})
    raise UserError(
        f"{runs[0]} and {other} held out different parts of {store.path} "
        f"({_split_difference(runs[0], other)}; {shared:,} document{'s' * (shared != 1)} in both, and "
        f"neither's part lies within the other's), so no part held out by one is unseen by both; pass "
        f"{NEVER_SAW}, or train both with one data.val_store"
    )


def _ranges(view: DocView) -> set[tuple[int, int, int]]:
    """A view's text as (document, begin, end) token ranges of its store (whole documents 0 to length),
    so that views of one text compare equal however they were drawn."""
    idx = np.asarray(view.indices, dtype=np.int64)
    begin = np.zeros(len(idx), np.int64) if view.begin is None else np.asarray(view.begin, np.int64)
    end = view.store.lengths()[idx].astype(np.int64) if view.end is None else np.asarray(view.end, np.int64)
    return set(zip(idx.tolist(), begin.tolist(), end.tolist()))


def _split_difference(a: str, b: str) -> str:
    """Why two runs of one store held out different parts, in words: the [data] settings that
    decide it, where they differ (a run on a store packed holding out no documents holds out sequences,
    so two such packings differ)."""
    da, db = _config(run_source(a)), _config(run_source(b))
    defaults = {"val_fraction": 0.02, "split_seed": 0, "val_split": "documents", "val_store": ""}
    shown = []
    if _packed_paths(da) != _packed_paths(db):
        held = [_pack_holdouts(d, run_source(r)) for d, r in ((da, a), (db, b))]
        pa, pb = (", ".join(_packed_paths(d)) or "data.store" for d in (da, db))
        if not any(None in h for h in held):  # documents held out by packs or by a data.store run
            drawn = [
                ", ".join(map(str, h)) or str((d.get("val_fraction", 0.02), d.get("split_seed", 0)))
                for h, d in zip(held, (da, db))
            ]
            shown.append(
                f"packed data {pa} against {pb}, holding out other documents (val_fraction, split_seed "
                f"{drawn[0]} against {drawn[1]})"
            )
        else:
            shown.append(
                f"packed data {pa} against {pb}: a run on a store packed with --val-fraction 0 holds out "
                "sequences, and two packings' sequences hold different text; pack both with one "
                "--val-fraction (the documents held out before packing are then the same)"
            )
    for key, default in defaults.items():
        va, vb = da.get(key, default), db.get(key, default)
        if va != vb and not (_packed_paths(da) and key == "val_split"):
            shown.append(f"data.{key} {va!r} against {vb!r}")
    return "; ".join(shown) or "data.val_fraction, split_seed or val_split"


def _pack_holdouts(data: dict, source: Path) -> list[tuple | None]:
    """Per packed store of a run's [data]: the (val_fraction, split_seed) of the documents it was packed
    without, or None (it holds out none, or cannot be read)."""
    out = []
    for path in _packed_paths(data):
        try:
            held = json.loads((_resolve(path, source) / "meta.json").read_text()).get("heldout") or {}
        except (OSError, ValueError):
            held = {}
        out.append((held["val_fraction"], held["split_seed"]) if held else None)
    return out


def _trained_with(model: str, store) -> bool:
    """Whether ``model`` is a contextlab run (or checkpoint, or export of one) that trained on ``store``
    or held it out as its data.val_store, by the content hashes its checkpoint records (runs written
    before the record: by whether its held-out part of ``store`` can be read at all)."""
    try:
        source = run_source(model)
    except UserError:
        return False
    recorded = _recorded(source)
    if recorded and store.hash in (recorded.get("data.store"), recorded.get("data.val_store")):
        return True
    if recorded and not _config(source).get("mixture"):  # a mixture records only its first token store
        return False
    try:
        documents(store, model, "run")
    except UserError:
        return False
    return True


def first_run(models: list[str]) -> str | None:
    """The store ``--split run`` reads when no --data is given to a reading of several models: that of
    the first of them that is a contextlab run (or checkpoint, or export of one)."""
    for model in models:
        try:
            run_source(model)
        except UserError:
            continue
        return default_store(model)  # a run whose store is not one (a mixture of stores): its line
    if models:
        run_source(models[0])  # no run among them: that line
    return None
