"""Per-task answer cross-entropy of a model trained on sparse parity.

    .venv/bin/python scripts/parity_tasks.py runs/parity_transformer runs/data/parity/val \
        [--contexts 60,50,30]

For each visible context l, the mean answer cross-entropy over all rows, the same loss
stratified by task (each task's mean loss weighted by its exact frequency, which removes the
noise of how often the rows happen to draw each task) next to the exact Bayes risk, and the
tasks whose two bits are visible (Bayes loss 0) but whose answer loss is above --threshold:
what a gap to the Bayes risk is made of (a task never learned costs its frequency x log 2;
a hidden task predicted with confidence costs more than log 2).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F

from contextlab.analysis.entropy import task_weighted
from contextlab.data import synthetic as syn
from contextlab.data.store import TokenStore
from contextlab.errors import UserError
from contextlab.inference import read_checkpoint


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a contextlab run trained on parity data")
    p.add_argument("store", help="a parity store written with queries=1 and bias_fraction=0")
    p.add_argument("--contexts", default="60,50,30", help="visible bits to score at (comma-separated)")
    p.add_argument("--samples", type=int, default=8000, help="rows of the store to score")
    p.add_argument(
        "--threshold", type=float, default=0.05, help="report visible tasks above this loss (nats)"
    )
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    store = TokenStore(a.store)
    found = syn.parity_of_store(store)
    if found is None or found[0].queries != 1:
        raise SystemExit(
            f"parity_tasks: error: {a.store} is not a single-task parity store "
            "(write one with `contextlab data synthetic parity`)"
        )
    cfg, tasks = found
    L = cfg.n_bits
    try:
        model = read_checkpoint(a.model, None).build()
    except UserError as exc:
        raise SystemExit(f"parity_tasks: error: {exc}") from None
    model.eval()
    n = min(a.samples, store.n_docs)
    rows = np.stack([np.asarray(store.doc(i), dtype=np.int64) for i in range(n)])  # (n, L + 2)
    task = rows[:, L] - syn.TASK_BASE
    for ctl in (int(c) for c in a.contexts.split(",")):
        x = torch.from_numpy(syn.mask_tokens(rows, L, ctl))
        with torch.no_grad():
            logits = torch.cat([model(x[i : i + 1000, :-1]).logits[:, -1].float() for i in range(0, n, 1000)])
        per = F.cross_entropy(logits, x[:, -1], reduction="none").numpy()
        by_task = np.array(
            [per[task == t].mean() if np.any(task == t) else np.nan for t in range(len(tasks.far))]
        )
        seen = tasks.far <= ctl
        drawn = ~np.isnan(by_task)
        weighted = task_weighted(per, task, tasks.freq)
        bayes = syn.bayes_risk(tasks, ctl)
        bad = [t for t in range(len(tasks.far)) if seen[t] and by_task[t] > a.threshold]
        print(
            f"l={ctl}: answer CE {per.mean():.4f}, task-weighted {weighted:.4f}, "
            f"exact Bayes risk {bayes:.4f}, "
            f"|weighted - Bayes| {abs(weighted - bayes):.4f}"
            f"{'' if drawn.all() else f' ({int((~drawn).sum())} tasks not drawn)'}; "
            f"{int(seen.sum()) - len(bad)} of {int(seen.sum())} visible tasks below {a.threshold} nats; "
            f"hidden tasks mean CE {np.nanmean(by_task[~seen]) if np.any(~seen) else float('nan'):.4f}"
        )
        for t in bad:
            print(
                f"    task {t:3d} (bits {tasks.near[t]:2d} and {tasks.far[t]:2d}, "
                f"frequency {tasks.freq[t]:.4f}): "
                f"CE {by_task[t]:.3f}"
            )


if __name__ == "__main__":
    main()
