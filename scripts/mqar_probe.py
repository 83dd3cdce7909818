"""Short MQAR probes of what decides learnability: positions, width, heads, learning rate, vocabulary.

    python scripts/mqar_probe.py --train STORE --val STORE [--positions rope|learned|none] [--lr 1e-3]
        [--width 128] [--heads 2] [--layers 2] [--batch 64] [--steps 800] [--every 100] [--untied]
        [--embed-std 1.0]

Trains contextlab's GPT with the recall objective (loss on the answers only) on an MQAR store in a
plain AdamW loop (constant learning rate after a 50-step warm-up, weight decay 0.1 on matrices,
gradient clipping at 1, fp32, one thread) and prints the held-out MQAR accuracy (argmax over the
vocabulary at every answer of --val) every --every steps, then one JSON line. ``--positions``
swaps RoPE for learned absolute positions added to the token embeddings, or for none at all (NoPE),
without touching the model's code: the probe replaces the model's RoPE tables and embedding in
this process only. The recipe runs (``contextlab train``) stay the measure of record; this is
the cheap way to ask "is it RoPE?" (docs/mqar.md).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn

from contextlab.data.mqar import answer_positions, mqar_of_store
from contextlab.data.store import TokenStore
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.objectives.recall import Recall


def rows_of(path: str) -> tuple[np.ndarray, object]:
    store = TokenStore(path)
    return np.stack([np.asarray(store.doc(i), np.int64) for i in range(store.n_docs)]), mqar_of_store(store)


def build(args, vocab: int, T: int) -> GPT:
    torch.manual_seed(args.seed)
    cfg = GPTConfig(
        vocab_size=vocab,
        n_layer=args.layers,
        n_head=args.heads,
        n_embd=args.width,
        context=T,
        tie_embeddings=not args.untied,
    )
    model = GPT(cfg)
    if args.embed_std:
        nn.init.normal_(model.wte.weight, std=args.embed_std)
    if args.positions != "rope":
        model.rope = lambda *a, **k: None  # no rotation in any block
    if args.positions == "learned":
        model.wpe = nn.Embedding(T, args.width)
        nn.init.normal_(model.wpe.weight, std=0.02)
        model.embed = lambda idx: model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))[None]
    return model


@torch.no_grad()
def accuracy(model: GPT, rows: np.ndarray, keys: int) -> float:
    model.eval()
    at = answer_positions(rows, keys)
    hits = []
    for a in range(0, len(rows), 128):
        best = model(torch.from_numpy(rows[a : a + 128, :-1])).logits.argmax(-1).numpy()
        hits.append(best[at[a : a + 128, 1:]] == rows[a : a + 128][at[a : a + 128]])
    model.train()
    return float(np.concatenate(hits).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True)
    p.add_argument("--val", required=True)
    p.add_argument("--positions", choices=("rope", "learned", "none"), default="rope")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--untied", action="store_true", help="a separate output layer (contextlab ties it)")
    p.add_argument(
        "--embed-std", type=float, default=0.0, help="re-initialise the embeddings N(0, this); 0 = 0.02"
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    train, cfg = rows_of(args.train)
    val, _ = rows_of(args.val)
    T = train.shape[1] - 1
    model = build(args, cfg.keys + cfg.values + 2, T)
    obj = Recall(Recall.Options(key_ids=[0, cfg.keys]))
    decay = [q for q in model.parameters() if q.dim() >= 2]
    rest = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.wd}, {"params": rest, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    rng = np.random.default_rng(args.seed)
    t0, curve = time.time(), []
    for step in range(1, args.steps + 1):
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, step / 50)
        batch = torch.from_numpy(train[rng.integers(0, len(train), args.batch)])
        loss, _ = obj(model, batch)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % args.every == 0 or step == args.steps:
            acc = accuracy(model, val, cfg.keys)
            curve.append(
                {"step": step, "tokens": step * args.batch * T, "acc": acc, "loss": float(loss.detach())}
            )
            print(
                f"step {step:5d}  tokens {step * args.batch * T:>10,}  loss {float(loss):.3f}  "
                f"held-out acc {acc:.3f}  {time.time() - t0:6.0f}s",
                flush=True,
            )
    print(
        json.dumps(
            {
                "args": vars(args),
                "final_acc": curve[-1]["acc"],
                "seconds": round(time.time() - t0),
                "curve": curve,
            }
        )
    )


if __name__ == "__main__":
    main()
