"""Run a profile: open the models, prepare the data, run the battery, pair, summarise, report.

``OUT/profile.json`` (``format = contextlab-profile``) is the profile's manifest: the command,
the models, the data, the budget, the context measured, and one record per step (status
``done``, ``failed`` with its error line, ``skipped`` with the reason, or ``pending``), written
atomically after every step. Rerunning the same command on the same ``OUT`` skips every step
whose record says done and whose result file is there, so a killed profile loses at most the
step it was in; a profile of other models, data or budget in that folder is refused, never
mixed in. A step that fails (a model that cannot take a task) is recorded and the battery
goes on: one bad measure does not cost the others.

Layout: ``OUT/models/<label>/<eval>.json`` (+ plots, arrays): ordinary result files;
``OUT/data/``: the token store ingested from text ``--data`` (per tokenizer) and the
key-value file written for the context; ``OUT/compare/``: ``contextlab compare`` of the two
models, one evaluation at a time (a pairing that is refused is a note, not a failure);
``OUT/report.html``: ``contextlab report OUT``.

Trade-off: models are opened once and kept for the whole battery (one load, minutes saved
for large HF models) at the cost of holding both in memory with ``--compare``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from contextlab.data.source_files import EXCLUDED, prose_excludes, walk
from contextlab.data.sources import SourceOptions
from contextlab.errors import UserError, memory_error_line, some
from contextlab.eval import progress
from contextlab.eval.tasks import LONG_CONTEXT  # past it, the opening line says --context measures shorter
from contextlab.io import atomic_write_json
from contextlab.profile.plan import KV_ANSWER_ROOM, MIN_CONTEXT, Budget, Rates, Step, build

PROFILE_FORMAT = "contextlab-profile"
PROBE_SHORT, PROBE_LONG = 512, 4096  # tokens per row of the forward passes timed for the estimate
LONG_ESTIMATE = 20 * 60  # past this estimate (seconds), the opening lines name a context that fits
SHORT_ENOUGH = 5 * 60  # ... one whose estimate is at most this

VERSION = 1


@dataclass
class Model:
    label: str  # its folder under OUT/models
    path: str  # as given
    adapter: object  # contextlab.eval.adapter.ModelAdapter


def labels_for(paths: list[str]) -> list[str]:
    """Folder-safe names of the models: folder names (a checkpoint: RUN_step_N), told apart when equal."""

    def name(path: str) -> str:
        p = Path(path).resolve()
        raw = f"{p.parent.parent.name}_{p.name}" if p.parent.name == "checkpoints" else p.name
        return re.sub(r"[^A-Za-z0-9._-]+", "_", raw) or "model"

    names = [name(p) for p in paths]
    if len(names) == 2 and names[0] == names[1]:
        names = [f"a_{names[0]}", f"b_{names[1]}"]
    return names


def default_out(paths: list[str], budget: str) -> Path:
    """``./profile-<model>[-vs-<other>]-<budget>`` in the current directory (never in a model's folder)."""
    return Path.cwd() / ("profile-" + "-vs-".join(labels_for(paths)) + f"-{budget}")


def tokenizer_spec(adapter) -> str:
    """The ``--tokenizer`` spec that tokenizes text as the model does (for ingesting text ``--data``)."""
    from contextlab.data.tokenizers import load_saved_tokenizer
    from contextlab.inference.tokenizer import hf_tokenizer_file
    from contextlab.rundir import TOKENIZER_SPEC, tokenizer_dirs

    info = adapter.info
    if info.kind == "hf":
        f = hf_tokenizer_file(Path(info.path))
        if f is None:
            raise UserError(f"{info.path} has no tokenizer.json; give --data a token store made for it")
        return f"hf:{f}"
    if info.tokenizer.get("kind") == "byte":
        return "byte"
    for d in tokenizer_dirs(info.path):
        if (d / TOKENIZER_SPEC).is_file() and load_saved_tokenizer(d).hash == info.tokenizer.get("hash"):
            return f"dir:{d}"
    raise UserError(f"cannot find the tokenizer of {info.id}; give --data a token store made with it")


def is_store(path: str | Path) -> bool:
    return (Path(path) / "meta.json").is_file()


def prepare_store(
    data: str, adapter, out: Path, progress_on: bool, doc_start: str | None = None, split: str = "all"
) -> str:
    """A token store for ``adapter``: ``data`` itself when it is one (checked: the model's tokenizer, its
    content), else ``data`` (text) ingested
    with the model's tokenizer into OUT/data/store-<tokenizer hash> (kept and reused on resume)."""
    from contextlab.data.ingest import IngestConfig, ingest
    from contextlab.eval.base import open_store

    if is_store(data):  # one line up front for a store of another tokenizer, not failed steps and exit 0
        if doc_start is not None:
            raise UserError(
                f"--doc-start cuts text, and --data {data} is a token store, already cut; leave --doc-start "
                "out, or give the text it was made from"
            )
        open_store(str(data), adapter, "profile", split=split)  # "all": a note if the model trained on it
        return str(data)
    if not Path(data).exists():
        raise UserError(f"--data {data} does not exist; give a token store or a text file or folder")
    target = out / "data" / f"store-{str(adapter.info.tokenizer.get('hash', 'x'))[:12]}"
    if not is_store(target):
        source = dataclasses.replace(prose_source(Path(data)), doc_start=doc_start)
        config = IngestConfig(tokenizer=tokenizer_spec(adapter), source=source)
        ingest(data, target, config, overwrite=False, progress=progress_on, notes=False)
    return str(target)


def prose_source(data: Path) -> SourceOptions:
    """How a text ``--data`` is read: a folder without the files that describe the corpus (README,
    SOURCE, manifest) or hold records (JSONL, CSV), as the needle reads its haystack, so every step
    measures the same text; the files left out are named in one line. (They were ingested whole:
    WikiText's SOURCE.txt became a document of the profile's store.)"""
    if not data.is_dir():
        return SourceOptions()
    options = SourceOptions(exclude=prose_excludes())
    left = [e["path"] for e in walk(data, [], options.exclude)[1] if e["reason"] == EXCLUDED]
    if left:
        print(
            f"  data: {some(left)} left out of {data} (a corpus's own notes or files of records, not "
            "its text); give an ingested store as --data to measure them",
            file=sys.stdout,
        )
    return options


def longest_document(store: str, adapter, split: str = "all", of: str = "") -> int:
    """Tokens of the longest document of a token store (with ``split`` "run", of those the run ``of``
    (default: the model's own) held out: one line when it is not that run's store)."""
    from contextlab.data.store import TokenStore
    from contextlab.eval.heldout import documents

    lengths = documents(TokenStore(store), adapter.info.path, split, of=of)[0].lengths()
    return int(lengths.max()) if len(lengths) else 0


def prepare_kv(out: Path, adapter, budget: Budget, context: int) -> tuple[str, int]:
    """Write OUT/data/kv-Npairs.jsonl.gz (random UUID pairs, the lost-in-the-middle format) with N the
    most pairs for which every prompt of the file (each of its first keys asked) fits ``context`` in
    this model's tokenizer, less room for the answer and a margin for a pair moved to another place
    (UUIDs tokenize to slightly different lengths in different company)."""
    from contextlab.data.kv_synthetic import kv_examples, pairs_that_fit, write_kv_file
    from contextlab.eval.kv import kv_prompt

    def tokens(n: int) -> int:
        if not n:
            return 0
        return max(
            len(adapter.encode(kv_prompt([tuple(r) for r in e["ordered_kv_records"]], k)))
            for e in kv_examples(budget.kv_examples, n, seed=0)
            for k, _ in e["ordered_kv_records"][:3]
        )

    n = pairs_that_fit(tokens, context - KV_ANSWER_ROOM - context // 32)
    path = out / "data" / f"kv-{n}pairs.jsonl.gz"
    if n >= 2 and not path.is_file():
        write_kv_file(path, budget.kv_examples, n, seed=0)
    return str(path), n


def _shown(v) -> str:
    """A manifest setting in a message: numbers with thousands separators, models by label and path."""
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, list) and all(isinstance(m, dict) for m in v):
        return ", ".join(str(m.get("path")) for m in v)
    return str(v)


class Manifest:
    """OUT/profile.json: read, checked against this profile's settings, updated after every step."""

    def __init__(self, out: Path, doc: dict):
        self.out, self.doc = out, doc

    @classmethod
    def open(cls, out: Path, settings: dict) -> Manifest:
        f = out / "profile.json"
        if f.is_file():
            old = json.loads(f.read_text())
            mine = {k: old.get(k) for k in settings}
            if old.get("format") != PROFILE_FORMAT or mine != settings:
                differ = [
                    f"{k} {_shown(old.get(k))} there, {_shown(settings[k])} now"
                    for k in settings
                    if old.get(k) != settings[k]
                ]
                raise UserError(
                    f"{out} holds a profile of other settings ({'; '.join(differ) or 'another format'}); "
                    "give another --out, or remove that folder to start over"
                )
            return cls(out, old)
        if out.exists() and any(out.iterdir()):
            raise UserError(f"{out} exists and holds no profile; give another --out")
        return cls(out, {"format": PROFILE_FORMAT, "version": VERSION, **settings, "steps": []})

    def record(self, name: str, model: str) -> dict:
        for s in self.doc["steps"]:
            if s["name"] == name and s["model"] == model:
                return s
        s = {
            "name": name,
            "model": model,
            "status": "pending",
            "seconds": None,
            "result": None,
            "error": None,
        }
        self.doc["steps"].append(s)
        return s

    def finished(self, rec: dict) -> bool:
        return rec["status"] == "done" and rec["result"] is not None and (self.out / rec["result"]).is_file()

    def save(self) -> None:
        atomic_write_json(self.out / "profile.json", self.doc)


def run_step(step: Step, model: Model, out_dir: Path, compare: Model | None = None) -> Path:
    """Run one step for ``model`` (``attention`` with ``compare``: the pair) into ``out_dir``."""
    from contextlab.eval import evaluate
    from contextlab.eval.results import model_record, run_and_record

    if step.name != "attention":
        return evaluate(step.name, model.adapter, step.options, step.data, out_dir)[0]
    from contextlab.analysis import attention as att
    from contextlab.analysis.attention_plots import plot_all

    models = [("a", model)] + ([("b", compare)] if compare else [])
    path, out, _ = run_and_record(
        out_dir,
        "attention",
        lambda: att.run(
            model.adapter,
            step.options,
            step.data,
            None,
            compare=compare.adapter if compare else None,
            progress=progress.enabled(),
        ),
        options=step.options,
        model={k: {**model_record(m.adapter), "label": m.label} for k, m in models},
    )
    plot_all(out.results, out_dir, False)
    return path


def measure_rates(adapter, context: int) -> Rates:
    """Seconds per token through ``adapter``'s model, at two lengths, and per row of its output layer
    on this machine: two rows of ``PROBE_SHORT`` and of ``PROBE_LONG`` tokens (each at most the context)
    scored at their last position only, then the long ones at every position (after a short warm-up).
    The two lengths give the per-token time's growth with length (attention), the difference of the
    last two the output layer's, each the median of three timings. Nine forward passes of the
    battery's hundreds; a model read at 32,768 tokens is mostly attention, which a rate measured at
    one short length missed sevenfold."""
    import torch

    def timed(fn, ids) -> float:  # the median of three: one timing on a shared machine strayed 1.5x
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn(ids)
            times.append(time.perf_counter() - t0)
        return sorted(times)[1]

    g = torch.Generator().manual_seed(0)
    short, long = min(context, PROBE_SHORT), min(context, PROBE_LONG)
    ids = torch.randint(0, min(adapter.vocab_size, 256), (2, long + 1), generator=g)
    adapter.last_token_logprobs(ids[:, :17])  # warm-up: first-call costs are not the model's rate
    at_short = timed(adapter.last_token_logprobs, ids[:, : short + 1]) / (2 * short)
    at_long = timed(adapter.last_token_logprobs, ids) / (2 * long)
    every = timed(adapter.token_logprobs, ids) / (2 * long)
    per_length = max(0.0, (at_long - at_short) / (long - short)) if long > short else 0.0
    return Rates(
        base=max(0.0, at_short - per_length * short), per_length=per_length, row=max(0.0, every - at_long)
    )


def window_note(adapter, context: int) -> str:
    """For a Hugging Face model whose layers attend only a window of the last W tokens (Mistral's
    sliding window, Gemma 2's alternate layers), W < ``context``: what that means for the curves and
    the retrieval depths ("" otherwise). Measured as is; said so that a curve that flattens past W, or
    a needle lost beyond it, is read as the architecture's, not the data's."""
    config = getattr(adapter.model, "config", None)
    window = getattr(config, "sliding_window", None)
    if adapter.info.kind != "hf" or not isinstance(window, int) or window >= context:
        return ""
    if getattr(config, "use_sliding_window", None) is False:  # Qwen2 declares one and does not use it
        return ""
    kinds = list(getattr(config, "layer_types", None) or [])
    sliding = sum(k == "sliding_attention" for k in kinds) if kinds else int(config.num_hidden_layers)
    if not sliding:
        return ""
    which = "each of its layers" if sliding == int(config.num_hidden_layers) else f"{sliding} of its layers"
    return (
        f"attends at most {window:,} tokens back in {which} (sliding window): what lies further back "
        "reaches a prediction only through the layers below, so the measures past that distance are "
        "the architecture's as much as the model's"
    )


def duration(seconds: float) -> str:
    """A rough duration: 40 s, 3 min, 2.5 h."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def estimate_line(estimate: float, context: int) -> str:
    """The estimate said before the battery runs, and for a long one the context that would fit
    ``SHORT_ENOUGH`` (the work of every step grows about linearly with the context, so the estimate is
    scaled by the ratio of contexts: rough, as the estimate is)."""
    line = f"estimated time on this machine: about {duration(estimate)} (from a timed forward pass; rough)"
    if estimate <= LONG_ESTIMATE:
        return line
    shorter = context // 2
    while shorter > MIN_CONTEXT and estimate * shorter / context > SHORT_ENOUGH:
        shorter //= 2
    if shorter < MIN_CONTEXT:
        return line
    return f"{line}; --context {shorter:,} would take about {duration(estimate * shorter / context)}"


def attention_problem(models: list[Model]) -> str:
    """'' when attention by distance can be recomputed for every model, else why not (one line)."""
    from contextlab.analysis.attention import check_model

    for m in models:
        try:
            check_model(m.adapter, "attention by distance")
        except UserError as e:
            return str(e)
    return ""


def run_profile(
    models: list[str],
    data: str,
    out: Path,
    budget_name: str,
    *,
    command: str,
    haystack: str | None = None,
    doc_start: str | None = None,
    split: str = "all",
    context: int = 0,
    dtype: str = "fp32",
    batch_size: int = 8,
    device: str = "cpu",
    show_progress: bool = True,
) -> dict:
    """Profile ``models`` (one, or two to pair) on ``data``; write OUT; return the manifest. ``context``
    (0: the models' own, the smaller of two) is the number of tokens every length follows. ``split``
    "run": the losses read only what each run held out of ``data``, its token store
    (``contextlab.eval.heldout``)."""
    from contextlab import bars
    from contextlab.eval import load_model
    from contextlab.profile import BUDGETS
    from contextlab.profile.headline import headline
    from contextlab.report.html import build_report

    progress.set_enabled(show_progress)
    budget = BUDGETS[budget_name]
    t0 = time.perf_counter()
    opened = [
        Model(label, path, load_model(path, dtype=dtype, batch_size=batch_size, device=device))
        for label, path in zip(labels_for(models), models)
    ]
    for m in opened:
        m.adapter.require_lm("profile")
    if split == "run" and not is_store(data):
        raise UserError(
            f"--split run reads the part of a run's token store it held out, and --data {data} is text; "
            "give the run's store as --data, or leave --data out"
        )
    hashes = {m.adapter.info.tokenizer.get("hash") for m in opened}
    if len(hashes) > 1 and is_store(data):
        raise UserError(
            f"{opened[0].path} and {opened[1].path} have different tokenizers, so one token store cannot "
            "hold the data of both; give --data the text (a file or folder): each model tokenizes it itself"
        )
    own = min(m.adapter.context for m in opened)
    if context < 0 or context > own:
        whose = "the smaller of the two models' contexts" if len(opened) == 2 else "the model's context"
        raise UserError(
            f"--context {context:,} is not between 1 and {whose} ({own:,}); give a shorter one, or leave "
            "--context out to measure at the whole context"
        )
    context = context or own
    settings = {
        "models": [
            {"label": m.label, "path": str(Path(m.path).resolve()), "results": f"models/{m.label}"}
            for m in opened
        ],
        "data": str(Path(data).resolve()),
        "budget": budget_name,
        "context": context,
        **({"doc_start": doc_start} if doc_start is not None else {}),  # absent: folders of before it
        **({"split": split} if split != "all" else {}),  # absent: every document, as before the option
    }
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.open(out, settings)
    manifest.doc["command"] = command
    manifest.doc["compare"] = "compare" if len(opened) == 2 else None
    of, held = "", {}  # with --split run, the run whose held-out part every model reads, and that part
    if split == "run":
        from contextlab.data.store import TokenStore
        from contextlab.eval.heldout import documents, shared_run

        of = shared_run([m.path for m in opened], TokenStore(data))
        held = documents(TokenStore(data), of, "run")[1]
    plans = {}
    for m in opened:
        store = prepare_store(data, m.adapter, out, show_progress, doc_start, split)
        kv_file, kv_pairs = prepare_kv(out, m.adapter, budget, context)
        text = None if is_store(data) else data
        plans[m.label] = build(
            context,
            budget,
            m.adapter,
            store=store,
            haystack=haystack or text,
            kv_file=kv_file,
            kv_pairs=kv_pairs,
            attention=attention_problem([m]),
            longest_doc=longest_document(store, m.adapter, split, of),
            split=split,
            heldout_of=of,
        )
    pair = len(opened) == 2 and not attention_problem(opened) and len(hashes) == 1
    jobs = _jobs(opened, plans, pair)
    shorter = "; --context N measures at a shorter one" if context > LONG_CONTEXT else ""
    print(
        f"profile of {', '.join(m.path for m in opened)} at context {context:,} ({budget_name}): "
        f"{sum(1 for _, s, _ in jobs if not s.skip)} steps, results in {out}{shorter}",
        file=sys.stdout,
    )
    for label, step, _ in jobs:  # said now, not found in the report after minutes of the rest
        if step.skip:
            print(f"  {step.name} ({label}) skipped: {step.skip}", file=sys.stdout)
    if held:
        print(
            f"  the store's steps read what {held['held_out_by']} held out: {held['documents']:,} documents, "
            f"{held['tokens']:,} tokens ({held['held_out']})",
            file=sys.stdout,
        )
    for m in opened:
        if note := window_note(m.adapter, context):
            print(f"  note: {m.label} {note}", file=sys.stdout)
    todo = [
        not step.skip and not manifest.finished(manifest.record(step.name, label)) for label, step, _ in jobs
    ]
    owner = [label.split("+")[0] for label, _, _ in jobs]  # the model whose forward passes a step times
    timed = {label for label, runs in zip(owner, todo) if runs}  # a resumed profile times only these
    rates = {m.label: measure_rates(m.adapter, context) for m in opened if m.label in timed}
    costs = [step.seconds(rates[o]) if runs else 0.0 for (_, step, _), o, runs in zip(jobs, owner, todo)]
    estimate = sum(costs)
    manifest.doc["estimated_seconds"] = round(estimate, 1)
    print(f"  {estimate_line(estimate, context)}", file=sys.stdout)
    bar = bars.bar(  # in estimated seconds; what a reader needs is the share done and the time left
        total=estimate,
        desc="profile",
        bar_format="{l_bar}{bar}| {elapsed} elapsed, about {remaining} left",
        disable=None if show_progress else True,
    )
    for (label, step, pair), cost in zip(jobs, costs):
        rec = manifest.record(step.name, label)
        target = out / ("compare" if pair else f"models/{label}")
        if manifest.finished(rec):
            bar.update(cost)
            continue
        if step.skip:
            rec.update(status="skipped", error=step.skip, result=None)
            manifest.save()
            bar.update(cost)
            continue
        rec.update(status="running", error=None)
        manifest.save()
        s0 = time.perf_counter()
        try:
            model = next(m for m in opened if m.label == label.split("+")[0])
            other = opened[1] if pair else None
            path = run_step(step, model, target, other)
            rec.update(status="done", result=str(path.relative_to(out)))
        except Exception as e:  # a task this model cannot take, or one it has no memory for: the next may
            why = str(e) if isinstance(e, UserError) else memory_error_line(e, "profile")
            if why is None:
                raise
            rec.update(status="failed", error=why)
            bars.write(f"  {step.name} ({label}) failed: {why}", file=sys.stdout)
        rec["seconds"] = round(time.perf_counter() - s0, 2)
        manifest.save()
        bar.update(cost)
    bar.close()
    if len(opened) == 2:
        manifest.doc["compare_notes"] = _compare(out, opened)
    manifest.doc["headline"] = headline(out, manifest.doc)
    manifest.doc["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    manifest.doc["seconds"] = round(time.perf_counter() - t0, 1)
    manifest.save()
    manifest.doc["report"] = str(build_report(out, out / "report.html", None).relative_to(out))
    manifest.save()
    return manifest.doc


def _jobs(opened: list[Model], plans: dict[str, list[Step]], pair: bool) -> list[tuple[str, Step, bool]]:
    """(model label, step, is a pair step) in order: every model's evaluations, then attention: once for
    the pair when ``pair`` (its comparison needs both models on the same rows), else per model, each as
    far as it can (a Hugging Face model beside a contextlab one no longer costs the contextlab one its
    attention)."""
    jobs = []
    for m in opened:
        jobs += [(m.label, s, False) for s in plans[m.label] if s.name != "attention"]
    if pair:
        att = [s for s in plans[opened[0].label] if s.name == "attention"]
        return jobs + [(f"{opened[0].label}+{opened[1].label}", s, True) for s in att]
    for m in opened:
        jobs += [(m.label, s, False) for s in plans[m.label] if s.name == "attention"]
    return jobs


def _compare(out: Path, opened: list[Model]) -> dict:
    """``contextlab compare`` of the two models' results, one evaluation at a time; returns
    {evaluation: note} for those not compared (a refused pairing names its cause)."""
    from contextlab.compare.paired import COMPARERS, Options, compare_runs

    a, b = (out / "models" / m.label for m in opened)
    notes = {}
    for name in COMPARERS:
        if not ((a / f"{name}.json").is_file() and (b / f"{name}.json").is_file()):
            continue
        try:
            compare_runs(a, b, [name], Options(), out / "compare")
        except UserError as e:
            notes[name] = str(e)
    return notes
