"""How many optimizer steps until a small GPT copies from its context? A synthetic probe.

Rows of ``--context`` + 1 random token ids (drawn from the first ``--pool`` ids of a ``--vocab`` vocabulary)
in which spans recur, trained on with AdamW; every ``--every`` steps it prints the loss on the copied
tokens (a copy's first token left out: nothing predicts it) against the rest. Two layouts:

* ``fixed``: blocks of ``--span`` ids, each written twice in a row, so every copy lies exactly ``--span``
  positions after its original. A model can predict it by attending a fixed distance back (a
  positional shortcut), no induction needed.
* ``random``: ``--copies`` spans of ``--span`` ids per row, each copied to a random later position.
  Only content matching (induction: a previous-token head plus a head that matches on its output)
  predicts them.

    python scripts/induction_probe.py --layout fixed --pool 256 --steps 300
    python scripts/induction_probe.py --layout random --pool 400 --lr 3e-3 --span 16 --copies 6 --steps 500

Induction forming (docs/results.md, "Positive control"): at 32 rows x 32 tokens the copies' loss falls
from 4.4 to 2.7 nats between steps 15,000 and 16,000, where Aoyama et al.'s 10^5.7 x sqrt(rows x context)
tokens puts it (16M):

    python scripts/induction_probe.py --layout random --pool 256 --vocab 320 --context 32 --rows 32 \
        --span 6 --copies 2 --width 128 --lr 3e-3 --steps 30000 --every 1000

Last line: one JSON object with the last losses and the first step at which the copies' loss fell below
half of the rest (null: never).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from contextlab.models import GPT, GPTConfig


def batch(g: torch.Generator, a: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, context + 1) ids and the mask of the copied tokens a model can predict."""
    T = a.context
    if a.layout == "fixed":
        n = (T + 1) // (2 * a.span) + 1
        r = torch.randint(1, a.pool + 1, (a.rows, n, a.span), generator=g)
        x = torch.cat([r, r], dim=2).reshape(a.rows, -1)[:, : T + 1]
        pos = torch.arange(T + 1) % (2 * a.span)
        return x, (pos > a.span).expand(a.rows, -1).clone()
    x = torch.randint(1, a.pool + 1, (a.rows, T + 1), generator=g)
    copied = torch.zeros(a.rows, T + 1, dtype=torch.bool)
    for b in range(a.rows):
        for _ in range(a.copies):
            s = int(torch.randint(0, T - 2 * a.span, (1,), generator=g))
            d = int(torch.randint(s + a.span, T + 1 - a.span, (1,), generator=g))
            x[b, d : d + a.span] = x[b, s : s + a.span]
            copied[b, d + 1 : d + a.span] = True
    return x, copied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layout", choices=["fixed", "random"], default="random", help="where copies lie")
    ap.add_argument("--pool", type=int, default=400, help="ids the random tokens are drawn from")
    ap.add_argument("--vocab", type=int, default=4096, help="the model's vocabulary")
    ap.add_argument("--context", type=int, default=256, help="tokens per row")
    ap.add_argument("--rows", type=int, default=8, help="rows per step")
    ap.add_argument("--span", type=int, default=32, help="ids per copied span")
    ap.add_argument("--copies", type=int, default=6, help="random layout: copies per row")
    ap.add_argument("--layers", type=int, default=2, help="transformer blocks")
    ap.add_argument("--width", type=int, default=256, help="n_embd (4 heads)")
    ap.add_argument("--bias", action="store_true", help="biases in the Linear layers")
    ap.add_argument("--lr", type=float, default=2e-3, help="AdamW learning rate (constant)")
    ap.add_argument("--steps", type=int, default=500, help="optimizer steps")
    ap.add_argument("--every", type=int, default=50, help="print every N steps")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0, help="seed of the model and the data")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    g = torch.Generator().manual_seed(a.seed + 1)
    cfg = GPTConfig(
        vocab_size=a.vocab, n_layer=a.layers, n_head=4, n_embd=a.width, context=a.context, bias=a.bias
    )
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    t0, formed, last = time.time(), None, {}
    for step in range(1, a.steps + 1):
        x, copied = batch(g, a)
        logits = model(x[:, :-1]).logits.float()
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), x[:, 1:].reshape(-1), reduction="none")
        loss = loss.view(a.rows, -1)
        loss.mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if step % a.every == 0:
            c = copied[:, 1:]
            last = {"step": step, "copy": loss[c].mean().item(), "rest": loss[~c].mean().item()}
            if formed is None and last["copy"] < 0.5 * last["rest"]:
                formed = step
            secs = time.time() - t0
            print(f"step {step:>6}  copies {last['copy']:.3f}  rest {last['rest']:.3f}  {secs:.0f} s")
    print(json.dumps({**vars(a), **last, "copies_below_half_at": formed}))


if __name__ == "__main__":
    main()
