"""Run a profile: open the models, prepare the data, run the battery, pair, summarise, report.

Rerunning the same command on the same ``OUT`` skips every step whose record in
``OUT/profile.json`` (``profile.manifest``) says done and whose result file is there, so a killed
profile loses at most the step it was in. A step that fails (a model that cannot take a task, or
one it has no memory for) is recorded and the battery goes on: one bad measure does not cost the
others.

Layout: ``OUT/models/<label>/<eval>.json`` (+ plots, arrays): ordinary result files;
``OUT/data/``: the token store ingested from text ``--data`` (per tokenizer) and the
key-value file written for the context (``profile.data``); ``OUT/compare/``: ``contextlab
compare`` of the two models, one evaluation at a time (a pairing that is refused is a note, not a
failure); ``OUT/report.html``: ``contextlab report OUT``.

Trade-off: models are opened once and kept for the whole battery (one load, minutes saved
for large HF models) at the cost of holding both in memory with ``--compare``.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from contextlab.errors import UserError, memory_error_line
from contextlab.eval import progress
from contextlab.eval.tasks import LONG_CONTEXT  # past it, the opening line says --context measures shorter
from contextlab.profile.data import document_lengths, is_store, prepare_kv, prepare_store
from contextlab.profile.estimate import estimate_line, measure_rates, pairing_seconds, refit_seconds
from contextlab.profile.manifest import Manifest
from contextlab.profile.plan import Budget, Step, build


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


def window_note(adapter, context: int) -> str:
    """For a Hugging Face model whose layers attend only a window of the last W tokens (Mistral's
    sliding window, Gemma 2's alternate layers), W < ``context``: what that means for the curves and
    the retrieval depths ("" otherwise). Measured as is; said so that a curve that flattens past W, or
    a needle lost beyond it, is read as the architecture's, not the data's."""
    from contextlab.eval.results import attention_window

    found = attention_window(adapter)
    if found is None or found["sliding_window"] >= context:
        return ""
    window, sliding = found["sliding_window"], found["sliding_layers"]
    layers = int(adapter.model.config.num_hidden_layers)
    which = "each of its layers" if sliding == layers else f"{sliding} of its layers"
    return (
        f"attends at most {window:,} tokens back in {which} (sliding window): what lies further back "
        "reaches a prediction only through the layers below, so the measures past that distance are "
        "the architecture's as much as the model's"
    )


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
    encoding: str = "strict",
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
    from contextlab.eval import load_model
    from contextlab.profile import BUDGETS

    progress.set_enabled(show_progress)
    budget = BUDGETS[budget_name]
    t0 = time.perf_counter()
    opened = [
        Model(label, path, load_model(path, dtype=dtype, batch_size=batch_size, device=device))
        for label, path in zip(labels_for(models), models)
    ]
    context = _checked(opened, data, split, context)
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(opened, data, budget_name, context, doc_start, split, encoding)
    manifest = Manifest.open(out, settings)
    manifest.doc["command"] = command
    manifest.doc["compare"] = "compare" if len(opened) == 2 else None
    manifest.doc["model_notes"] = model_notes(opened, context)
    measured = any(manifest.finished(rec) for rec in manifest.doc["steps"])
    held, plans = _plans(
        opened, data, out, budget, context, haystack, doc_start, split, show_progress, measured, encoding
    )
    one_tokenizer = _one_tokenizer(opened)
    jobs = _jobs(opened, plans, len(opened) == 2 and one_tokenizer and not attention_problem(opened))
    _announce(opened, jobs, out, budget_name, context, held)
    costs = _estimate(opened, jobs, manifest, context)
    _execute(opened, jobs, costs, manifest, show_progress)
    return _finish(opened, manifest, t0)


def _one_tokenizer(opened: list[Model]) -> bool:
    """Whether the models encode alike (one model; or two whose tokenizers share a hash: the same files,
    or other files that encode exactly alike, such as GPT-2's BPE as gpt2:DIR and as a tokenizer.json)."""
    from contextlab.data.tokenizers import same_tokenizer

    return all(same_tokenizer(opened[0].adapter.info.tokenizer, m.adapter.info.tokenizer) for m in opened[1:])


def _checked(opened: list[Model], data: str, split: str, context: int) -> int:
    """The context the profile measures (``context``, or 0: the models' own, the smaller of two), once the
    models and data are known to fit together; else one line saying what to give."""
    for m in opened:
        m.adapter.require_lm("profile")
    if split == "run" and not is_store(data):
        raise UserError(
            f"--split run reads the part of a run's token store it held out, and --data {data} is text; "
            "give the run's store as --data, or leave --data out"
        )
    if not _one_tokenizer(opened) and is_store(data):
        raise UserError(
            f"{opened[0].path} and {opened[1].path} have different tokenizers, so one token store cannot "
            "hold the data of both; give --data the text (a file or folder): each model tokenizes it itself"
        )
    own = min(m.adapter.context for m in opened)
    most = max(m.adapter.context for m in opened)  # with --compare, --context may reach the longer one's
    if context < 0 or context > most:
        whose = "the longer of the two models' contexts" if len(opened) == 2 else "the model's context"
        raise UserError(
            f"--context {context:,} is not between 1 and {whose} ({most:,}); give a shorter one, or leave "
            "--context out to measure at the whole context"
            + (" (the shorter of the two)" if len(opened) == 2 else "")
        )
    for m in (m for m in opened if m.adapter.context < context):  # read past its context: extrapolated
        if not m.adapter.info.extends_beyond:
            raise UserError(
                f"--context {context:,} runs past {m.path}'s context ({m.adapter.context:,}), and its "
                "positions are absolute: it cannot be read there; give --context of at most "
                f"{m.adapter.context:,}"
            )
        print(
            f"note: --context {context:,} reads {m.label} ({m.path}) past the context it was trained at "
            f"({m.adapter.context:,}): its positions past {m.adapter.context:,} are extrapolated (RoPE), "
            "which is what comparing a model with its context extension measures"
        )
    return context or own


def _settings(
    opened: list[Model],
    data: str,
    budget_name: str,
    context: int,
    doc_start: str | None,
    split: str,
    encoding: str = "strict",
) -> dict:
    """What makes a profile folder this profile's: a rerun with the same settings resumes it."""
    return {
        "models": [
            {"label": m.label, "path": str(Path(m.path).resolve()), "results": f"models/{m.label}"}
            for m in opened
        ],
        "data": str(Path(data).resolve()),
        "budget": budget_name,
        "context": context,
        **({"doc_start": doc_start} if doc_start is not None else {}),  # absent: folders of before it
        **({"split": split} if split != "all" else {}),  # absent: every document, as before the option
        **({"encoding": encoding} if encoding != "strict" else {}),  # absent: UTF-8, as before the option
    }


def _plans(
    opened: list[Model],
    data: str,
    out: Path,
    budget: Budget,
    context: int,
    haystack: str | None,
    doc_start: str | None,
    split: str,
    show_progress: bool,
    measured: bool = False,
    encoding: str = "strict",
) -> tuple[dict, dict[str, list[Step]]]:
    """Each model's data prepared and its battery planned: (the held-out part every model reads with
    ``split`` "run", else {}; {model label: its steps}). ``measured``: steps of this folder are done on
    the text already ingested there (so it must not change under them)."""
    of, held = "", {}  # with --split run, the run whose held-out part every model reads, and that part
    if split == "run":
        from contextlab.data.store import TokenStore
        from contextlab.eval.heldout import documents, shared_run

        of = shared_run([m.path for m in opened], TokenStore(data))
        held = documents(TokenStore(data), of, "run")[1]
    plans = {}
    for m in opened:
        store = prepare_store(data, m.adapter, out, show_progress, doc_start, split, measured, encoding)
        kv_file, kv_pairs = prepare_kv(out, m.adapter, budget, context)
        plans[m.label] = build(
            context,
            budget,
            m.adapter,
            store=store,
            haystack=haystack or (None if is_store(data) else data),
            kv_file=kv_file,
            kv_pairs=kv_pairs,
            attention=attention_problem([m]),
            doc_lengths=document_lengths(store, m.adapter, split, of),
            split=split,
            heldout_of=of,
            encoding=encoding,
        )
    return held, plans


def _announce(
    opened: list[Model],
    jobs: list[tuple[str, Step, bool]],
    out: Path,
    budget_name: str,
    context: int,
    held: dict,
) -> None:
    """The opening lines: what runs, where its results go, and what a reader should know before the
    minutes of the battery (steps skipped and why, the held-out part read, a model's attention window)."""
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
            f"  the store's steps read what {held['held_out_by']} held out: {held['documents']:,} "
            f"document{'s' * (held['documents'] != 1)}, "
            f"{held['tokens']:,} tokens ({held['held_out']})",
            file=sys.stdout,
        )
    for m in opened:
        if note := window_note(m.adapter, context):
            print(f"  note: {m.label} {note}", file=sys.stdout)


def model_notes(opened: list[Model], context: int) -> dict[str, str]:
    """{label: what a reader of the report must know about the model} (a context its config does not
    name, its attention window): kept
    in profile.json, so the page says it as the console did."""
    from contextlab.inference.open import assumed_context_note

    notes = {}
    for m in opened:
        said = [n for n in (assumed_context_note(m.adapter.info), window_note(m.adapter, context)) if n]
        if said:
            notes[m.label] = "; ".join(said)
    return notes


def _estimate(
    opened: list[Model], jobs: list[tuple[str, Step, bool]], manifest: Manifest, context: int
) -> list[float]:
    """Each job's estimated seconds (0 for one that will not run: skipped, or done before a resume),
    from each model's timed forward passes; the total is said and recorded."""
    todo = [
        not step.skip and not manifest.finished(manifest.record(step.name, label)) for label, step, _ in jobs
    ]
    owner = [label.split("+")[0] for label, _, _ in jobs]  # the model whose forward passes a step times
    timed = {label for label, runs in zip(owner, todo) if runs}  # a resumed profile times only these
    rates = {m.label: measure_rates(m.adapter, context) for m in opened if m.label in timed}
    costs = [step.seconds(rates[o]) if runs else 0.0 for (_, step, _), o, runs in zip(jobs, owner, todo)]
    estimate = sum(costs)
    manifest.doc["estimated_seconds"] = round(estimate, 1)
    fits = [s for _, s, _ in jobs if s.name == "bayes-fit" and not s.skip]
    pairing = pairing_seconds(refit_seconds()) if len(opened) == 2 and len(fits) == 2 else 0.0
    print(f"  {estimate_line(estimate, context, pair=len(opened) == 2, pairing=pairing)}", file=sys.stdout)
    return costs


def _execute(
    opened: list[Model],
    jobs: list[tuple[str, Step, bool]],
    costs: list[float],
    manifest: Manifest,
    show_progress: bool,
) -> None:
    """Run every job not done yet, recording each in the manifest as it starts and ends; a failure a
    user's model can meet (a task it cannot take, memory it lacks) is that step's, and the battery goes on."""
    from contextlab import bars

    out = manifest.out
    bar = bars.bar(  # in estimated seconds; what a reader needs is the share done and the time left
        total=sum(costs),
        desc="profile",
        bar_format="{l_bar}{bar}| {elapsed} elapsed, about {remaining} left",
        disable=None if show_progress else True,
    )
    for label, step, _ in jobs:  # every step listed from the start: a profile stopped half-way shows them all
        rec = manifest.record(step.name, label)
        if step.skip and not manifest.finished(rec):
            rec.update(status="skipped", error=step.skip, result=None)
    manifest.save()
    for (label, step, pair), cost in zip(jobs, costs):
        rec = manifest.record(step.name, label)
        if manifest.finished(rec) or step.skip:
            bar.update(cost)
            continue
        rec.update(status="running", error=None)
        manifest.save()
        s0 = time.perf_counter()
        try:
            model = next(m for m in opened if m.label == label.split("+")[0])
            target = out / ("compare" if pair else f"models/{label}")
            with advancing(bar, cost):
                path = run_step(step, model, target, opened[1] if pair else None)
            rec.update(status="done", result=str(path.relative_to(out)))
        except Exception as e:  # a task this model cannot take, or one it has no memory for: the next may
            why = str(e) if isinstance(e, UserError) else memory_error_line(e, "profile")
            if why is None:
                raise
            rec.update(status="failed", error=why)
            bars.write(f"  {step.name} ({label}) failed: {why}", file=sys.stdout)
        rec["seconds"] = round(time.perf_counter() - s0, 2)
        manifest.save()
    bar.close()


@contextlib.contextmanager
def advancing(bar, cost: float, every: float = 1.0):
    """Move ``bar`` (in estimated seconds) by the seconds a step has run, up to 95% of its ``cost``,
    while it runs, then to the whole of it: the profile's bar sat at 0% through a 45-second first step,
    its estimate printed, as if nothing ran."""
    credited, stop = [0.0], threading.Event()
    start = time.perf_counter()

    def tick() -> None:
        while not stop.wait(every):
            due = min(0.95 * cost, time.perf_counter() - start)
            if due > credited[0]:
                bar.update(due - credited[0])
                credited[0] = due

    ticker = threading.Thread(target=tick, name="profile-bar", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        bar.update(cost - credited[0])


def _finish(opened: list[Model], manifest: Manifest, t0: float) -> dict:
    """The pair compared, the headline, the time taken, the report: the manifest's last writes."""
    from contextlab.profile.headline import headline
    from contextlab.report.html import build_report

    out = manifest.out
    if len(opened) == 2:  # a bootstrap of fits among them: seconds after the bar has ended, so said
        print(
            f"  pairing {opened[0].label} and {opened[1].label}: contextlab compare of each evaluation",
            file=sys.stdout,
        )
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
            compare_runs(a, b, [name], Options(), out / "compare", overwrite=True)  # the profile's own
        except UserError as e:
            notes[name] = str(e)
    return notes
