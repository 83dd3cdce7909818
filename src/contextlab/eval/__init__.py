"""Evaluations: how well a model uses its context, on contextlab runs and any local HF causal LM.

Each evaluation is a plain function ``run(adapter, options, data) -> EvalOutput`` in its own
module. ``EVALS`` holds one record per evaluation (``base.Eval``): that function, its typed
options dataclass, the line of help the command line shows, what ``--data`` it reads and its
default data; ``contextlab eval`` and the quickstart read everything from it. ``load_model``
(``adapter.py``) turns a run directory or a Hugging Face folder into the adapter every
evaluation uses, and ``evaluate`` runs one and writes ``<out>/<name>.json`` plus its plot.

Trade-off: the registry and ``evaluate`` live here and nothing in the package imports the
package back (the evaluation modules import each other by module path), so the registry is
a plain dict with no import circle. This package imports ``contextlab.models`` and
``contextlab.data`` only, never the trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextlab.errors import UserError
from contextlab.eval import (
    bayes_fit,
    contextwise,
    icl,
    infill,
    kv,
    mqar,
    needle,
    passkey,
    ppl,
    vartrack,
    visible,
)
from contextlab.eval.adapter import ModelAdapter, load_model
from contextlab.eval.base import KV_DATA, PG_ESSAYS, TREC_DATA, Eval, EvalOutput

STORE = "a token store made with the model's tokenizer"


def _books() -> str:
    from contextlab.corpus import books_dir

    return str(books_dir())


EVALS: dict[str, Eval] = {
    "ppl": Eval(ppl.run, ppl.Options, "perplexity and bits per byte, rolling windows with a stride", STORE),
    "contextwise": Eval(
        contextwise.run,
        contextwise.Options,
        "loss by position, best-context loss, 2^i buckets",
        STORE + " (long documents)",
    ),
    "bayes-fit": Eval(
        bayes_fit.run,
        bayes_fit.Options,
        "last-token loss vs visible context, fitted C0 + C / l^gamma",
        STORE,
    ),
    "niah": Eval(
        needle.run,
        needle.Options,
        "needle in a haystack, lengths x depths",
        "the haystack: a folder of text files (read as data ingest reads one) or one file (default: "
        "the public-domain books shipped with contextlab; " + PG_ESSAYS + ")",
        default_data=_books,
    ),
    "kv": Eval(
        kv.run,
        kv.Options,
        "lost-in-the-middle key-value retrieval, accuracy by gold position",
        "a lost-in-the-middle key-value file, e.g. " + KV_DATA + " (default: examples of 300 random UUID "
        "pairs in that format, made in memory from seed 0)",
        check_data=kv.check_data,
        makes_data=True,
    ),
    "mqar": Eval(
        mqar.run,
        mqar.Options,
        "associative recall (MQAR) by pairs and distance",
        "an MQAR store",
        check_data=mqar.check_data,
    ),
    "passkey": Eval(
        passkey.run,
        passkey.Options,
        "passkey retrieval in filler text",
        "not used (the filler is built in)",
        reads_data=False,
    ),
    "vartrack": Eval(
        vartrack.run,
        vartrack.Options,
        "RULER-like variable tracking",
        "not used (the filler is built in)",
        reads_data=False,
    ),
    "icl": Eval(
        icl.run,
        icl.Options,
        "TREC many-shot in-context classification",
        "the TREC folder with train.txt and test.txt: " + TREC_DATA,
        check_data=icl.check_data,
    ),
    "infill": Eval(
        infill.run,
        infill.Options,
        "code infilling (FIM PSM/SPM and left to right): exact match, true-middle likelihood, l2r loss",
        STORE + " (default --split run: the files the run held out) or a folder of code files",
    ),
    "visible": Eval(
        visible.run,
        visible.Options,
        "any of the above vs visible context",
        "the data of the swept task: a token store for task loss, the TREC folder for icl; for niah a "
        "haystack (default: the books shipped with contextlab), for kv a key-value file (default: random "
        "pairs made in memory); passkey and vartrack read none",
        makes_data=True,
    ),
}


def evaluate(
    name: str, adapter: ModelAdapter, options: Any, data: str | None, out_dir: str | Path
) -> tuple[Path, EvalOutput]:
    """Run eval ``name`` and write OUT/name.json (+ OUT/name.png); returns (json path, output).
    Without ``data`` the evaluation's default data is used, when it has one."""
    from contextlab.eval.results import model_record, run_and_record

    if name not in EVALS:
        raise UserError(f"unknown evaluation {name!r}; choose one of: {', '.join(EVALS)}")
    spec = EVALS[name]
    if spec.needs_lm:
        adapter.require_lm(f"eval {name}")
    if not data and spec.default_data is not None:
        data = spec.default_data()
    if data and Path(data).exists():
        data = str(Path(data).resolve())  # results record where the data is from anywhere, not from here
    path, out, _ = run_and_record(
        out_dir, name, lambda: spec.run(adapter, options, data), options=options, model=model_record(adapter)
    )
    if out.plot is not None:
        from contextlab.eval.results import note_written

        drawn = out.plot(Path(out_dir) / f"{name}.png")
        note_written(out_dir, name, *([drawn] if drawn else []))  # a rerun may replace it
    return path, out


__all__ = ["EVALS", "Eval", "EvalOutput", "ModelAdapter", "evaluate", "load_model"]
