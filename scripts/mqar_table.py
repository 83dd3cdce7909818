"""Reproduce the MQAR table of docs/mqar.md: held-out accuracy against training tokens per pair count.

    python scripts/mqar_table.py                       # 16, 32 and 64 pairs with recipes/mqar_cpu.toml
    python scripts/mqar_table.py --pairs 16 --steps 600 --set optim.lr=3e-3
    python scripts/mqar_table.py --pairs 4,16,32,64 --chain --tag _chain   # a curriculum

For each pair count N: writes a training store (seed 0) and a held-out store (seed 1) of
N-pair sequences under ``--data`` (kept when present), trains the recipe on them into
``--runs``/mqar_pN (``--set`` overrides go to every run; a finished run is kept, delete it to
retrain), then scores every checkpoint on the held-out sequences: the MQAR accuracy (argmax over
the whole vocabulary at every answer, ``contextlab.eval.mqar.vocab_hits``) with its Wilson
interval. Prints one row per checkpoint, then one line per N, and last one JSON object
``{"pairs_16": acc, ...}`` of the final checkpoints (plus the training minutes of each). With
``--chain`` each run starts from the model of the pair count before it (a curriculum; RoPE is
relative, so what was learned on short rows applies to long ones) and the JSON also gives the
minutes through each stage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def sh(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "contextlab", *args], check=True, cwd=ROOT)


def stores(root: Path, pairs: int, docs: int, val_docs: int, extra: list[str]) -> tuple[Path, Path]:
    train, val = root / f"p{pairs}", root / f"p{pairs}_val"
    for out, n, seed in ((train, docs, 0), (val, val_docs, 1)):
        if not (out / "meta.json").exists():
            sh(
                [
                    "data",
                    "synthetic",
                    "mqar",
                    "--out",
                    str(out),
                    "--pairs",
                    str(pairs),
                    "--docs",
                    str(n),
                    "--seed",
                    str(seed),
                    "--no-progress",
                    "--overwrite",
                    *extra,
                ]
            )
    return train, val


def score(run: Path, val: Path) -> list[dict]:
    """Held-out MQAR accuracy of every checkpoint of ``run``, oldest first."""
    from contextlab.data.mqar import mqar_of_store
    from contextlab.data.store import TokenStore
    from contextlab.eval import stats
    from contextlab.eval.adapter import load_model
    from contextlab.eval.mqar import vocab_hits

    store = TokenStore(val)
    cfg = mqar_of_store(store)
    rows = np.stack([np.asarray(store.doc(i), np.int64) for i in range(store.n_docs)])
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    by_step = {m["step"]: m for m in metrics}
    out = []
    for ck in sorted((run / "checkpoints").glob("step_*")):
        step = int(ck.name.split("_")[1])
        hits = vocab_hits(load_model(ck), rows, cfg.keys)
        p = stats.proportion(hits)
        m = by_step.get(step, {})
        out.append(
            {
                "step": step,
                "tokens": m.get("tokens"),
                "minutes": m.get("elapsed", float("nan")) / 60,
                "acc": p["accuracy"],
                "ci95": p["ci95"],
                "val_loss": m.get("val_loss"),
            }
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="16,32,64", help="pair counts, comma-separated")
    p.add_argument(
        "--steps",
        default="",
        help="training steps per pair count (comma-separated, or one for all); empty = the recipe's",
    )
    p.add_argument(
        "--minutes",
        default="",
        help="training minutes per pair count (comma-separated, or one for all); empty = the recipe's",
    )
    p.add_argument("--recipe", default=str(ROOT / "recipes/mqar_cpu.toml"))
    p.add_argument("--data", default=str(ROOT / "runs/data/mqar"), help="folder of the stores")
    p.add_argument("--runs", default=str(ROOT / "runs"), help="folder of the runs")
    p.add_argument("--tag", default="", help="suffix of the run names (runs/mqar_pN<tag>)")
    p.add_argument(
        "--answers",
        type=int,
        default=1024,
        help="answers per step: rows = this / pairs; 0 = the recipe's rows",
    )
    p.add_argument("--docs", type=int, default=100_000, help="training sequences per pair count")
    p.add_argument("--val-docs", type=int, default=256, help="held-out sequences per pair count")
    p.add_argument(
        "--store-set", action="append", default=[], help="extra option of the stores, e.g. --keys=512"
    )
    p.add_argument(
        "--chain",
        action="store_true",
        help="a curriculum: each pair count's run starts from the previous one's model (init.source)",
    )
    p.add_argument("--set", action="append", default=[], help="override of every run, e.g. optim.lr=3e-3")
    args = p.parse_args()
    pairs = [int(x) for x in args.pairs.split(",")]
    steps = [int(x) for x in args.steps.split(",")] if args.steps else []
    steps = steps * len(pairs) if len(steps) == 1 else steps
    minutes = [float(x) for x in args.minutes.split(",")] if args.minutes else []
    minutes = minutes * len(pairs) if len(minutes) == 1 else minutes
    final, prev, total = {}, None, 0.0
    for i, n in enumerate(pairs):
        train, val = stores(Path(args.data), n, args.docs, args.val_docs, args.store_set)
        run = Path(args.runs) / f"mqar_p{n}{args.tag}"
        sets = [
            f"data.store={train}",
            f"data.val_store={val}",
            f"train.out_dir={run}",
            "train.progress=false",
        ]
        sets += [f"train.rows_per_step={max(1, args.answers // n)}"] if args.answers else []
        sets += [f"train.max_steps={steps[i]}", "train.max_minutes=0"] if steps else []
        sets += [f"train.max_minutes={minutes[i]}"] if minutes else []
        sets += [f"init.source={prev}"] if args.chain and prev else []
        if not (run / "checkpoints").exists():
            t0 = time.time()
            sh(["train", args.recipe, *[a for s in sets + args.set for a in ("--set", s)]])
            print(f"trained {run} in {(time.time() - t0) / 60:.1f} min", flush=True)
        table = score(run, val)
        print(f"\n{n} pairs ({run}):  step  tokens  minutes  held-out accuracy [95% CI]  val loss")
        for r in table:
            vl = "-" if r["val_loss"] is None else f"{r['val_loss']:.3f}"
            print(
                f"  {r['step']:6d} {r['tokens'] or 0:>11,} {r['minutes']:6.1f}  {r['acc']:.3f} "
                f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]  {vl}",
                flush=True,
            )
        first = next((r for r in table if r["acc"] >= 0.9), None)
        reached = "never" if first is None else f"at {first['tokens']:,} tokens ({first['minutes']:.1f} min)"
        print(f"{n} pairs: final {table[-1]['acc']:.3f}; >= 0.9 {reached}")
        final[f"pairs_{n}"] = table[-1]["acc"]
        final[f"minutes_{n}"] = round(table[-1]["minutes"], 2)
        total += table[-1]["minutes"]
        if args.chain:
            final[f"minutes_through_{n}"] = round(total, 2)  # this stage and every stage before it
        prev = run
    print(json.dumps(final))


if __name__ == "__main__":
    main()
