"""Export a packed store for other trainers: Parquet (Hugging Face) or a Megatron indexed dataset.

``export(packed, out, ExportConfig(...))`` writes the packed store's rows, in packed order, to a
folder that describes itself (``export.json``: format version, the packed store's fingerprint, the
tokenizer hash, the end-of-text id, the context, the counts of every split and file). Rows stream
from the packed store's memory maps in batches, so memory does not grow with the corpus.
Everything is written under ``OUT.partial`` and renamed to ``OUT`` at the end: a killed export
leaves no ``OUT``, and running it again clears the partial folder and starts over (an export
is a copy, minutes where a pack is hours; resuming it is not worth its bookkeeping).
Each split is written as a shard of the shard engine (``data.shards``), in this process, with its
progress bar. Variants live in the ``FORMATS`` dict. Trade-off: only full rows (``context + 1`` tokens) by
default, the rows contextlab's own trainer uses; ``keep_short_rows`` adds the short last row of
each shard to Parquet (Megatron's sampler needs equal rows, see ``megatron.py``).
Validation: a store packed holding documents out (``data pack --val-fraction``) gets a
``validation`` split of the windows over those documents that a contextlab run on it validates on
(its first rows are that run's validation rows); a store packed
holding none out gets one only when asked (``val_fraction``: a share of its sequences, the
trainer's split).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np

from contextlab import __version__
from contextlab.config import opt
from contextlab.data.export.megatron import megatron_dtype, write_megatron_split
from contextlab.data.export.parquet import rows_per_shard_for, write_parquet_split
from contextlab.data.export.rows import Batches, row_batches, row_ids, row_lengths, window_batches
from contextlab.data.loader import WindowRows
from contextlab.data.packing.packed_store import PackedStore, packed_split
from contextlab.data.shards.local_pool import LocalExecutor
from contextlab.data.store import TokenStore, holds_output_lock
from contextlab.data.views import DocView
from contextlab.errors import UserError
from contextlab.io import atomic_write_json, partial_dir
from contextlab.outputs import OutputKind, refuse_foreign, replace_dir

EXPORT_FORMAT = "contextlab-export"
EXPORT_VERSION = 1
FORMATS = {
    "parquet": "one Parquet row per sequence: input_ids, position_ids, document_ids (Hugging Face)",
    "megatron": "Megatron-LM indexed dataset PREFIX.bin + PREFIX.idx, one sequence per packed row",
}


@dataclass
class ExportConfig:
    format: Literal["parquet", "megatron"] = opt("parquet", "output format: parquet or megatron")
    rows_per_shard: int = opt(0, "Parquet rows per file; 0 = as many as fit in --shard-mb")
    shard_mb: float = opt(256.0, "Parquet file size target in MiB before compression (with rows_per_shard 0)")
    val_fraction: float = opt(
        0.0, "hold out this fraction of the sequences as a validation split (0 = train only)"
    )
    split_seed: int = opt(
        0,
        "seed of the held-out sequences (as the trainer's data.split_seed); a pack holding documents "
        "out orders their validation windows by the split_seed it was packed with",
    )
    keep_short_rows: bool = opt(False, "also export the short last row of each shard (Parquet only)")
    batch_rows: int = opt(256, "rows built and written at a time (memory: about batch_rows x row bytes)")


@dataclass
class ExportReport:
    out: Path
    record: dict  # the export.json written
    seconds: float


def _export_inputs(call: dict) -> list:
    """The packed store an export reads and the token store behind it."""
    packed = call["packed"]
    path = packed.path if isinstance(packed, PackedStore) else Path(packed)
    pk = (
        packed
        if isinstance(packed, PackedStore)
        else (_open_packed(path, call.get("store")) if (path / "meta.json").is_file() else None)
    )
    return [path, pk.store.path if pk is not None else None]


@holds_output_lock("export", inputs=_export_inputs)
def export(
    packed: str | Path | PackedStore,
    out: str | Path,
    config: ExportConfig | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    verify: bool = True,
    store: str | Path | None = None,
) -> ExportReport:
    """Write the rows of ``packed`` to ``out`` in ``config.format``; see the module docstring.
    ``verify``: first check that the token store's tokens still have its content hash
    (``TokenStore.check_content``, as ``pack`` and ``train`` do). ``store``: the token store the
    packed store was packed from, when it moved (``--store``; checked by its content hash)."""
    cfg = config or ExportConfig()
    _check_config(cfg)
    out = Path(out)
    pk = packed if isinstance(packed, PackedStore) else _open_packed(Path(packed), store)
    _check_out(pk, out, overwrite)
    if verify:  # opening compared meta.json's hash only; a token changed in place is caught here
        pk.store.check_content()
    _note_no_boundaries(pk, cfg)
    t0 = time.perf_counter()
    splits = _split_ids(pk, cfg)
    partial = partial_dir(out)
    if partial.exists():
        shutil.rmtree(partial)  # an earlier export killed midway: start again
    partial.mkdir(parents=True)
    written = _write_splits(pk, cfg, splits, partial, progress)
    record = _record(pk, cfg, written, "validation" in splits)
    atomic_write_json(partial / "export.json", record)
    replace_dir(partial, out, overwrite=overwrite, kind=EXPORT)
    return ExportReport(out, record, time.perf_counter() - t0)


def _check_config(cfg: ExportConfig) -> None:
    if cfg.format not in FORMATS:
        raise UserError(f"unknown export format {cfg.format!r}; use one of: {', '.join(FORMATS)}")
    if cfg.format == "megatron" and cfg.keep_short_rows:
        raise UserError(
            "--keep-short-rows is for --format parquet: Megatron's sampler cuts samples of one fixed "
            "length, so a short row would shift every later one; leave it out"
        )
    defaults = ExportConfig()
    for flag, key in (("--rows-per-shard", "rows_per_shard"), ("--shard-mb", "shard_mb")):
        if cfg.format == "megatron" and getattr(cfg, key) != getattr(defaults, key):
            raise UserError(
                f"{flag} sizes the Parquet files: a Megatron export is one .bin/.idx pair per split; leave "
                "it out"
            )
    if not 0.0 <= cfg.val_fraction < 1.0:
        raise UserError(f"--val-fraction must be in [0, 1), got {cfg.val_fraction}")
    if cfg.rows_per_shard < 0 or cfg.shard_mb <= 0 or cfg.batch_rows < 1:
        raise UserError(
            "--rows-per-shard must be >= 0, --shard-mb > 0 and --batch-rows >= 1 "
            f"(got {cfg.rows_per_shard}, {cfg.shard_mb}, {cfg.batch_rows})"
        )


def _note_no_boundaries(pk: PackedStore, cfg: ExportConfig) -> None:
    """One line when a Megatron export will not show where documents end: Megatron finds them by the
    end-of-text token (``--reset-position-ids --reset-attention-mask``), which rows packed with
    ``--separator none`` do not hold; Parquet carries them in its position_ids and document_ids."""
    if cfg.format == "megatron" and pk.separator_id is None:
        print(
            f"note: {pk.path} was packed with --separator none, so its rows hold no end-of-text token and "
            "Megatron cannot see where documents end (eod_id is null); export --format parquet "
            "(position_ids and document_ids mark them) or pack with --separator eot",
            file=sys.stderr,
        )


def _open_packed(path: Path, store: str | Path | None = None) -> PackedStore:
    if not (path / "meta.json").exists() and partial_dir(path).exists():
        raise UserError(
            f"the pack writing {path} is unfinished ({partial_dir(path).name} exists); "
            "run the same `contextlab data pack` command again to finish it, then export"
        )
    return PackedStore(path, store=TokenStore(store) if store else None)


def is_data_export(path: Path) -> bool:
    """Whether ``path`` holds an export of a packed store (its export.json); what --overwrite replaces."""
    try:
        return json.loads((Path(path) / "export.json").read_text()).get("format") == EXPORT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


EXPORT = OutputKind(  # what --overwrite of a data export may replace
    "an export of a packed store",
    is_data_export,
    ("export.json", "*.parquet", "*.bin", "*.idx", "report.html"),
)


def _check_out(pk: PackedStore, out: Path, overwrite: bool) -> None:
    refuse_foreign(out, EXPORT)  # --overwrite replaces an export only, and nothing put into one
    if out.exists() and not overwrite:
        raise UserError(f"{out} already exists; choose another --out or pass --overwrite")


Splits = dict[str, tuple[Batches, np.ndarray]]  # split -> (how its rows are built, their ids)


def _split_ids(pk: PackedStore, cfg: ExportConfig) -> Splits:
    """Row ids per split, in packed order (the trainer's split for the same fraction and seed); the
    validation windows over a pack's held-out documents (``heldout_windows``)."""
    rows = partial(row_batches, pk)
    held = pk.meta.get("heldout")
    if held and cfg.val_fraction:  # every sequence is a training row: a share of them is training text
        raise UserError(
            f"{pk.path} holds {held['documents']:,} document{'s' * (held['documents'] != 1)} out of its "
            "sequences for validation (its heldout.npy), so every sequence is a training row and those "
            "documents are exported as the validation split; leave --val-fraction out, or pack with "
            "--val-fraction 0 to hold out a share of the sequences instead"
        )
    if held:
        if cfg.split_seed not in (0, held["split_seed"]):
            print(
                f"note: --split-seed draws a split of sequences; the validation windows of {pk.path} "
                f"follow the split_seed it was packed with ({held['split_seed']})",
                file=sys.stderr,
            )
        windows = heldout_windows(pk)
        if windows.n_rows == 0:
            print(
                f"note: {pk.path} holds out {held['documents']:,} document{'s' * (held['documents'] != 1)} "
                f"for validation ({held['tokens']:,} tokens), too few for one window of {pk.row_len:,} "
                "tokens, so the export has no validation split; pack with a larger --val-fraction",
                file=sys.stderr,
            )
            return {"train": (rows, row_ids(pk, cfg.keep_short_rows))}
        val = (partial(window_batches, windows), np.arange(windows.n_rows))
        return {"train": (rows, row_ids(pk, cfg.keep_short_rows)), "validation": val}
    if cfg.val_fraction == 0:
        return {"train": (rows, row_ids(pk, cfg.keep_short_rows))}
    train, val = packed_split(pk, cfg.val_fraction, cfg.split_seed)
    return {
        "train": (rows, row_ids(pk, cfg.keep_short_rows, train)),
        "validation": (rows, row_ids(pk, cfg.keep_short_rows, val)),
    }


def heldout_windows(pk: PackedStore) -> WindowRows:
    """The validation rows of a run on ``pk`` (packed holding documents out): windows of ``context + 1``
    tokens over the held-out documents laid end to end in the order of the pack's split_seed, each
    followed by the pack's separator (none with ``--separator none``; the rows of ``data.mode`` packed)."""
    view = DocView(pk.store, pk.heldout_documents())
    sep = pk.separator_id
    return WindowRows(view, pk.context, separator=sep, seed=int(pk.meta["heldout"]["split_seed"]))


def _write_splits(
    pk: PackedStore, cfg: ExportConfig, splits: Splits, folder: Path, progress: bool
) -> dict[str, dict]:
    """Every split written by the shard engine, a split per shard, in this process (the splits share
    the open packed store); no done markers: a killed export starts over (module docstring)."""
    written: dict[str, dict] = {}
    jobs = [(pk, cfg, split, rows, ids, folder) for split, (rows, ids) in splits.items()]
    total = sum(len(ids) for _, ids in splits.values())
    report = lambda stats, bar: written.update({stats["split"]: stats["written"]})
    desc = f"export {cfg.format}"
    LocalExecutor(1).run(
        _write_split, jobs, total, report, progress=progress, desc=desc, unit="row", leave=True
    )
    return written


def _write_split(
    pk: PackedStore, cfg: ExportConfig, split: str, rows: Batches, ids: np.ndarray, folder: Path, count
) -> dict:
    """One split's files (a shard function: ``count(n)``, n more rows written); its record."""
    if cfg.format == "parquet":
        per = cfg.rows_per_shard or rows_per_shard_for(pk.row_len, cfg.shard_mb)
        files = write_parquet_split(rows, ids, folder, split, per, cfg.batch_rows, count)
        done = {"rows": int(len(ids)), "files": files}
    else:
        dtype = megatron_dtype(pk.store.vocab_size)
        info = write_megatron_split(rows, ids, folder / split, dtype, cfg.batch_rows, count)
        done = {**info, "dtype": dtype.name}
    done["tokens"] = sum(f["tokens"] for f in done.get("files", [done]))
    return {"split": split, "written": done}


def _record(pk: PackedStore, cfg: ExportConfig, written: dict[str, dict], has_validation: bool) -> dict:
    meta, lengths = pk.meta, row_lengths(pk)
    validation = None  # what the validation split holds: the pack's held-out documents, or sequences
    if has_validation and meta.get("heldout"):
        validation = {"from": "heldout documents", **meta["heldout"]}
    elif has_validation:
        validation = {"from": "sequences", "val_fraction": cfg.val_fraction, "split_seed": cfg.split_seed}
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "code_version": __version__,
        "export_format": cfg.format,
        "config": asdict(cfg),
        "source": {
            "path": str(pk.path.resolve()),
            "fingerprint": meta.get("fingerprint"),
            "method": meta["config"].get("method"),
            "n_sequences": pk.n_sequences,
        },
        "tokenizer": meta["store"].get("tokenizer"),
        "tokenizer_hash": meta["store"].get("tokenizer_hash"),
        "vocab_size": int(pk.store.vocab_size),
        "eod_id": pk.separator_id,
        "context": pk.context,
        "row_len": pk.row_len,
        "document_ids": "global document index of the token store",
        "short_rows_left_out": 0 if cfg.keep_short_rows else int((lengths < pk.row_len).sum()),
        "short_row_tokens_left_out": 0 if cfg.keep_short_rows else int(lengths[lengths < pk.row_len].sum()),
        "packed_tokens": int(lengths.sum()),
        "validation": validation,
        "splits": written,
    }
