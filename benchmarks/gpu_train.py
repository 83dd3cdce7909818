"""GPU training throughput at the GPT-2-small shape: contextlab's trainer vs a nanoGPT-style loop vs HF.

All sides train 12 layers x 768 (12 heads), GPT-2's vocabulary (50,257, padded to 50,304), context
1024, bf16 autocast, ``torch.compile``, fused AdamW (beta 0.9/0.95, weight decay 0.1 on matrices),
gradient clipping at 1.0, on the same rows of a real token store (Gutenberg books, GPT-2 BPE):

- ``contextlab``: a real ``Trainer`` (train.compile = true), timing ``Trainer.train_step``: loader,
  host-to-device copy, forward, loss, backward, clip, optimizer step and reading the loss;
- ``plain``: a nanoGPT-style loop: nanoGPT's GPT-2 (LayerNorm, learned positions, biases, causal
  SDPA, tied output layer; ``benchmarks/train_throughput.py``), compiled, batches from pinned memory
  copied asynchronously and fetched while the GPU works, the loss read once per timed round
  (nanoGPT reads it every log interval);
- ``hf``: ``transformers.GPT2LMHeadModel`` (SDPA attention), compiled, the same loop as ``plain``.

Rounds alternate between the sides; each times ``--steps`` optimizer steps (after a warm-up that
compiles) between two device synchronisations, and the figure is the median over rounds. MFU =
tokens/s x training FLOPs per token (contextlab.train.flops: 6N + attention, the same for every
side since the shapes match) / the bf16 matmul peak measured on this GPU in this run (8192^3
products, 90th percentile). Memory: peak allocated during a round minus what was allocated
before it (activations, gradients, optimizer transients).

    python benchmarks/gpu_train.py --corpus DIR --tokenizer gpt2:DIR [--rounds 5] [--steps 10]

Last line: {"bench": "gpu_train", "device": ..., "tokens_per_s": ..., "ratio_vs_plain_loop": ...,
"mfu": ..., "ratio_vs_hf": ..., "plain_tokens_per_s": ..., "hf_tokens_per_s": ..., "peak_tflops": ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.train.config import RunConfig
from contextlab.train.flops import fast_rate, flops_per_token, time_matmul
from contextlab.train.optim import param_groups
from contextlab.train.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_throughput import NanoGPT


def make_trainer(store: Path, out: Path, args) -> Trainer:
    tokens = args.micro * args.accum * args.context
    cfg = {
        "model": {"size": args.size},
        "data": {"store": str(store), "val_split": "tail", "val_fraction": 0.01},
        "optim": {"lr": 6e-4, "warmup_steps": 10, "weight_decay": 0.1, "grad_clip": 1.0},
        "train": {
            "out_dir": str(out),
            "context": args.context,
            "tokens_per_step": tokens,
            "micro_batch_rows": args.micro,
            "max_steps": 10**6,
            "dtype": "bf16",
            "compile": not args.no_compile,
            "device": args.device,
            "progress": False,
            "val_tokens": args.context,
            "ckpt_every": 0,
            "peak_flops": 1.0,
        },
    }
    return Trainer(from_dict(RunConfig, cfg))


class PlainLoop:
    """A compiled model + fused AdamW + a loop that keeps the GPU fed (nanoGPT's train.py, reduced)."""

    def __init__(self, model: torch.nn.Module, loss_fn, trainer: Trainer, args):
        self.model = model.to(args.device)
        self.opt = torch.optim.AdamW(param_groups(self.model, 0.1), lr=6e-4, betas=(0.9, 0.95), fused=True)
        self.compiled = self.model if args.no_compile else torch.compile(self.model)
        self.loss_fn, self.loader, self.args = loss_fn, trainer.loader, args
        self.batch = self.fetch()
        self.last = None

    def fetch(self) -> torch.Tensor:
        rows = torch.from_numpy(self.loader.next_batch().tokens)
        if self.args.device == "cuda":
            rows = rows.pin_memory()
        return rows.to(self.args.device, non_blocking=True)

    def step(self) -> None:
        for i in range(self.args.accum):
            rows = self.batch[i * self.args.micro : (i + 1) * self.args.micro]
            with torch.autocast(self.args.device, dtype=torch.bfloat16):
                loss = self.loss_fn(self.compiled, rows) / self.args.accum
            if i == self.args.accum - 1:
                self.batch = self.fetch()  # the next batch is copied while this one computes
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.last = loss

    def read_loss(self) -> float:
        return float(self.last.detach()) * self.args.accum


def nanogpt_loss(model, rows: torch.Tensor) -> torch.Tensor:
    logits = model(rows[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())


def hf_loss(model, rows: torch.Tensor) -> torch.Tensor:
    return model(input_ids=rows[:, :-1], labels=rows[:, :-1]).loss  # HF shifts the labels itself


def hf_model(vocab: int, context: int, c) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=vocab,
        n_positions=context,
        n_embd=c.n_embd,
        n_layer=c.n_layer,
        n_head=c.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(cfg)
    try:
        model.set_attn_implementation("sdpa")
    except (AttributeError, ValueError):
        pass
    return model


def timed_round(step, finish, n: int, cuda: bool) -> tuple[float, float]:
    """(seconds for n steps, peak MB allocated above the start) between two synchronisations."""
    if not cuda:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        finish()
        return time.perf_counter() - t0, 0.0
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    finish()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, (torch.cuda.max_memory_allocated() - base) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="a folder of text (e.g. the Gutenberg books) to ingest")
    ap.add_argument(
        "--tokenizer", required=True, help="tokenizer spec, e.g. gpt2:DIR (GPT-2's 50,257 tokens)"
    )
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--micro", type=int, default=16, help="rows per forward pass")
    ap.add_argument("--accum", type=int, default=2, help="micro-batches per optimizer step")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds (median reported)")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per side first (compiles)")
    ap.add_argument("--sides", nargs="+", default=["contextlab", "plain", "hf"])
    ap.add_argument("--out", help="write the summary JSON here too")
    ap.add_argument("--size", default="gpt2-small", help="model size (contextlab.models.SIZES) of every side")
    ap.add_argument(
        "--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke test of the script"
    )
    ap.add_argument(
        "--no-compile", action="store_true", help="eager models (a smoke test; the figures compile)"
    )
    args = ap.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("gpu_train.py needs a CUDA GPU; benchmarks/train_throughput.py is the CPU benchmark")
    work = Path(tempfile.mkdtemp(prefix="gpu-train-"))
    name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = fast_rate(time_matmul(8192 if cuda else 1024, torch.bfloat16, args.device, seconds=2.0))
    print(
        f"torch {torch.__version__}, {name}, bf16 matmul peak {peak / 1e12:.0f} TFLOP/s "
        "(8192^3, measured now)",
        flush=True,
    )
    t0 = time.perf_counter()
    store = ingest(args.corpus, work / "store", IngestConfig(tokenizer=args.tokenizer), progress=False).store
    print(f"ingested {store.n_tokens:,} tokens in {time.perf_counter() - t0:.0f} s", flush=True)

    trainer = make_trainer(store.path, work / "run", args)
    c = trainer.model.config
    vocab = c.padded_vocab_size
    fpt = flops_per_token(trainer.model.config, args.context)
    tokens_per_step = args.micro * args.accum * args.context
    sides = {}
    if "contextlab" in args.sides:
        sides["contextlab"] = (trainer.train_step, lambda: None)
    if "plain" in args.sides:
        torch.manual_seed(0)
        plain = PlainLoop(
            NanoGPT(vocab, args.context, c.n_layer, c.n_embd, c.n_head), nanogpt_loss, trainer, args
        )
        sides["plain"] = (plain.step, plain.read_loss)
    if "hf" in args.sides:
        torch.manual_seed(0)
        hf = PlainLoop(hf_model(vocab, args.context, c), hf_loss, trainer, args)
        sides["hf"] = (hf.step, hf.read_loss)
    for side, (step, finish) in sides.items():
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            step()
        finish()
        if cuda:
            torch.cuda.synchronize()
        print(f"  {side:<11} warm-up (compile) {time.perf_counter() - t0:.0f} s", flush=True)

    rates: dict[str, list[float]] = {s: [] for s in sides}
    mems: dict[str, list[float]] = {s: [] for s in sides}
    for r in range(args.rounds):
        for side, (step, finish) in sides.items():
            sec, mb = timed_round(step, finish, args.steps, cuda)
            rates[side].append(tokens_per_step * args.steps / sec)
            mems[side].append(mb)
        print(f"  round {r + 1}: " + "   ".join(f"{s} {rates[s][-1]:,.0f} tok/s" for s in sides), flush=True)

    med = {s: statistics.median(v) for s, v in rates.items()}
    print(f"\n{'side':<11} {'tokens/s':>12} {'MFU':>7} {'step MB':>9}")
    for s in sides:
        print(f"{s:<11} {med[s]:>12,.0f} {med[s] * fpt / peak:>7.1%} {max(mems[s]):>9,.0f}")
    summary = {
        "bench": "gpu_train",
        "device": name,
        "torch": torch.__version__,
        "size": args.size,
        "context": args.context,
        "tokens_per_step": tokens_per_step,
        "micro_batch_rows": args.micro,
        "flops_per_token": fpt,
        "peak_tflops": round(peak / 1e12, 1),
    }
    if "contextlab" in med:
        summary.update(tokens_per_s=round(med["contextlab"]), mfu=round(med["contextlab"] * fpt / peak, 4))
        for ref, key in (("plain", "ratio_vs_plain_loop"), ("hf", "ratio_vs_hf")):
            if ref in med:
                summary[key] = round(med["contextlab"] / med[ref], 3)
    for s in sides:
        summary[f"{s}_tokens_per_s"] = round(med[s])
        summary[f"{s}_mfu"] = round(med[s] * fpt / peak, 4)
        summary[f"{s}_step_mb"] = round(max(mems[s]))
    summary["rounds"] = {s: [round(x) for x in v] for s, v in rates.items()}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
