"""Quick ablations of the sparse-parity training aids, without writing stores.

    .venv/bin/python scripts/parity_ablation.py --minutes 5 --queries 64 --bias-fraction 0.5 --lr 1e-3

Trains the seed's 3x208 RoPE transformer (or another shape) on freshly sampled parity data
for a few minutes and prints, every --every steps, the validation cross-entropy of 2,000
unmasked single-task rows of unbiased bits (exact Bayes risk 0), overall and by the far bit
of the task (11-20, 21-40, 41-60). Same model, data generator and objectives as recipe (a)
(``contextlab train recipes/parity_transformer.toml``); what it leaves out (stores,
checkpoints, the schedule's cosine decay unless --cosine) keeps a variant to one command.
Used for the comparisons in docs/results.md: one task per row vs --queries, with and without
--bias-fraction, learning rates.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from contextlab.data import synthetic as syn
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.objectives.last_token import LastToken
from contextlab.objectives.queries import Queries


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=5.0, help="wall-clock budget")
    p.add_argument("--rows", type=int, default=16, help="bit strings per step")
    p.add_argument(
        "--queries", type=int, default=64, help="tasks asked of each bit string (1 = the seed's rows)"
    )
    p.add_argument(
        "--bias-fraction", type=float, default=0.5, help="fraction of bit strings biased towards 0"
    )
    p.add_argument(
        "--mask-fraction", type=float, default=0.5, help="fraction with their farthest bits masked"
    )
    p.add_argument(
        "--lr", type=float, default=1e-3, help="AdamW learning rate (betas 0.9, 0.95; no weight decay)"
    )
    p.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    p.add_argument("--cosine", action="store_true", help="cosine decay to lr/10 over the budget")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--width", type=int, default=208)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--every", type=int, default=100, help="validate every this many steps")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = syn.ParityConfig(queries=a.queries, bias_fraction=a.bias_fraction, mask_fraction=a.mask_fraction)
    tasks = syn.make_tasks(cfg)
    rng = np.random.default_rng([a.seed, 1])
    val = syn.sample(syn.ParityConfig(), tasks, 2000, np.random.default_rng([a.seed, 99]))
    val_rows = torch.from_numpy(syn.to_tokens(val))  # (2000, L + 2): single-task rows, all bits visible
    val_far = tasks.far[val.task]
    model = GPT(
        GPTConfig(
            vocab_size=257,
            n_layer=a.layers,
            n_embd=a.width,
            n_head=a.heads,
            block_size=cfg.n_bits + 2 * a.queries,
            rope_base=4000.0,
        )
    )
    objective = (
        Queries(Queries.Options(n_queries=a.queries)) if a.queries > 1 else LastToken(LastToken.Options())
    )
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    print(f"{model.num_params():,} parameters; {a}", flush=True)

    t0, step = time.time(), 0
    while time.time() - t0 < a.minutes * 60:
        lr = a.lr * min(1.0, (step + 1) / a.warmup)
        if a.cosine:
            lr *= 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (time.time() - t0) / (a.minutes * 60))))
        for group in opt.param_groups:
            group["lr"] = lr
        rows = torch.from_numpy(syn.to_tokens(syn.sample(cfg, tasks, a.rows, rng)))
        with torch.autocast("cpu", torch.bfloat16):
            loss, _ = objective(model, rows)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % a.every == 0:
            with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
                logits = model(val_rows[:, :-1]).logits[:, -1].float()
            per = F.cross_entropy(logits, val_rows[:, -1], reduction="none").numpy()
            groups = " ".join(
                f"{per[(val_far >= lo) & (val_far <= hi)].mean():.3f}"
                for lo, hi in ((11, 20), (21, 40), (41, 60))
            )
            print(
                f"{time.time() - t0:6.0f}s step {step:5d} answers {step * a.rows * a.queries:9,d} "
                f"train {loss.item():.4f} val {per.mean():.4f} by far bit 11-20/21-40/41-60 [{groups}]",
                flush=True,
            )


if __name__ == "__main__":
    main()
