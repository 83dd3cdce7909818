"""What every evaluation shares: its registry record, its output, and small helpers.

An evaluation is a plain function ``run(adapter, options, data) -> EvalOutput``, listed with
its options dataclass, help and data in an ``Eval`` record of ``contextlab.eval.EVALS``;
``contextlab.eval.evaluate`` runs one and writes its files. The function itself never writes
files, so tests call it directly and compare numbers. Trade-off: a frozen record per
evaluation rather than parallel dicts, so adding one is one entry in one place.
"""

from __future__ import annotations

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


@dataclass
class EvalOutput:
    results: dict  # headline metrics first ("summary"), then the detail
    data: dict  # what was evaluated: path, hash, counts
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # saved as .npy beside the JSON
    plot: Callable[[Path], Path] | None = None  # draws the PNG at the given path


def open_store(data: str | None, adapter, what: str):
    """The token store at ``data``, checked against the model's tokenizer and its own content (hash
    and ids, one read remembered while unchanged: ``TokenStore.check_content``), so a corrupt store
    is one line, not an index error inside the model."""
    from contextlab.data.store import TokenStore

    if not data:
        raise UserError(
            f"{what} needs a token store: pass --data STORE (made with `contextlab data ingest "
            f"SOURCE --tokenizer <the model's tokenizer> --out STORE`)"
        )
    store = TokenStore(data)
    store.check_tokenizer(adapter.tokenizer.spec(), f"the model {adapter.info.id}")
    store.check_content()
    return store


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
