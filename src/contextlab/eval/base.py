"""What every evaluation shares: its output, running it end to end, and small helpers.

An evaluation is a plain function ``run(adapter, options, data) -> EvalOutput`` (listed
in ``contextlab.eval.EVALS``, its options dataclass in ``OPTIONS``). ``evaluate`` runs one,
writes ``<out>/<name>.json`` through ``results.write_result`` and draws its plot. The
function itself never writes files, so tests call it directly and compare numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contextlab.errors import UserError


@dataclass
class EvalOutput:
    results: dict  # headline metrics first ("summary"), then the detail
    data: dict  # what was evaluated: path, hash, counts
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # saved as .npy beside the JSON
    plot: Callable[[Path], Path] | None = None  # draws the PNG at the given path


def evaluate(
    name: str, adapter, options: Any, data: str | None, out_dir: str | Path
) -> tuple[Path, EvalOutput]:
    """Run eval ``name`` and write OUT/name.json (+ OUT/name.png); returns (json path, output)."""
    from contextlab.eval import EVALS
    from contextlab.eval.results import write_result

    if name not in EVALS:
        raise UserError(f"unknown evaluation {name!r}; choose one of: {', '.join(EVALS)}")
    t0 = time.perf_counter()
    out = EVALS[name](adapter, options, data)
    seconds = time.perf_counter() - t0
    model = {**vars(adapter.info), "dtype": adapter.dtype, "batch_size": adapter.batch_size}
    path = write_result(
        out_dir,
        name,
        results=out.results,
        options=options,
        model=model,
        data=out.data,
        seconds=seconds,
        arrays=out.arrays,
    )
    if out.plot is not None:
        out.plot(Path(out_dir) / f"{name}.png")
    return path, out


def open_store(data: str | None, adapter, what: str):
    """The token store at ``data``, checked against the model's tokenizer."""
    from contextlab.data.store import TokenStore

    if not data:
        raise UserError(
            f"{what} needs a token store: pass --data STORE (made with `contextlab data ingest "
            f"SOURCE --tokenizer <the model's tokenizer> --out STORE`)"
        )
    store = TokenStore(data)
    store.check_tokenizer(adapter.tokenizer.spec(), f"the model {adapter.info.id}")
    return store


def require_file(data: str | None, what: str, example: str) -> Path:
    if not data:
        raise UserError(f"{what} needs its data file: pass --data {example}")
    p = Path(data)
    if not p.exists():
        raise UserError(f"{p} does not exist; pass --data {example}")
    return p


def accuracy_ci(correct: list[bool] | np.ndarray) -> dict:
    """Accuracy with its standard error and a normal 95% interval."""
    c = np.asarray(correct, dtype=float)
    n = len(c)
    acc = float(c.mean()) if n else float("nan")
    se = float(np.sqrt(acc * (1 - acc) / n)) if n else float("nan")
    return {"accuracy": acc, "n": n, "stderr": se, "ci95": [acc - 1.96 * se, acc + 1.96 * se]}


def filler_ids(adapter, text: str, n: int) -> list[int]:
    """n tokens of ``text`` repeated (a deterministic filler of exactly n ids)."""
    unit = adapter.encode(text)
    if not unit:
        raise UserError("the filler text encodes to no tokens; give a longer filler")
    reps = -(-n // len(unit))
    return (unit * reps)[:n]
