"""Evaluation results in the report: folders of ``NAME.json`` result files, and comparisons of them.

An evaluation folder is any folder holding result files (``"format": "contextlab-eval-result"``,
written by ``contextlab eval`` and ``contextlab analyze``): a run's ``eval/``, a Hugging Face
model folder's ``eval/``, or any ``--out`` folder. Each result gets a section with its plot
(``NAME.png`` beside it), its headline numbers (``results.summary``), its options, model and data
records, and the command that writes it again, built from those records alone.

Trade-off: the command lists every recorded option, defaults included. The report imports no
evaluation (it reads result files only), so it cannot tell a default from a choice; writing all
of them makes the line longer but exact, even after a default changes. Paths are written as the
evaluation recorded them: a relative one is relative to the directory it ran in, and the page
says so.
"""

from __future__ import annotations

import html
import json
import shlex
from collections import Counter
from pathlib import Path

from contextlab import rundir
from contextlab.report.blocks import img, kv_table, muted, plain, pre, table, with_intervals
from contextlab.report.details import DETAILS

RESULT_FORMAT = "contextlab-eval-result"  # what eval/results.py writes (the report does not import it)
COMPARE_FORMAT = "contextlab-compare"
POOLED_FORMAT = "contextlab-compare-pooled"  # compare --and (contextlab.compare.replicates)
DATA_PATHS = ("store", "file", "folder", "haystack")  # data record fields that say where the data was
ANALYSES = ("entropy", "attention")  # results of `contextlab analyze NAME`, not of `contextlab eval`
KEY_METRICS = {
    "contextwise": ("best_context_loss",),
    "infill": ("single_l2r_exact_match", "single_psm_exact_match"),  # l2r: every model has it
    "niah": ("likelihood_accuracy", "contains_match"),
    "attention": ("a.mean_distance",),
}


# ---------------------------------------------------------------------------- finding results


def read_result(f: Path) -> dict | None:
    """The result file ``f``, or None when it is not one. Only its first bytes are read for
    anything else, so a tokenizer.json of many megabytes beside the results costs nothing."""
    try:
        with open(f, "rb") as fh:
            if RESULT_FORMAT.encode() not in fh.read(400):
                return None
        doc = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == RESULT_FORMAT else None


def read_results(folder: Path) -> dict[str, dict]:
    """Every result file directly in ``folder``, by evaluation name, in name order."""
    found = {f.stem: read_result(f) for f in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
    return {name: doc for name, doc in found.items() if doc is not None}


def eval_folders(root: Path) -> list[Path]:
    """Every folder at or below ``root`` that holds a result file, sorted (hidden folders skipped)."""
    folders = {f.parent for f in root.rglob("*.json") if read_result(f) is not None}
    return sorted(d for d in folders if not any(p.startswith(".") for p in d.relative_to(root).parts))


def code_note(folders: list[Path]) -> str | None:
    """One line when the results in ``folders`` were computed by more than one version of the code
    (git commits) or by code with uncommitted changes; None when they agree (or say nothing)."""
    docs = [doc for folder in dict.fromkeys(folders) for doc in read_results(folder).values()]
    commits = Counter(d["git_commit"] for d in docs if d.get("git_commit"))
    dirty = sum(d.get("git_dirty") is True for d in docs)
    said = []
    if len(commits) > 1:
        shown = ", ".join(f"{c[:10]} ({n})" for c, n in commits.most_common(5))
        more = f" and {len(commits) - 5} more" if len(commits) > 5 else ""
        said.append(
            f"the {len(docs)} evaluation results here come from {len(commits)} commits of contextlab: "
            f"{shown}{more}"
        )
    if dirty:
        said.append(
            f"{dirty} of the {len(docs)} were computed by a checkout with uncommitted changes (git_dirty), "
            "which no commit reproduces"
        )
        codes = {d.get("code_digest") for d in docs if d.get("git_dirty") is True and d.get("code_digest")}
        if len(codes) > 1:  # one commit, different edits on top: results of different code
            said[-1] += f", and by {len(codes)} different versions of that code (code_digest)"
    if not said:
        return None
    return "; ".join(said) + ". Each result's commit is under its 'options, model, data and code version'."


def folder_label(folder: Path, root: Path) -> str:
    """How a model's results are named on the page: ``llama`` for llama/eval, the folder's path
    below ``root`` otherwise, and the root's own name for the root itself."""
    named = folder.parent if folder.name == rundir.EVAL and folder != root else folder
    if named == root or root not in named.parents:
        return named.resolve().name
    return str(named.relative_to(root))


# ---------------------------------------------------------------------------- headline numbers


def eval_scalars(doc: dict) -> dict:
    """The headline numbers of a result: its results' summary (with the seconds it took), else its
    top-level scalars."""
    results = doc.get("results")
    summary = results.get("summary") if isinstance(results, dict) else None
    if isinstance(summary, dict) and summary:
        out = {k: v for k, v in flat_summary(summary).items() if _shown(v)}
        if isinstance(doc.get("seconds"), (int, float)):
            out["seconds"] = doc["seconds"]
        return out
    return {k: v for k, v in doc.items() if _shown(v) and k not in ("format", "eval")}


def flat_summary(summary: dict) -> dict:
    """A summary whose groups (``analyze attention``'s ``a``, ``b`` and ``a_vs_b``) are spelled out as
    ``a.mean_distance``: a table shows the numbers of a nested summary too, not only its flat ones."""
    out: dict = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            out.update({f"{k}.{k2}": v2 for k2, v2 in v.items()})
        else:
            out[k] = v
    return out


def _shown(v) -> bool:
    """A headline value: a number, a flag, a short text, null, or a short list of numbers."""
    if v is None or isinstance(v, (bool, int, float)):
        return True
    if isinstance(v, str):
        return len(v) < 80
    return isinstance(v, list) and len(v) <= 4 and all(isinstance(x, (int, float)) for x in v)


def headline(name: str, doc: dict) -> tuple[str, object] | None:
    """The one number of a result shown in tables of several models: a known key (KEY_METRICS),
    else the summary's first number; with its 95% interval when the summary has one."""
    summary = (doc.get("results") or {}).get("summary") if isinstance(doc.get("results"), dict) else None
    if not isinstance(summary, dict):
        return None
    summary = flat_summary(summary)
    numbers = [k for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    key = next((k for k in KEY_METRICS.get(name, ()) if k in numbers), numbers[0] if numbers else None)
    if key is None:
        return None
    return key, with_intervals({k: v for k, v in summary.items() if k.startswith(key)})[key]


def models_table(folders: dict[str, Path]) -> str:
    """One row per (evaluation, headline measure), one column per model: the models side by side. The
    first rows name each column's model and tokenizer; a row whose results read other data, another
    tokenizer or another context names them in its cells (a user's table set a loss on WikiText with
    GPT-2's tokenizer beside losses on other text with a 2,048-id BPE, unmarked)."""
    results = {label: read_results(folder) for label, folder in folders.items()}
    rows: dict[tuple[str, str], dict] = {}
    bases: dict[tuple[str, str], dict] = {}
    about: dict[str, dict] = {"model": {}, "tokenizer": {}}
    for label, found in results.items():
        for name, doc in found.items():
            model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
            about["model"].setdefault(label, _model_name(model))
            about["tokenizer"].setdefault(label, _tokenizer_name(model))
            h = headline(name, doc)
            if h:
                rows.setdefault((name, h[0]), {"evaluation": name, "measure": h[0]})[label] = h[1]
                bases.setdefault((name, h[0]), {})[label] = _basis(doc)
    mixed = [key for key, b in bases.items() if len(set(b.values())) > 1]
    for key in mixed:
        for label, basis in bases[key].items():
            rows[key][label] = f"{plain(rows[key][label])} (on {basis})"
    top = [
        {"evaluation": "", "measure": what, **cells} for what, cells in about.items() if any(cells.values())
    ]
    out = table(top + list(rows.values()), ["evaluation", "measure", *folders])
    if mixed:
        out += muted(
            "a row whose cells name their data, tokenizer or context compares results read on different "
            "ones: their numbers are not comparable (a loss per token depends on the tokenizer and the text)"
        )
    return out


def _model_name(model: dict) -> str:
    """The model's folder name: a run's, not its checkpoint's (``step_000053`` named no model)."""
    path = model.get("path") or model.get("id")
    if not path:
        return ""
    p = Path(str(path))
    run = _run_of_checkpoint(p)
    return f"{run.name} ({p.name})" if run is not None else p.name


def _run_of_checkpoint(p: Path) -> Path | None:
    """The run of a checkpoint path ``RUN/checkpoints/step_N`` (by its name: the folder may be gone)."""
    return p.parent.parent if p.parent.name == rundir.CHECKPOINTS and p.name.startswith("step_") else None


def _tokenizer_name(model: dict) -> str:
    tok = model.get("tokenizer") if isinstance(model.get("tokenizer"), dict) else {}
    if not tok:
        return ""
    return f"{tok.get('name') or '?'} ({str(tok.get('hash') or '')[:8]})"


def _basis(doc: dict) -> str:
    """What a result's numbers rest on besides the model: its data (name and the first digits of its
    hash), its tokenizer, and the context it was read at when an option set one."""
    data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    where = next((data[k] for k in DATA_PATHS if isinstance(data.get(k), str)), None)
    parts = [
        Path(where).name + (f" {str(data['hash'])[:8]}" if data.get("hash") else "") if where else "own data"
    ]
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    parts.append(f"tokenizer {_tokenizer_name(model) or '?'}")
    context = (doc.get("options") or {}).get("context") if isinstance(doc.get("options"), dict) else None
    if isinstance(context, int) and context and context != model.get("context"):
        parts.append(f"context {context:,}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------- the command that wrote it


def reproduce(doc: dict, folder: Path) -> tuple[str | None, list[str]]:
    """The command line that writes this result again (None when it cannot be told), and notes on it."""
    name = str(doc.get("eval") or "")
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    b = model.get("b") if name == "attention" and isinstance(model.get("b"), dict) else None
    if name == "attention" and isinstance(model.get("a"), dict):
        model = model["a"]
    path = model.get("path") or model.get("id")
    if not name or not path or path == "-":
        return None, ["the model was not loaded from a folder, so there is no command to run it again"]
    path = _from_cwd(doc, path)
    args = ["contextlab", "analyze", name] if name in ANALYSES else ["contextlab", "eval", name]
    given, step = _run_and_step(path, model.get("step"))  # a run's checkpoint: the run and its --step
    args += ["--model", given] + (["--step", str(step)] if step is not None and not b else [])
    args += ["--compare", str(b.get("path") or b.get("id"))] if b else []
    data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    where = next((data[k] for k in DATA_PATHS if isinstance(data.get(k), str)), None)
    where = _from_cwd(doc, where) if where else where
    if where:
        args += ["--data", where]
    elif name == "attention" and isinstance(data.get("text"), str):
        args += ["--text", data["text"]]
    if model.get("dtype") and name != "attention":
        args += ["--dtype", str(model["dtype"])]
    if isinstance(model.get("batch_size"), int):
        args += ["--batch-size", str(model["batch_size"])]
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    if name == "infill" and "folder" not in data:  # --files picks a folder's files; a store has none
        options = {k: v for k, v in options.items() if k != "files"}
    flags, notes = _option_flags(options)
    args += flags
    if _default_out(given) != folder.resolve():
        args += ["--out", str(folder.resolve())]
    if any(not Path(p).is_absolute() for p in (path, where) if p):
        notes.append(
            "relative paths are as the evaluation was given them: run this in the directory it ran in"
        )
    elif model.get("path") and not Path(str(path)).exists():  # a run moved or copied since
        notes.append(
            f"the model was evaluated at {path}, which is not there now (moved or copied since): give "
            "--model its new place"
        )
    return shlex.join(args), notes


def _run_and_step(path: str, step) -> tuple[str, int | None]:
    """(the model to name, its --step): a checkpoint ``RUN/checkpoints/step_N`` of a result that records
    its step is the run with ``--step N``, so the rerun's result names the model as the first one did
    (the checkpoint's path made its id, and its plots' legends, the checkpoint's); anything else as is."""
    run = _run_of_checkpoint(Path(path))
    return (str(run), step) if isinstance(step, int) and run is not None else (str(path), None)


def _from_cwd(doc: dict, path: str) -> str:
    """``path`` made absolute against the directory the evaluation ran in (recorded as ``cwd``), when it is
    relative and that directory is known; as recorded otherwise."""
    cwd = doc.get("cwd")
    if isinstance(cwd, str) and cwd and not Path(str(path)).is_absolute():
        return str(Path(cwd) / str(path))
    return str(path)


def _option_flags(options) -> tuple[list[str], list[str]]:
    """``--flag value`` for every recorded option (None as ``none``, which an optional one reads as None)."""
    flags: list[str] = []
    notes: list[str] = []
    for key, v in (options or {}).items() if isinstance(options, dict) else ():
        flag = "--" + key.replace("_", "-")
        if isinstance(v, dict):
            notes.append(
                f"option {key} is a table, which the command line cannot set; it was {json.dumps(v)}"
            )
            continue
        if isinstance(v, list):
            if any("," in str(x) for x in v):
                notes.append(f"option {key} has a value with a comma, which {flag} splits: not exact")
            value = ",".join("true" if x is True else "false" if x is False else str(x) for x in v)
        else:
            value = "none" if v is None else ("true" if v else "false") if isinstance(v, bool) else str(v)
        flags += [flag, value]
    return flags, notes


def _default_out(model_path: str) -> Path | None:
    """Where ``contextlab eval`` writes for this model without --out (None: it cannot be told here)."""
    p = Path(model_path)
    return rundir.eval_dir(p).resolve() if p.is_absolute() else None


# ---------------------------------------------------------------------------- sections


def eval_section(name: str, doc: dict, folder: Path, level: int = 3, newest_step: int | None = None) -> str:
    """One evaluation: headline numbers, text lines, plot, the command, and its records. ``newest_step``:
    the step of the run's newest checkpoint, when the result sits in a run; a result of an earlier
    checkpoint says so under its heading."""
    h = f"h{level}"
    parts = [f"<{h}>Evaluation: {html.escape(name)}</{h}>"]
    step = (doc.get("model") or {}).get("step") if isinstance(doc.get("model"), dict) else None
    if isinstance(step, int) and isinstance(newest_step, int) and step != newest_step:
        parts.append(
            f"<p><b>evaluated at step {step:,}; the run's newest checkpoint is step {newest_step:,}</b>: "
            "these numbers are of the earlier model; run the command under reproduce again to measure "
            "the newest</p>"
        )
    if isinstance(doc.get("data"), dict) and doc["data"].get("training_store"):
        parts.append(
            "<p><b>read on the token store the model trained on</b>: mostly documents it saw in training, so "
            "these numbers say what it saw, not what it learned; a store of held-out text measures that</p>"
        )
    read = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    if read.get("split") == "run":
        parts.append(
            f"<p><b>read on what the run held out</b> ({html.escape(str(read.get('held_out', '')))}): "
            f"{read.get('documents', 0):,} document{'s' * (read.get('documents', 0) != 1)}, "
            f"{read.get('tokens', 0):,} tokens it did not "
            "train on</p>"
        )
    parts.append(kv_table(with_intervals(eval_scalars(doc))))
    if name in DETAILS:  # the rows the summary does not hold (the entropy analysis per context)
        parts.append(DETAILS[name](doc))
    text = (doc.get("results") or {}).get("text") if isinstance(doc.get("results"), dict) else None
    if isinstance(text, list) and text:
        parts.append("<ul>" + "".join(f"<li>{html.escape(str(t))}</li>" for t in text) + "</ul>")
    bad = doc.get("non_finite")
    if isinstance(bad, dict):
        parts.append(
            muted(f"null fields: {', '.join(map(str, bad.get('fields', [])))}: {bad.get('note', '')}")
        )
    parts += [img(png, f"{png.stem} plot") for png in plots_of(name, folder)]
    cmd, notes = reproduce(doc, folder)
    parts.append("<p>reproduce:</p>" + (pre(cmd) if cmd else ""))
    parts += [muted(n) for n in notes]
    parts.append(
        "<details><summary>options, model, data and code version</summary>" + _records(doc) + "</details>"
    )
    return "\n".join(parts)


def plots_of(name: str, folder: Path) -> list[Path]:
    """NAME.png, then NAME_*.png (analyze attention draws three, contextwise one of several models)."""
    own = folder / f"{name}.png"
    return ([own] if own.exists() else []) + sorted(folder.glob(f"{name}_*.png"))


def _records(doc: dict) -> str:
    """The result's own records side by side: options, model, data, and where the code came from."""
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    models = {k: v for k, v in model.items() if isinstance(v, dict) and k in ("a", "b")} or {"": model}
    tables = [kv_table(doc.get("options") or {}, "options")]
    for k, m in models.items():
        tok = m.get("tokenizer") if isinstance(m.get("tokenizer"), dict) else None
        shown = {**m, **({"tokenizer": f"{tok.get('name')} ({str(tok.get('hash'))[:12]})"} if tok else {})}
        tables.append(kv_table(shown, f"model {k}".strip()))
    tables.append(kv_table(doc.get("data") or {}, "data"))
    code = (
        "contextlab_version",
        "format_version",
        "git_commit",
        "git_dirty",
        "code_digest",
        "created",
        "seconds",
        "arrays",
    )
    tables.append(kv_table({k: doc[k] for k in code if k in doc}, "code and files"))
    return '<div class="records">' + "".join(tables) + "</div>"


def eval_folder_section(folder: Path, title: str, level: int = 2) -> str:
    """Every result in ``folder`` under one heading, then any other plot in it."""
    found = read_results(folder)
    parts = [f"<h{level}>{html.escape(title)}</h{level}>", muted(str(folder.resolve()))]
    parts += [muted(line) for line in dict.fromkeys(_model_line(d) for d in found.values()) if line]
    return "\n".join(parts + eval_sections(folder, found, level + 1))


def eval_sections(
    folder: Path, found: dict[str, dict], level: int = 3, newest_step: int | None = None
) -> list[str]:
    """A section per result in ``folder``, then the plots in it that belong to none (``newest_step``:
    ``eval_section``'s)."""
    parts = [eval_section(name, doc, folder, level, newest_step) for name, doc in found.items()]
    shown = {p for name in found for p in plots_of(name, folder)}
    others = [p for p in sorted(folder.glob("*.png")) if p not in shown and not p.name.startswith("compare_")]
    if others:
        parts.append(f"<h{level}>Other plots</h{level}>")
        parts += [img(p, p.stem) for p in others]
    return parts


def _model_line(doc: dict) -> str:
    """Which model a result is of, in one line: path, kind, architecture, context."""
    m = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    if not m.get("path") and not m.get("id"):
        return ""
    about = [str(m[k]) for k in ("kind", "architecture") if m.get(k)]
    if m.get("context") and "context" not in " ".join(about):
        about.append(f"context {m['context']}")
    if isinstance(m.get("sliding_window"), int):  # what lies further back reaches it only through layers
        about.append(f"attends {m['sliding_window']:,} tokens back in {m.get('sliding_layers', '?')} layers")
    return f"model {m.get('path') or m.get('id')}" + (f" ({', '.join(about)})" if about else "")


PER_MODEL = ("length", "lengths", "train_context", "context")  # each run's own context: a sweep's differ


def comparable_options(doc: dict) -> dict:
    """A result's options less those a context sweep sets per run (``--length {train.context}``)."""
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    return {k: v for k, v in options.items() if k not in PER_MODEL}


def unlike_results(runs: list[Path], names: dict[Path, str]) -> list[str]:
    """A line per evaluation whose results in the runs table were measured with other settings or on
    other data (one run's contextwise read 16 pieces, another's 64): side by side in one table their
    numbers look comparable and are not."""
    out = []
    for name in KEY_METRICS:
        docs = {run: doc for run in runs if (doc := rundir.read_eval(run, name)) is not None}
        if len(docs) < 2:
            continue
        (first, ref), *rest = docs.items()
        apart = []
        for run, doc in rest:
            was, now = comparable_options(ref), comparable_options(doc)
            change = "; ".join(
                f"--{k.replace('_', '-')} {plain(was.get(k))} -> {plain(now.get(k))}"
                for k in dict.fromkeys([*was, *now])
                if was.get(k) != now.get(k)
            )
            if (ref.get("data") or {}).get("hash") != (doc.get("data") or {}).get("hash"):
                change = "; ".join(x for x in ("other data", change) if x)
            if change:
                apart.append(f"{names[run]} ({change})")
        if apart:
            out.append(
                f"{name}: the runs' results are not measured alike, against {names[first]}'s: "
                f"{', '.join(apart)}; their {name} numbers here do not compare: evaluate them with the same "
                f"settings (or `contextlab compare` says what differs)"
            )
    return out


def eval_key(run: Path) -> dict:
    """One headline number per known evaluation of a run, for the runs table."""
    out = {}
    for name, keys in KEY_METRICS.items():
        summary = ((rundir.read_eval(run, name) or {}).get("results") or {}).get("summary") or {}
        key = next((k for k in keys if isinstance(summary.get(k), (int, float))), None)
        if key:
            out[f"{name}.{key}"] = summary[key]
    return out


def compare_sections(root: Path, skip: list[Path] = ()) -> list[str]:
    """One section per folder of ``contextlab compare`` results under ``root`` (not under a folder of
    ``skip``, resolved): a line per result (A - B with its 95% interval), the notes, and the plots;
    two folders comparing models of the same labels are told apart by their paths in the headings."""
    docs: dict[Path, list[dict]] = {}
    for f in sorted(root.rglob("compare_*.json")):
        here = f.parent.resolve()
        if any(here == t or t in here.parents for t in skip):
            continue
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("format") == COMPARE_FORMAT:
            docs.setdefault(f.parent, []).append(doc)
    out = []
    pairs = {
        folder: tuple(plain((found[0].get(s) or {}).get("label")) for s in ("a", "b"))
        for folder, found in docs.items()
    }
    for folder, found in docs.items():
        a, b = pairs[folder]
        where = ""
        if list(pairs.values()).count((a, b)) > 1:
            where = f" ({folder.relative_to(root)})" if folder != root else f" ({folder.name})"
        parts = [
            f"<h2>Comparison {html.escape(a)} - {html.escape(b)}{html.escape(where)}</h2>",
            muted(str(folder.resolve())),
            *[f"<p><b>{html.escape(line)}</b></p>" for d in found if (line := stale_comparison(d))],
            "<ul>",
        ]
        parts += [f"<li>{html.escape(line)}</li>" for d in found for line in d.get("lines", [])]
        parts.append("</ul>")
        said = [n for d in found for n in [*d.get("notes", []), d.get("scope")] if n]
        parts += [muted(n) for n in dict.fromkeys(said)]  # once each
        parts += [
            img(png, png.stem) for d in found if (png := folder / f"compare_{d.get('eval')}.png").exists()
        ]
        out.append("\n".join(parts))
    return _pooled_sections(root) + out


def stale_comparison(doc: dict) -> str:
    """One line when a comparison's A or B result was written again (or removed) since it was made:
    its lines are of results the page no longer shows ("" when both are as they were, or the files
    it names cannot be found from here)."""
    said = []
    for side in ("a", "b"):
        d = doc.get(side) if isinstance(doc.get(side), dict) else {}
        f = Path(str(d.get("result") or ""))
        if not d.get("result") or not f.is_absolute():  # relative to where compare ran: unknown here
            continue
        now = read_result(f)
        if now is None:
            said.append(f"{side.upper()}'s result {f} is gone")
        elif now.get("created") != d.get("created"):
            then, at = d.get("created"), now.get("created")
            said.append(f"{side.upper()}'s result was written again ({then} then, {at} now)")
    if not said:
        return ""
    return (
        f"stale: this {doc.get('eval')} comparison is of results since replaced: {'; '.join(said)}; run "
        "`contextlab compare` again (with --overwrite)"
    )


def _pooled_sections(root: Path) -> list[str]:
    """One section per ``pooled.json`` of ``contextlab compare --and`` under ``root``: the pooled lines
    (each headline's mean over the pairs, a t interval over pairs), the pairs and the notes."""
    out = []
    for f in sorted(root.rglob("pooled.json")):
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("format") != POOLED_FORMAT:
            continue
        pairs = doc.get("pairs") or []
        parts = [
            f"<h2>Pooled over {len(pairs)} pairs (A - B)</h2>",
            muted(str(f.parent.resolve())),
            "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in doc.get("lines", [])) + "</ul>",
            muted(
                "pairs: "
                + "; ".join(
                    f"{plain(p.get('a'))} - {plain(p.get('b'))} ({plain(p.get('folder'))})" for p in pairs
                )
            ),
        ]
        parts += [muted(n) for n in doc.get("notes", [])]
        out.append("\n".join(parts))
    return out
