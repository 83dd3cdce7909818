"""What every evaluation shares: its registry record, its output, and small helpers.

An evaluation is a plain function ``run(adapter, options, data) -> EvalOutput``, listed with
its options dataclass, help and data in an ``Eval`` record of ``contextlab.eval.EVALS``;
``contextlab.eval.evaluate`` runs one and writes its files. The function itself never writes
files, so tests call it directly and compare numbers. Trade-off: a frozen record per
evaluation rather than parallel dicts, so adding one is one entry in one place.
"""

from __future__ import annotations

import shlex
import sys
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
    makes_data: bool = False  # with no --data it makes its own (kv: random pairs), so --data is optional
    reads_data: bool = True  # False: it builds its own text (passkey, vartrack); a --data given is refused


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


_TRAINING_STORE_NOTED: set[tuple[str, str]] = set()  # (run, store hash) already said to be its training store


def open_store(data: str | None, adapter, what: str, kinds: tuple[str, ...] = (), split: str | None = None):
    """The token store at ``data``, checked against the model's tokenizer and its own content (hash
    and ids, one read remembered while unchanged: ``TokenStore.check_content``), so a corrupt store
    is one line, not an index error inside the model. A synthetic store (parity, mqar) is refused
    unless its kind is in ``kinds``: averaged over every token (task ids, random bits, keys) its
    loss measures nothing, and one line names the command that measures its task. Read on the store
    the model trained on, a note says so once, unless ``split`` is "run" (only what the run held out:
    ``contextlab.eval.heldout``; the note offers it where the evaluation has ``--split``, i.e. ``split``
    is not None)."""
    from contextlab.data.store import TokenStore
    from contextlab.data.tokenizers import check_same_tokenizer

    if not data:
        raise UserError(
            f"{what} needs a token store: pass --data STORE (made with `contextlab data ingest "
            f"SOURCE --tokenizer {tokenizer_arg(adapter)} --out STORE`)"
        )
    path = Path(trained_store(data, adapter.info.path))
    if (path.is_file() or path.is_dir()) and not (path / "meta.json").is_file() and _text_like(path):
        raise UserError(
            f"--data {data} is text, and {what} reads a token store: ingest it with the model's tokenizer "
            f"(contextlab data ingest {shlex.quote(str(data))} --tokenizer {tokenizer_arg(adapter)} --out "
            "STORE) and pass STORE, or run `contextlab profile`, which takes text"
        )
    store = TokenStore(path)
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
    store.check_content(skip=None)  # evaluations read only checked stores
    for line in (
        training_store_note(store, adapter.info.path, what, split),
        line_end_note(store, adapter.info.path),
    ):
        if line is not None:
            print(line, file=sys.stderr)
    return store


def training_store_note(store, model: str, what: str, split: str | None) -> str | None:
    """A note, once per model and store in a process (a profile reads it often), when ``store`` is the
    one the run trained on and ``split`` is not "run": what is read there the model saw in training."""
    from contextlab.rundir import run_of, trained_on

    noted = (str(run_of(model)), store.hash)
    if split == "run" or noted in _TRAINING_STORE_NOTED or not trained_on(model, store.hash):
        return None
    _TRAINING_STORE_NOTED.add(noted)
    return (
        f"note: {store.path} is the token store {noted[0]} trained on: what {what} "
        "reads there are mostly documents the model saw in training; a store of text it never saw "
        "(ingested with the same --tokenizer)"
        + (", or --split run (what the run held out)," if split else "")
        + " measures what it learned, not what it saw"
    )


_LINE_ENDS_NOTED: set[tuple[str, str]] = set()  # (run, store hash) whose line ends were compared
_CR_SHARES: dict[str, float] = {}  # store content hash -> the share of its tokens holding a carriage return


def line_end_note(store, model: str) -> str | None:
    """A note, once per model and store, when the store's text has other line ends than the run's
    training store (CRLF against LF: a model trained on Gutenberg's CRLF books read the same books
    with LF at +0.67 nats, in silence); None when they agree, or the training store is not found."""
    from contextlab.data.stats import CR_SHARE, carriage_return_share
    from contextlab.data.store import TokenStore
    from contextlab.rundir import data_record, is_run, read_config, run_of, training_stores

    run = run_of(model)
    key = (str(run), store.hash)
    if key in _LINE_ENDS_NOTED or not is_run(run):
        return None
    _LINE_ENDS_NOTED.add(key)
    cwd = (data_record(run) or {}).get("cwd")
    trained = next((t for t in training_stores(read_config(run), cwd) if (t / "meta.json").is_file()), None)
    try:
        trained = TokenStore(trained) if trained is not None else None
    except UserError:
        return None
    if trained is None or trained.hash == store.hash:
        return None
    for s in (trained, store):  # a profile reads several stores against one training store: once each
        if s.hash not in _CR_SHARES:
            _CR_SHARES[s.hash] = carriage_return_share(s)
    a, b = _CR_SHARES[trained.hash], _CR_SHARES[store.hash]
    if (a >= CR_SHARE) == (b >= CR_SHARE):
        return None
    ends = lambda share: (
        f"CRLF line ends ({share:.1%} of its tokens hold carriage returns)"
        if share >= CR_SHARE
        else "LF line ends"
    )
    return (
        f"note: {run} trained on text with {ends(a)} and {store.path} has {ends(b)}: the loss here is "
        "partly of line ends the model never saw; ingest the text with the line ends it trained on "
        "(e.g. dos2unix or unix2dos on the files) to measure the model, not the line ends"
    )


def trained_store(data: str, model: str) -> str:
    """``--data`` as given; or, for a relative path that does not resolve here, the same path in the
    directory the run ``model`` was trained in, when the run's checkpoint records a store of that
    content (a note says so). A path the run's config names as its data.store or data.val_store
    found nowhere is one line naming that directory and how to pass the store as --data."""
    from contextlab.data.store_meta import content_id
    from contextlab.rundir import data_record, is_run, read_config, run_of, trained_in

    run = run_of(model)
    if not data or Path(data).is_absolute() or Path(data).exists() or not is_run(run):
        return data
    record = data_record(model) or {}
    contents = {v.get("content") for v in (record.get("paths") or {}).values() if isinstance(v, dict)}
    folder = trained_in(run)
    there = folder / data if folder is not None else None
    if there is not None and content_id(there) in contents - {None}:
        print(
            f"note: --data {data} is not in {Path.cwd()}; reading {there}, the store the run trained on "
            f"(relative to {folder}, where it was trained)",
            file=sys.stderr,
        )
        return str(there)
    config = read_config(run).get("data") or {}
    key = next((k for k in ("store", "val_store") if config.get(k) == data), None)
    if key is None:
        return data  # not a path of the run: the store's own message says it is missing
    where = (
        f"{folder}, where the run was trained" if folder is not None else "the directory it was trained in"
    )
    held, given = "", "STORE"
    if there is not None and (there / "meta.json").is_file():
        held = f"; {there} holds other content" if contents - {None} else f"; it is {there}"
        given = "STORE" if contents - {None} else shlex.quote(str(there))
    elif there is not None:
        held = f"; it is not at {there} either"
    raise UserError(
        f"store not found: {data}: the run {run} names its data.{key} relative to {where}{held}; "
        f"pass the store as --data {given}"
    )


def _text_like(path: Path) -> bool:
    """A file, or a folder with a file in it but no run or store of contextlab's: text --data, not a
    store (a run folder, a partial store and the like keep their own lines from ``TokenStore``)."""
    from contextlab.rundir import is_run

    if path.is_file():
        return True
    if path.name.endswith(".partial") or is_run(path):
        return False
    return any(f.is_file() for f in path.iterdir())


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


# where the public data sets of the evaluations come from (none ships with contextlab), for messages
PG_ESSAYS = (
    "Paul Graham's essays, the original test's haystack (github.com/gkamradt/LLMTest_NeedleInAHaystack)"
)
TREC_DATA = "the TREC question classification data (cogcomp.seas.upenn.edu/Data/QA/QC)"
KV_DATA = (
    "kv-retrieval-75_keys.jsonl.gz of github.com/nelson-liu/lost-in-the-middle (qa_data/kv_retrieval_data)"
)


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


def text_options(include: list[str], exclude: list[str], encoding: str):
    """How an evaluation reads a folder (or file) of text as ``data ingest`` reads one: the same
    hidden, binary, linked and duplicate files left out, ``encoding`` for bytes that are not UTF-8;
    no Gutenberg stripping and no streaming of long files (each file is one text)."""
    from contextlab.data.sources import SourceOptions

    return SourceOptions(
        include=include,
        exclude=exclude,
        strip_gutenberg="no",
        encoding=encoding,  # type: ignore[arg-type]  (SourceOptions checks it)
        long_doc_mb=float("inf"),
    )


def read_text_files(path: Path, options, stop: str) -> tuple[list, object, dict]:
    """(the documents of ``path`` read with ``options``, their ``Source``, the counts of bytes and files
    not UTF-8). Under strict encoding every undecodable file is named first, in one line ending with
    ``stop`` (what to pass instead)."""
    from contextlab.data.sources import open_source

    src = open_source(path, options)
    src.check_encoding(stop)
    docs = list(src)
    counts = {k: v for k, v in src.stats.as_dict().items() if k.startswith(("undecodable", "latin1")) and v}
    return docs, src, counts
