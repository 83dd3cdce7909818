"""Run recipes/splice_vs_ep_extension.toml end to end: data, pretraining, two extensions, evaluations, tables.

    .venv/bin/python scripts/splice_vs_ep_extension.py recipes/splice_vs_ep_extension.toml [--out DIR]

Every stage is an ordinary ``contextlab`` command (printed before it runs, so any number can
be reproduced by hand) except the corpus preparation, which is this script's own: hold out
every ``eval_every``-th book whole, cut the other books into paragraph-aligned pieces and
split them, book by book, into a "standard" half and a "long-context" half (the seed mixes
RedPajama with separately prepared long-context data; here both come from the books).
Stages whose outputs exist are skipped (training resumes from its checkpoints), so running
the command again after an interruption finishes the job. Wall time per stage goes to
``timings.json``; the tables to ``summary.md`` / ``summary.json``.

Trade-off: a plain sequential script over subprocesses instead of a sweep: the recipe has
a fixed shape (one base model, two arms) and the commands stay readable as documentation.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from contextlab.config import dumps_toml, read_toml
from contextlab.figures import pyplot, save_png

ARMS = {
    "ep": "example packing (EP)",
    "splice": "SPLICE-BM25",
}  # arm -> label; both mixed 50/50 with standard EP
MODELS = {"base": "start (256, no extension)", **ARMS}


def sh(cmd: list[str], timings: dict, stage: str, out: Path) -> None:
    print("\n$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    timings[stage] = round(timings.get(stage, 0.0) + time.perf_counter() - t0, 1)
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")


def contextlab(*args: str) -> list[str]:
    return [sys.executable, "-m", "contextlab", *args]


# ---------------------------------------------------------------------------- corpus


def prepare_corpus(recipe: dict, out: Path) -> dict[str, Path]:
    """Held-out books (links), the pretraining exclusion list, standard and long-context pieces (JSONL)."""
    c = recipe["corpus"]
    root = Path(c["books"])
    books = sorted(
        (json.loads(line) for line in (root / "manifest.jsonl").read_text().splitlines() if line.strip()),
        key=lambda b: b["ebook_id"],
    )
    held = books[:: c["eval_every"]]
    train_books = [b for b in books if b not in held]
    data = out / "data"
    paths = {
        "eval_books": data / "eval_books",
        "standard": data / "standard.jsonl",
        "long": data / "long.jsonl",
    }
    if all(p.exists() for p in paths.values()):
        return paths | {"exclude": [Path(b["file"]).name for b in held]}
    paths["eval_books"].mkdir(parents=True, exist_ok=True)
    for b in held:
        link = paths["eval_books"] / Path(b["file"]).name
        if not link.exists():
            link.symlink_to((root / b["file"]).resolve())
    halves = {"standard": [], "long": []}
    for i, b in enumerate(train_books):  # alternate books: each half has its own books
        text = (root / b["file"]).read_bytes().decode("utf-8")[b["body_start_char"] : b["body_end_char"]]
        text = text.replace("\r\n", "\n")
        for piece in cut_pieces(text, c["piece_chars"]):
            halves["standard" if i % 2 == 0 else "long"].append(
                {"text": piece, "domain": f"pg{b['ebook_id']}"}
            )
    for name, rows in halves.items():
        tmp = paths[name].with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.rename(paths[name])
    info = {
        "eval_books": [b["title"] for b in held],
        "train_books": len(train_books),
        "pieces": {k: len(v) for k, v in halves.items()},
    }
    (data / "corpus.json").write_text(json.dumps(info, indent=2) + "\n")
    return paths | {"exclude": [Path(b["file"]).name for b in held]}


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


# ---------------------------------------------------------------------------- stages


def build_data(recipe: dict, out: Path, corpus: dict, timings: dict) -> dict[str, Path]:
    c, pk = recipe["corpus"], recipe["pack"]
    stores = {k: out / "stores" / k for k in ("pretrain", "standard", "long", "eval")}
    if not (stores["pretrain"] / "meta.json").exists():
        sh(
            contextlab(
                "data",
                "ingest",
                str(Path(c["books"]) / "texts"),
                "--tokenizer",
                c["tokenizer"],
                "--bpe-sample-mb",
                str(c["bpe_sample_mb"]),
                "--exclude",
                ",".join(corpus["exclude"]),
                "--out",
                str(stores["pretrain"]),
                "--no-progress",
            ),
            timings,
            "ingest",
            out,
        )
    same_tok = f"store:{stores['pretrain']}"
    texts = str(Path(c["books"]) / "texts")
    for name, src, extra in (
        ("standard", corpus["standard"], ["--domain-field", "domain"]),
        ("long", corpus["long"], ["--domain-field", "domain"]),
        ("eval", texts, ["--include", ",".join(corpus["exclude"])]),
    ):  # the held-out books
        if not (stores[name] / "meta.json").exists():
            sh(
                contextlab(
                    "data",
                    "ingest",
                    str(src),
                    "--tokenizer",
                    same_tok,
                    *extra,
                    "--out",
                    str(stores[name]),
                    "--no-progress",
                ),
                timings,
                "ingest",
                out,
            )
    seq = str(recipe["extension"]["train"]["seq_len"] + 1)
    packed = {
        "standard_ep": (stores["standard"], ["--method", "ep"]),
        "long_ep": (stores["long"], ["--method", "ep"]),
        "long_splice": (
            stores["long"],
            [
                "--method",
                "splice",
                "--retriever",
                pk["retriever"],
                "--k",
                str(pk["k"]),
                "--order",
                pk["order"],
            ],
        ),
    }
    for name, (store, method) in packed.items():
        dest = out / "packed" / name
        if not (dest / "meta.json").exists():
            sh(
                contextlab(
                    "data",
                    "pack",
                    str(store),
                    *method,
                    "--seq-len",
                    seq,
                    "--seed",
                    str(pk["seed"]),
                    "--out",
                    str(dest),
                    "--no-progress",
                ),
                timings,
                "pack",
                out,
            )
    return {**stores, **{k: out / "packed" / k for k in packed}}


def write_config(section: dict, path: Path, **sets) -> Path:
    cfg = json.loads(json.dumps(section))
    for dotted, value in sets.items():
        a, b = dotted.split(".")
        cfg.setdefault(a, {})[b] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_toml(cfg))
    return path


def train_all(recipe: dict, out: Path, data: dict, timings: dict) -> dict[str, Path]:
    runs = {k: out / "runs" / k for k in MODELS}
    cfg = write_config(
        recipe["pretrain"],
        out / "configs" / "base.toml",
        **{"data.store": str(data["pretrain"]), "train.out_dir": str(runs["base"])},
    )
    sh(contextlab("train", str(cfg)), timings, "pretrain", out)
    for arm in ARMS:
        mixture = [
            {"packed": str(data["standard_ep"]), "weight": 0.5},
            {"packed": str(data[f"long_{arm}"]), "weight": 0.5},
        ]
        cfg = write_config(
            recipe["extension"],
            out / "configs" / f"{arm}.toml",
            **{"data.mixture": mixture, "train.out_dir": str(runs[arm])},
        )
        sh(contextlab("train", str(cfg), "--init-from", str(runs["base"])), timings, f"extend_{arm}", out)
    return runs


def evaluate_all(recipe: dict, out: Path, data: dict, runs: dict, corpus: dict, timings: dict) -> None:
    e = recipe["eval"]
    for name, run in runs.items():
        dest = out / "eval" / name
        jobs = {"contextwise": str(data["eval"]), "niah": str(corpus["eval_books"]), "kv": e["kv"]["data"]}
        for ev, d in jobs.items():
            if (dest / f"{ev}.json").exists():
                continue
            opts = []
            for k, v in e[ev].items():
                if k != "data":
                    opts += [
                        f"--{k.replace('_', '-')}",
                        ",".join(map(str, v)) if isinstance(v, list) else str(v),
                    ]
            sh(
                contextlab("eval", ev, "--model", str(run), "--data", d, "--out", str(dest), *opts),
                timings,
                f"eval_{name}",
                out,
            )


# ---------------------------------------------------------------------------- tables


def summarize(out: Path) -> str:
    res = {
        m: {
            ev: json.loads((out / "eval" / m / f"{ev}.json").read_text())["results"]
            for ev in ("contextwise", "niah", "kv")
        }
        for m in MODELS
    }
    lines = ["### Loss by position bucket (held-out books, nats/token)", ""]
    buckets = [b for b in res["base"]["contextwise"]["buckets"]]
    head = [f"{b['from']}-{b['to']}" for b in buckets]
    lines += ["| model | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for m, label in MODELS.items():
        bk = res[m]["contextwise"]["buckets"]
        lines.append(f"| {label} | " + " | ".join(f"{b['loss']:.3f}" for b in bk) + " |")
    niah = res["base"]["niah"]["heatmap"]
    lines += [
        "",
        "### Needle in a haystack (likelihood accuracy, 5 candidates; by prompt length)",
        "",
        "| model | " + " | ".join(str(x) for x in niah["cols_length"]) + " | all |",
        "|---|" + "---|" * (len(niah["cols_length"]) + 1),
    ]
    for m, label in MODELS.items():
        vals = res[m]["niah"]["heatmap"]["values"]  # rows depth, cols length
        by_len = [sum(r[j] for r in vals) / len(vals) for j in range(len(niah["cols_length"]))]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{v:.2f}" for v in by_len)
            + f" | {res[m]['niah']['summary']['likelihood_accuracy']:.2f} |"
        )
    lines += [
        "",
        "| model | " + " | ".join(f"depth {d:g}%" for d in niah["rows_depth"]) + " |",
        "|---|" + "---|" * len(niah["rows_depth"]),
    ]
    for m, label in MODELS.items():
        vals = res[m]["niah"]["heatmap"]["values"]
        lines.append(f"| {label} | " + " | ".join(f"{sum(r) / len(r):.2f}" for r in vals) + " |")
    kv = res["base"]["kv"]["by_position"]
    lines += [
        "",
        "### Key-value retrieval (likelihood accuracy, 5 candidates; by gold position)",
        "",
        "| model | " + " | ".join(f"pos {p}" for p in kv["positions"]) + " | all |",
        "|---|" + "---|" * (len(kv["positions"]) + 1),
    ]
    for m, label in MODELS.items():
        acc = res[m]["kv"]["by_position"]["accuracy"]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{a:.2f}" for a in acc)
            + f" | {res[m]['kv']['summary']['likelihood_accuracy']:.2f} |"
        )
    paired = out / "eval" / "paired.json"
    if paired.exists():
        lines += [
            "",
            "### SPLICE minus EP, paired over the same held-out windows (nats/token)",
            "",
            "| positions | SPLICE - EP | standard error | windows where SPLICE is better |",
            "|---|---|---|---|",
        ]
        for part, r in json.loads(paired.read_text()).items():
            lines.append(
                f"| {part.removeprefix('positions ')} | {r['splice_minus_ep']:+.4f} | {r['stderr']:.4f} | "
                f"{r['splice_better_in']} of {r['windows']} |"
            )
    timings = json.loads((out / "timings.json").read_text())
    lines += [
        "",
        "Wall time (s): "
        + ", ".join(f"{k} {v:.0f}" for k, v in timings.items())
        + f"; total {sum(timings.values()) / 60:.1f} min",
    ]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(res, indent=1, default=float) + "\n")
    plot_buckets(res, out / "buckets.png")
    plot_retrieval(res, out / "retrieval.png")
    return text


def paired_difference(recipe: dict, out: Path, data_eval: Path, timings: dict) -> dict:
    """SPLICE minus EP loss per window (the same held-out windows for both), mean and standard error,
    over positions before and after the pretraining context: is the gap larger than the
    window-to-window noise?"""
    dest = out / "eval" / "paired.json"
    if dest.exists():
        return json.loads(dest.read_text())
    import numpy as np

    from contextlab.data.store import TokenStore
    from contextlab.eval.adapter import load_model
    from contextlab.eval.contextwise import sequences

    t0 = time.perf_counter()
    cw = recipe["eval"]["contextwise"]
    store = TokenStore(data_eval)
    pieces = sequences(store, cw["length"], cw["max_docs"], cw["pieces_per_doc"])
    rows = np.stack([store.doc(d)[s : s + cw["length"]].astype(np.int64) for d, s in pieces])  # (N, L)
    split = recipe["pretrain"]["train"]["seq_len"]
    per_window = {}
    for arm in ARMS:
        lp = load_model(out / "runs" / arm).token_logprobs(rows).numpy()  # (N, L-1) log-probs
        per_window[arm] = (-lp[:, : split - 1].mean(1), -lp[:, split - 1 :].mean(1))  # within / beyond 256
    res = {}
    for i, part in enumerate((f"positions 1-{split - 1}", f"positions {split}-{cw['length'] - 1}")):
        diff = per_window["splice"][i] - per_window["ep"][i]  # (N,)
        res[part] = {
            "splice_minus_ep": float(diff.mean()),
            "stderr": float(diff.std(ddof=1) / np.sqrt(len(diff))),
            "windows": len(diff),
            "splice_better_in": int((diff < 0).sum()),
        }
    dest.write_text(json.dumps(res, indent=2) + "\n")
    timings["eval_paired"] = round(time.perf_counter() - t0, 1)
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    return res


def plot_buckets(res: dict, path: Path) -> None:
    """Mean loss in each 2^i position bucket, one line per model (per-position curves are too noisy)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, label in MODELS.items():
        bk = res[m]["contextwise"]["buckets"]
        ax.plot([b["from"] for b in bk], [b["loss"] for b in bk], marker="o", label=label)
    ax.axvline(256, color="grey", ls=":", lw=1, label="pretraining context")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("position bucket [2^i, 2^(i+1)) (tokens of context)")
    ax.set_ylabel("mean loss (nats/token)")
    ax.set_title("held-out books: loss by position bucket")
    ax.legend(fontsize=8)
    save_png(fig, path, dpi=120)


def plot_retrieval(res: dict, path: Path) -> None:
    """Needle accuracy by prompt length and key-value accuracy by gold position, one line per model."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for m, label in MODELS.items():
        h = res[m]["niah"]["heatmap"]
        by_len = [sum(r[j] for r in h["values"]) / len(h["values"]) for j in range(len(h["cols_length"]))]
        a.plot(h["cols_length"], by_len, marker="o", label=label)
        kv = res[m]["kv"]["by_position"]
        b.plot(kv["positions"], kv["accuracy"], marker="o", label=label)
    for ax, chance in (
        (a, res["base"]["niah"]["summary"].get("chance")),
        (b, res["base"]["kv"]["summary"].get("chance")),
    ):
        if chance:
            ax.axhline(chance, color="grey", ls=":", lw=1, label="chance")
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("likelihood accuracy")
    a.set_xscale("log", base=2)
    a.set_xlabel("needle prompt length (tokens)")
    a.set_title("needle in a haystack (held-out books)")
    b.set_xlabel("position of the gold pair (of 20)")
    b.set_title("key-value retrieval")
    b.legend(fontsize=8)
    save_png(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recipe", help="recipes/splice_vs_ep_extension.toml")
    p.add_argument("--out", help="output folder (default: the recipe's [out].dir)")
    p.add_argument("--tables-only", action="store_true", help="only redraw the tables and plots from eval/")
    args = p.parse_args(argv)
    recipe = read_toml(args.recipe)
    out = Path(args.out or recipe["out"]["dir"])
    if args.tables_only:  # (+ the paired difference, if missing)
        timings = json.loads((out / "timings.json").read_text())
        paired_difference(recipe, out, out / "stores" / "eval", timings)
        print(summarize(out))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    tf = out / "timings.json"
    timings = json.loads(tf.read_text()) if tf.exists() else {}
    t0 = time.perf_counter()
    corpus = prepare_corpus(recipe, out)
    timings["prepare"] = timings.get("prepare", round(time.perf_counter() - t0, 1))
    data = build_data(recipe, out, corpus, timings)
    runs = train_all(recipe, out, data, timings)
    evaluate_all(recipe, out, data, runs, corpus, timings)
    paired_difference(recipe, out, data["eval"], timings)
    print("\n" + summarize(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
