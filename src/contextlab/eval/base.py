"""What every evaluation shares: its registry record, its output, and small helpers.

An evaluation is a plain function ``run(adapter, options, data) -> EvalOutput``, listed with
its options dataclass, help and data in an ``Eval`` record of ``contextlab.eval.EVALS``;
``contextlab.eval.evaluate`` runs one and writes its files. The function itself never writes
files, so tests call it directly and compare numbers. Trade-off: a frozen record per
evaluation rather than parallel dicts, so adding one is one entry in one place.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from contextlab.errors import UserError


@dataclass(frozen=True)
class Eval:
    """One evaluation of the registry (``contextlab.eval.EVALS``): everything known about it."""

    run: Callable[..., EvalOutput]  # run(adapter, options, data) -> EvalOutput
    options: type  # its typed options dataclass (each field becomes a --flag)
    help: str  # one line: what it measures
    data: str  # what --data it reads
    default_data: Callable[[], str] | None = None  # the data used when none is given
    needs_lm: bool = True  # it scores the model as a left-to-right LM (refused for models that are not)
    check_data: Callable[[str], None] | None = None  # one line for unusable --data, before any model loads


@dataclass
class EvalOutput:
    results: dict  # headline metrics first ("summary"), then the detail
    data: dict  # what was evaluated: path, hash, counts
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # saved as .npy beside the JSON
    plot: Callable[[Path], Path] | None = None  # draws the PNG at the given path


SYNTHETIC_USE = {  # what measures a synthetic store's task, for the line refusing other readings
    "parity": "analyze entropy, which scores each sample's answer against the exact Bayes risk "
    "(contextlab analyze entropy --model MODEL --data STORE --contexts 4,8,16)",
    "mqar": "eval mqar, which scores each query's recall (contextlab eval mqar --model MODEL --data STORE)",
}


def open_store(data: str | None, adapter, what: str, kinds: tuple[str, ...] = ()):
    """The token store at ``data``, checked against the model's tokenizer and its own content (hash
    and ids, one read remembered while unchanged: ``TokenStore.check_content``), so a corrupt store
    is one line, not an index error inside the model. A synthetic store (parity, mqar) is refused
    unless its kind is in ``kinds``: averaged over every token (task ids, random bits, keys) its
    loss measures nothing, and one line names the command that measures its task."""
    from contextlab.data.store import TokenStore
    from contextlab.data.tokenizers import check_same_tokenizer

    if not data:
        raise UserError(
            f"{what} needs a token store: pass --data STORE (made with `contextlab data ingest "
            f"SOURCE --tokenizer {tokenizer_arg(adapter)} --out STORE`)"
        )
    store = TokenStore(data)
    synthetic = next((k for k in ("mqar", "parity") if store.meta.get(k)), None)
    fix = (
        f"it is a synthetic {synthetic} store in its own vocabulary, which no ingest can make for this "
        "model: evaluate a model trained on such a store, or give a store of text ingested with the model's "
        "tokenizer"
        if synthetic
        else "ingest the data again with the model's tokenizer (contextlab data ingest SOURCE --tokenizer "
        f"{tokenizer_arg(adapter)} --out STORE)"
    )
    check_same_tokenizer(
        adapter.tokenizer.spec(),
        store.tokenizer_spec,
        f"the model {adapter.info.id}",
        f"the data store {store.path}",
        fix=fix,
    )
    if synthetic and synthetic not in kinds:
        raise UserError(
            f"{store.path} is a synthetic {synthetic} store: {what} over its tokens (task ids, random "
            f"symbols, one answer) measures nothing; its task is measured by {SYNTHETIC_USE[synthetic]}"
        )
    store.check_content()
    return store


def tokenizer_arg(adapter) -> str:
    """The ``--tokenizer`` spec of the model's own tokenizer, shell-quoted for a command line to copy:
    ``hf:FOLDER`` for a Hugging Face folder, ``dir:FOLDER`` for the saved tokenizer of a contextlab
    run, checkpoint or export."""
    from contextlab.inference.tokenizer import hf_tokenizer_file
    from contextlab.rundir import TOKENIZER, TOKENIZER_SPEC, find_tokenizer_dir, is_hf_folder

    path = Path(adapter.info.path)
    if adapter.info.path == "-" or not path.exists():  # a model built in this process
        return "<the model's tokenizer>"
    tok_file = hf_tokenizer_file(path) if is_hf_folder(path) else None
    if tok_file is not None and not (path / TOKENIZER / TOKENIZER_SPEC).is_file():  # not a contextlab export
        return shlex.quote(f"hf:{path if tok_file == path / 'tokenizer.json' else tok_file}")
    try:
        saved = find_tokenizer_dir(path, adapter.tokenizer.spec())
    except UserError:  # a damaged config.toml: the hint falls back to the form
        saved = None
    return shlex.quote(f"dir:{saved}") if saved is not None else "dir:<the model's saved tokenizer folder>"


def require_file(data: str | None, what: str, example: str) -> Path:
    if not data:
        raise UserError(f"{what} needs its data file: pass --data {example}")
    p = Path(data)
    if not p.exists():
        raise UserError(f"{p} does not exist; pass --data {example}")
    return p


def filler_ids(adapter, text: str, n: int) -> list[int]:
    """n tokens of ``text`` repeated (a deterministic filler of exactly n ids)."""
    unit = adapter.encode(text)
    if not unit:
        raise UserError("the filler text encodes to no tokens; give a longer filler")
    reps = -(-n // len(unit))
    return (unit * reps)[:n]
