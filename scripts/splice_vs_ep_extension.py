"""Run recipes/splice_vs_ep_extension.toml end to end: data, pretraining, two extensions, evaluations, tables.

    .venv/bin/python scripts/splice_vs_ep_extension.py recipes/splice_vs_ep_extension.toml [--out DIR]

The study is a list of steps on ``contextlab.steps`` (state in ``OUT/steps.json``). Every step
is an ordinary ``contextlab`` command (printed before it runs, so any number can be
reproduced by hand) except two: the corpus preparation, which is this study's own (hold
out every ``eval_every``-th book whole, cut the other books into paragraph-aligned pieces
and split them, book by book, into a "standard" half and a "long-context" half; the seed
mixes RedPajama with separately prepared long-context data, here both come from the
books), and the paired SPLICE-minus-EP difference over the same held-out windows (the last
step, ``contextlab compare`` of the two arms, gives every evaluation's difference with 95%
intervals, books as clusters). A
finished step is skipped when the command is run again (a killed training resumes from its
checkpoints); a finished step whose settings changed in the recipe is refused. Wall time per
stage goes to ``timings.json``; the tables (``scripts/splice_vs_ep_tables.py``, from the
result files) to ``summary.md`` / ``summary.json``.

Trade-off: a fixed list of steps over subprocesses instead of a sweep: the recipe has a
fixed shape (one base model, two arms) and the commands stay readable as documentation.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from splice_vs_ep_tables import ARMS, MODELS, summarize  # the script beside this one

from contextlab.config import dumps_toml, read_toml
from contextlab.errors import UserError
from contextlab.io import atomic_write_json, atomic_write_text
from contextlab.steps import Step, StepRunner

EVALS = ("contextwise", "niah", "kv")
STATE_FILE = "steps.json"


def contextlab(*args: str) -> list[str]:
    return [sys.executable, "-m", "contextlab", *args]


def command_step(key: str, argv: list[str], outputs: list, after=(), config: tuple | None = None) -> Step:
    """A step that runs one ``contextlab`` command; its fingerprint is the command, the config file it
    writes first (``config`` = (path, dict)) and the fingerprints of the steps it reads (``after``)."""

    def run() -> None:
        if config is not None:
            atomic_write_text(config[0], dumps_toml(config[1]))
        print("\n$ " + " ".join(argv), flush=True)
        subprocess.run(argv, check=True)

    fp = {"args": argv[3:], "config": config and config[1], "after": [s.digest() for s in after]}
    return Step(key, fp, outputs, run)


# ---------------------------------------------------------------------------- corpus


def split_books(recipe: dict) -> tuple[list[dict], list[dict]]:
    """(held-out books, training books) of the manifest: every ``eval_every``-th by ebook id is held out."""
    c = recipe["corpus"]
    lines = (Path(c["books"]) / "manifest.jsonl").read_text().splitlines()
    books = sorted((json.loads(line) for line in lines if line.strip()), key=lambda b: b["ebook_id"])
    held = books[:: c["eval_every"]]
    return held, [b for b in books if b not in held]


def prepare_corpus(recipe: dict, out: Path) -> None:
    """Held-out books (copies), standard and long-context pieces (JSONL). An unchanged file is not rewritten
    (the ingest steps recognise their sources by size and modification time)."""
    c = recipe["corpus"]
    root, data = Path(c["books"]), out / "data"
    held, train_books = split_books(recipe)
    (data / "eval_books").mkdir(parents=True, exist_ok=True)
    for b in held:  # copies: niah reads a folder as data ingest does, which skips links out of it
        book, src = data / "eval_books" / Path(b["file"]).name, root / b["file"]
        if book.is_symlink() or not book.exists() or book.stat().st_size != src.stat().st_size:
            book.unlink(missing_ok=True)
            shutil.copy2(src, book)
    halves = {"standard": [], "long": []}
    for i, b in enumerate(train_books):  # alternate books: each half has its own books
        text = (root / b["file"]).read_bytes().decode("utf-8")[b["body_start_char"] : b["body_end_char"]]
        for piece in cut_pieces(text.replace("\r\n", "\n"), c["piece_chars"]):
            halves["standard" if i % 2 == 0 else "long"].append(
                {"text": piece, "domain": f"pg{b['ebook_id']}"}
            )
    for name, rows in halves.items():
        text = "".join(json.dumps(r) + "\n" for r in rows)
        path = data / f"{name}.jsonl"
        if not path.exists() or path.read_text() != text:
            atomic_write_text(path, text)
    info = {
        "eval_books": [b["title"] for b in held],
        "train_books": len(train_books),
        "pieces": {k: len(v) for k, v in halves.items()},
    }
    atomic_write_json(data / "corpus.json", info)


def cut_pieces(text: str, min_chars: int) -> list[str]:
    """Paragraph-aligned pieces of at least ``min_chars`` characters (the last one may be shorter)."""
    pieces, cur = [], []
    size = 0
    for para in text.split("\n\n"):
        if not para.strip():
            continue
        cur.append(para.strip())
        size += len(para)
        if size >= min_chars:
            pieces.append("\n\n".join(cur))
            cur, size = [], 0
    if cur:
        pieces.append("\n\n".join(cur))
    return pieces


# ---------------------------------------------------------------------------- the steps


def ingest_steps(recipe: dict, out: Path) -> dict[str, Step]:
    """Prepare the corpus; ingest the pretraining books (training the BPE), then three stores with it."""
    c, stores = recipe["corpus"], out / "stores"
    held = [Path(b["file"]).name for b in split_books(recipe)[0]]
    exclude = ",".join(held)
    texts, data = str(Path(c["books"]) / "texts"), out / "data"
    made = [data / "standard.jsonl", data / "long.jsonl", data / "eval_books"]
    prep = Step("prepare", {"corpus": c}, made, lambda: prepare_corpus(recipe, out))
    bpe = ["--tokenizer", c["tokenizer"], "--bpe-sample-mb", str(c["bpe_sample_mb"])]
    where = ["--out", str(stores / "pretrain"), "--no-progress"]
    if c.get("pretrain_extra"):  # pretrain on the training books and a folder beside texts/ (code, docs)
        pick = [
            "--include",
            f"texts/*,{c['pretrain_extra']}/",
            "--exclude",
            ",".join(f"texts/{n}" for n in held),
        ]
        argv = contextlab("data", "ingest", c["books"], *bpe, *pick, *where)
    else:
        argv = contextlab("data", "ingest", texts, *bpe, "--exclude", exclude, *where)
    steps = {"prepare": prep, "ingest pretrain": command_step("ingest pretrain", argv, [stores / "pretrain"])}
    same = ["--tokenizer", f"store:{stores / 'pretrain'}"]
    for name, src, extra in (
        ("standard", data / "standard.jsonl", ["--domain-field", "domain"]),
        ("long", data / "long.jsonl", ["--domain-field", "domain"]),
        ("eval", texts, ["--include", exclude]),  # the held-out books
    ):
        argv = contextlab(
            "data", "ingest", str(src), *same, *extra, "--out", str(stores / name), "--no-progress"
        )
        after = [prep, steps["ingest pretrain"]]
        steps[f"ingest {name}"] = command_step(f"ingest {name}", argv, [stores / name], after)
    return steps


def pack_steps(recipe: dict, out: Path, ingested: dict) -> dict[str, Step]:
    """Pack the standard pieces with EP and the long-context pieces with EP and with SPLICE."""
    pk = recipe["pack"]
    splice = [
        "--method",
        "splice",
        "--retriever",
        pk["retriever"],
        "--k",
        str(pk["k"]),
        "--order",
        pk["order"],
    ]
    common = ["--context", str(recipe["extension"]["train"]["context"]), "--seed", str(pk["seed"])]
    # every document packed unless the recipe holds some out: the evaluations read the books the corpus
    # step held out whole (eval_every), and the recorded studies were packed so
    common += ["--val-fraction", str(pk.get("val_fraction", 0.0))]
    steps = {}
    for name, store, method in (
        ("standard_ep", "standard", ["--method", "ep"]),
        ("long_ep", "long", ["--method", "ep"]),
        ("long_splice", "long", splice),
    ):
        dest = out / "packed" / name
        argv = contextlab("data", "pack", str(out / "stores" / store), *method, *common, "--out", str(dest))
        after = [ingested[f"ingest {store}"]]
        steps[f"pack {name}"] = command_step(f"pack {name}", [*argv, "--no-progress"], [dest], after)
    return steps


def data_steps(recipe: dict, out: Path) -> list[tuple[str, Step]]:
    """(stage, step): prepare the corpus, ingest four stores with one tokenizer, pack three ways."""
    ingested = ingest_steps(recipe, out)
    steps = {**ingested, **pack_steps(recipe, out, ingested)}
    return [(k.split()[0], s) for k, s in steps.items()]  # stage: prepare, ingest or pack


def with_keys(section: dict, **sets) -> dict:
    """A copy of a recipe section with ``a.b = value`` keys set."""
    cfg = json.loads(json.dumps(section))
    for dotted, value in sets.items():
        a, b = dotted.split(".")
        cfg.setdefault(a, {})[b] = value
    return cfg


def train_steps(recipe: dict, out: Path, data: dict) -> dict[str, Step]:
    """Model name -> step: pretrain the base model, then extend it once per arm on its mixture."""
    runs = {k: out / "runs" / k for k in MODELS}
    sets = {"data.store": str(out / "stores" / "pretrain"), "train.out_dir": str(runs["base"])}
    path = out / "configs" / "base.toml"
    argv = contextlab("train", str(path))
    after = [data["ingest pretrain"]]
    cfg = with_keys(recipe["pretrain"], **sets)
    steps = {"base": command_step("pretrain", argv, [runs["base"] / "config.toml"], after, (path, cfg))}
    for arm in ARMS:
        mixture = [
            {"packed": str(out / "packed" / "standard_ep"), "weight": 0.5},
            {"packed": str(out / "packed" / f"long_{arm}"), "weight": 0.5},
        ]
        cfg = with_keys(recipe["extension"], **{"data.mixture": mixture, "train.out_dir": str(runs[arm])})
        path = out / "configs" / f"{arm}.toml"
        argv = contextlab("train", str(path), "--init-from", str(runs["base"]))
        after = [steps["base"], data["pack standard_ep"], data[f"pack long_{arm}"]]
        steps[arm] = command_step(f"extend {arm}", argv, [runs[arm] / "config.toml"], after, (path, cfg))
    return steps


def model_steps(recipe: dict, out: Path, data: dict) -> list[tuple[str, Step]]:
    """(stage, step): train the three models, evaluate each, then the paired SPLICE - EP difference (the
    study's own, windows as units) and ``contextlab compare`` of the two arms (every evaluation, books as
    clusters, 95% intervals)."""
    train = train_steps(recipe, out, data)
    steps = [("pretrain", train["base"])] + [(f"extend_{arm}", train[arm]) for arm in ARMS]
    for name in MODELS:
        after = [train[name], data["prepare"], data["ingest eval"]]
        steps += [(f"eval_{name}", eval_step(recipe, out, name, ev, after)) for ev in EVALS]
    fp = {
        "contextwise": recipe["eval"]["contextwise"],
        "split": recipe["pretrain"]["train"]["context"],
        "after": [train[arm].digest() for arm in ARMS] + [data["ingest eval"].digest()],
    }
    run = lambda: paired_difference(recipe, out, out / "stores" / "eval")
    evals = {s.key: s for _, s in steps}
    after = [evals[f"eval {arm} {ev}"] for arm in ("splice", "ep") for ev in EVALS]
    argv = contextlab(
        "compare", *(str(out / "eval" / arm) for arm in ("splice", "ep")), "--out", str(out / "compare")
    )
    compare = command_step("compare", argv, [out / "compare" / "compare_contextwise.json"], after)
    return steps + [
        ("eval_paired", Step("paired", fp, [out / "eval" / "paired.json"], run)),
        ("eval_compare", compare),
    ]


def eval_step(recipe: dict, out: Path, name: str, ev: str, after: list) -> Step:
    """``contextlab eval EV`` of model ``name`` on the held-out books (key-value data: the recipe's file)."""
    e, dest = recipe["eval"], out / "eval" / name
    data = {
        "contextwise": str(out / "stores" / "eval"),
        "niah": str(out / "data" / "eval_books"),
        "kv": e["kv"]["data"],
    }[ev]
    opts = []
    for k, v in e[ev].items():
        if k != "data":
            opts += [f"--{k.replace('_', '-')}", ",".join(map(str, v)) if isinstance(v, list) else str(v)]
    argv = contextlab(
        "eval",
        ev,
        "--model",
        str(out / "runs" / name),
        "--data",
        data,
        "--out",
        str(dest),
        "--overwrite",
        *opts,
    )
    return command_step(f"eval {name} {ev}", argv, [dest / f"{ev}.json"], after)


def plan(recipe: dict, out: Path) -> list[tuple[str, Step]]:
    """Every step of the study in order, with the stage its wall time is counted in."""
    data = data_steps(recipe, out)
    return data + model_steps(recipe, out, {s.key: s for _, s in data})


def write_timings(runner: StepRunner, steps: list[tuple[str, Step]], out: Path) -> dict:
    """Wall time per stage (seconds, summed over its steps) to OUT/timings.json."""
    timings: dict = {}
    for stage, step in steps:
        if step.key in runner.seconds:
            timings[stage] = round(timings.get(stage, 0.0) + runner.seconds[step.key], 1)
    atomic_write_json(out / "timings.json", timings)
    return timings


# ---------------------------------------------------------------------------- paired difference


def paired_difference(recipe: dict, out: Path, data_eval: Path) -> dict:
    """SPLICE minus EP loss per window (the same held-out windows for both), mean and standard error,
    over positions before and after the pretraining context: is the gap larger than the window-to-window
    noise?"""
    import numpy as np

    from contextlab.data.store import TokenStore
    from contextlab.eval.adapter import load_model
    from contextlab.eval.contextwise import scan
    from contextlab.eval.pieces import sequences

    cw = recipe["eval"]["contextwise"]
    store = TokenStore(data_eval)
    pieces = sequences(store, cw["length"], cw["max_docs"], cw["pieces_per_doc"])
    rows = np.stack([store.doc(d)[s : s + cw["length"]].astype(np.int64) for d, s in pieces])  # (N, L)
    split = recipe["pretrain"]["train"]["context"]
    run = {k: cw[k] for k in ("dtype", "device", "batch_size") if k in cw}  # as the contextwise evaluation
    ranges = [(1, split - 1), (split, cw["length"] - 1)]  # context lengths within / beyond pretraining
    per_window = {arm: scan(load_model(out / "runs" / arm, **run), rows, ranges)[2] for arm in ARMS}  # (N, 2)
    res = {}
    for i, part in enumerate((f"positions 1-{split - 1}", f"positions {split}-{cw['length'] - 1}")):
        diff = per_window["splice"][:, i] - per_window["ep"][:, i]  # (N,)
        res[part] = {
            "splice_minus_ep": float(diff.mean()),
            "stderr": float(diff.std(ddof=1) / np.sqrt(len(diff))),
            "windows": len(diff),
            "splice_better_in": int((diff < 0).sum()),
        }
    atomic_write_json(out / "eval" / "paired.json", res)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recipe", help="recipes/splice_vs_ep_extension.toml")
    p.add_argument("--out", help="output folder (default: the recipe's [out].dir)")
    p.add_argument("--tables-only", action="store_true", help="only redraw the tables and plots from eval/")
    args = p.parse_args(argv)
    recipe = read_toml(args.recipe)
    out = Path(args.out or recipe["out"]["dir"])

    def refuse(step: Step) -> None:
        raise UserError(
            f"{step.outputs[0]} was made with other recipe settings; delete it (and what was made from "
            f"it) or pass --out NEW_DIR"
        )

    runner = StepRunner(out / STATE_FILE, on_change=refuse)
    steps = plan(recipe, out)
    try:
        for _, step in steps[-1:] if args.tables_only else steps:  # tables only: + the paired difference
            runner.run(step)
            write_timings(runner, steps, out)
    except subprocess.CalledProcessError as exc:  # the command printed its own error
        return exc.returncode
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n" + summarize(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
