"""Training throughput: contextlab's trainer vs ``transformers`` GPT2LMHeadModel, side by side.

For each shape, both sides train on the same batches (rows of a real token store) with the
same optimizer (AdamW, beta 0.9/0.95, weight decay 0.1, grad clip 1.0), batch and dtype:

- contextlab: a real ``Trainer`` built from a RunConfig, timing ``Trainer.train_step``
  (loader, forward, loss, backward, clip, optimizer step: everything a training step does);
- reference: ``transformers.GPT2LMHeadModel`` of the same depth, width, heads, vocabulary
  and context (no dropout, SDPA attention), a plain step: forward with labels, backward,
  clip, ``torch.optim.AdamW`` step;
- nanogpt: the issue's reference point, a plain nanoGPT-style loop: its own GPT-2 model
  (LayerNorm, learned positions, biases, causal SDPA, tied output layer) on one fixed batch,
  cross-entropy, AdamW with nanoGPT's two parameter groups;
- compiled: the same contextlab trainer with ``train.compile = true`` (skip with --no-compile).

Rounds alternate between the sides (the machine is noisy) and each round times ``--steps``
steps after warm-up; the figure is the median over rounds. MFU = tokens/s x training
FLOPs per token (contextlab.train.flops: 6N + attention) / the measured matmul peak of the
dtype (benchmarks/peak.py; cached). Shapes (the issue's):

- 4 layers x 256, byte vocabulary, context 256 (tinyshakespeare, byte store);
- 6 layers x 384, 8K vocabulary, context 512 (Gutenberg books, a BPE-8192 store trained here).

Last line: {"bench": "train_throughput", "tokens_per_s_bf16": ..., "ratio_vs_hf_bf16": ...,
"mfu_bf16": ..., "ratio_vs_nanogpt_bf16": ..., "compiled_tokens_per_s_bf16": ..., ...} for the
first shape (the eager trainer, its default; compiled_* for train.compile = true).

    python benchmarks/train_throughput.py [--rounds 5] [--steps 5] [--tokens-per-step 8192]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.train.config import RunConfig
from contextlab.train.flops import flops_per_token, measured_peak_flops
from contextlab.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def contextlab_trainer(
    store: Path,
    n_layer: int,
    n_embd: int,
    n_head: int,
    context: int,
    tokens: int,
    micro: int,
    dtype: str,
    out: Path,
    compiled: bool = False,
) -> Trainer:
    cfg = {
        "model": {"size": "tiny-4x256", "n_layer": n_layer, "n_embd": n_embd, "n_head": n_head},
        "data": {"store": str(store), "val_split": "tail", "val_fraction": 0.01},
        "optim": {"lr": 1e-3, "warmup_steps": 10, "weight_decay": 0.1, "grad_clip": 1.0},
        "train": {
            "out_dir": str(out),
            "context": context,
            "tokens_per_step": tokens,
            "micro_batch_rows": micro,
            "max_steps": 1000,
            "dtype": dtype,
            "progress": False,
            "val_tokens": context,
            "compile": compiled,
        },
    }
    return Trainer(from_dict(RunConfig, cfg))


class HFReference:
    """GPT2LMHeadModel of the same shape, fed the same rows as the trainer."""

    def __init__(self, trainer: Trainer, dtype: str):
        from transformers import GPT2Config, GPT2LMHeadModel

        c = trainer.model.config
        cfg = GPT2Config(
            vocab_size=c.vocab_size,
            n_positions=trainer.cfg.train.context,
            n_embd=c.n_embd,
            n_layer=c.n_layer,
            n_head=c.n_head,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        self.model = GPT2LMHeadModel(cfg)
        try:
            self.model.set_attn_implementation("sdpa")
        except (AttributeError, ValueError):
            pass
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
            lr=1e-3,
            betas=(0.9, 0.95),
        )
        self.trainer, self.dtype = trainer, dtype
        self.n_params = sum(p.numel() for p in self.model.parameters())

    def step(self) -> float:
        t = self.trainer
        batch = t.loader.next_batch()
        tokens = torch.from_numpy(batch.tokens)
        return optimizer_step(t, tokens, self.loss, self.model, self.opt, self.dtype)

    def loss(self, rows: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=rows[:, :-1], labels=rows[:, :-1]).loss  # HF shifts the labels itself


class NanoBlock(torch.nn.Module):
    """A GPT-2 block as nanoGPT writes it: LayerNorm, fused qkv, causal SDPA, GELU MLP, biases."""

    def __init__(self, d: int, n_head: int):
        super().__init__()
        nn = torch.nn
        self.n_head = n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (
            t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            for t in self.c_attn(self.ln_1(x)).split(C, dim=2)
        )
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x))))


class NanoGPT(torch.nn.Module):
    """The issue's reference point: a plain nanoGPT-style model (learned positions, tied output layer)."""

    def __init__(self, vocab: int, context: int, n_layer: int, d: int, n_head: int):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(context, d)
        self.h = torch.nn.ModuleList(NanoBlock(d, n_head) for _ in range(n_layer))
        self.ln_f = torch.nn.LayerNorm(d)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():  # nanoGPT's init: N(0, 0.02), residual projections / sqrt(2L)
            if p.dim() < 2:
                torch.nn.init.zeros_(p) if name.endswith("bias") else torch.nn.init.ones_(p)
            else:
                std = (
                    0.02 / (2 * n_layer) ** 0.5
                    if name.endswith(("c_proj.weight", "mlp_proj.weight"))
                    else 0.02
                )
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class PlainLoop:
    """A nanoGPT-style training loop: its own plain GPT-2 model, one fixed batch, F.cross_entropy,
    AdamW with nanoGPT's two parameter groups; no loader, no objective, no bookkeeping."""

    def __init__(self, trainer: Trainer, dtype: str):
        c = trainer.model.config
        torch.manual_seed(0)
        vocab = (
            -(-c.vocab_size // 64) * 64
        )  # nanoGPT pads its vocabulary to a multiple of 64 (50257 -> 50304)
        self.model = NanoGPT(vocab, trainer.cfg.train.context, c.n_layer, c.n_embd, c.n_head)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
            lr=1e-3,
            betas=(0.9, 0.95),
        )
        self.tokens = torch.from_numpy(trainer.loader.next_batch().tokens)
        self.trainer, self.dtype = trainer, dtype

    def step(self) -> float:
        return optimizer_step(self.trainer, self.tokens, self.loss, self.model, self.opt, self.dtype)

    def loss(self, rows: torch.Tensor) -> torch.Tensor:
        logits = self.model(rows[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())


def optimizer_step(trainer: Trainer, tokens: torch.Tensor, loss_fn, model, opt, dtype: str) -> float:
    """One step as the trainer takes it: micro-batches with accumulation, clip 1.0, AdamW step."""
    total = 0.0
    for i in range(trainer.accum):
        rows = tokens[i * trainer.micro : (i + 1) * trainer.micro]
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()
        with ctx:
            loss = loss_fn(rows)
        (loss / trainer.accum).backward()
        total += float(loss.detach()) / trainer.accum
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


def timed(step, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        step()
    return time.perf_counter() - start


def bench_shape(
    label: str, store: Path, shape: tuple[int, int, int], context: int, args, work: Path
) -> list[dict]:
    rows = []
    for dtype in ("fp32", "bf16"):
        n_layer, n_embd, n_head = shape
        make = lambda tag, compiled: contextlab_trainer(
            store,
            n_layer,
            n_embd,
            n_head,
            context,
            args.tokens_per_step,
            args.micro_batch_rows,
            dtype,
            work / f"{label}-{dtype}-{tag}",
            compiled,
        )
        trainer = make("eager", False)
        ref, plain = HFReference(trainer, dtype), PlainLoop(trainer, dtype)
        steps = {"contextlab": trainer.train_step, "hf": ref.step, "nanogpt": plain.step}
        if not args.no_compile:
            steps["compiled"] = make("compiled", True).train_step
        fpt = flops_per_token(trainer.model.config, context)
        peak = measured_peak_flops(torch.bfloat16 if dtype == "bf16" else torch.float32)
        for step in steps.values():  # warm-up: allocator, autocast caches, lazy init, torch.compile
            timed(step, 2)
        rates: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(args.rounds):
            for name, step in steps.items():
                rates[name].append(args.tokens_per_step * args.steps / timed(step, args.steps))
        tps = {name: statistics.median(r) for name, r in rates.items()}
        row = {
            "shape": label,
            "dtype": dtype,
            "peak_gflops": peak / 1e9,
            "flops_per_token": fpt,
            "params": trainer.model.num_params(False),
            "hf_params": ref.n_params,
        }
        for name, value in tps.items():
            row[f"{name}_tokens_per_s"] = value
            row[f"{name}_mfu"] = value * fpt / peak
        for name in ("contextlab", "compiled"):
            if name in tps:
                row[f"{name}_ratio_vs_hf"] = tps[name] / tps["hf"]
                row[f"{name}_ratio_vs_nanogpt"] = tps[name] / tps["nanogpt"]
        rows.append(row)
        text = "   ".join(
            f"{name} {value:>7,.0f} tok/s (MFU {value * fpt / peak:5.1%})" for name, value in tps.items()
        )
        print(f"  {label:<26} {dtype:<5} {text}", flush=True)
        del trainer, ref, plain, steps
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds (median reported)")
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps per round")
    ap.add_argument(
        "--tokens-per-step", type=int, default=8192, help="tokens per optimizer step (both sides)"
    )
    ap.add_argument("--micro-batch-rows", type=int, default=0, help="rows per forward; 0 = the whole step")
    ap.add_argument("--only-first", action="store_true", help="only the first shape (4x256, byte, ctx 256)")
    ap.add_argument(
        "--only-second", action="store_true", help="only the second shape (6x384, 8K vocab, ctx 512)"
    )
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="skip the torch.compile'd trainer (its warm-up takes about a minute per shape and dtype)",
    )
    args = ap.parse_args()
    data = Path(args.shared) / "data"
    work = Path(tempfile.mkdtemp(prefix="train-bench-"))
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; "
        f"{args.tokens_per_step} tokens/step, {args.rounds} rounds x {args.steps} steps"
    )
    byte_store = ingest(
        data / "tinyshakespeare" / "input.txt",
        work / "shakes",
        IngestConfig(tokenizer="byte"),
        progress=False,
    ).store.path
    rows = (
        []
        if args.only_second
        else bench_shape("4x256, byte vocab, ctx 256", byte_store, (4, 256, 4), 256, args, work)
    )
    if not args.only_first:
        books = sorted((data / "gutenberg_books" / "texts").glob("*.txt"))[:8]
        (work / "books").mkdir()
        for b in books:
            (work / "books" / b.name).write_bytes(b.read_bytes())
        bpe_store = ingest(
            work / "books", work / "bpe8k", IngestConfig(tokenizer="bpe:8192"), progress=False
        ).store.path
        rows += bench_shape("6x384, 8K vocab, ctx 512", bpe_store, (6, 384, 6), 512, args, work)
    first = {r["dtype"]: r for r in rows if r["shape"].startswith("4x256")}
    if not first:  # --only-second: the summary describes the second shape
        first = {r["dtype"]: r for r in rows}
    bf16, fp32 = first["bf16"], first["fp32"]
    summary = {
        "bench": "train_throughput",
        "shape": bf16["shape"],
        "tokens_per_s_bf16": round(bf16["contextlab_tokens_per_s"]),
        "ratio_vs_hf_bf16": round(bf16["contextlab_ratio_vs_hf"], 3),
        "mfu_bf16": round(bf16["contextlab_mfu"], 4),
        "ratio_vs_nanogpt_bf16": round(bf16["contextlab_ratio_vs_nanogpt"], 3),
        "nanogpt_tokens_per_s_bf16": round(bf16["nanogpt_tokens_per_s"]),
        "tokens_per_s_fp32": round(fp32["contextlab_tokens_per_s"]),
        "ratio_vs_hf_fp32": round(fp32["contextlab_ratio_vs_hf"], 3),
    }
    if "compiled_tokens_per_s" in bf16:
        summary.update(
            {
                "compiled_tokens_per_s_bf16": round(bf16["compiled_tokens_per_s"]),
                "compiled_ratio_vs_hf_bf16": round(bf16["compiled_ratio_vs_hf"], 3),
                "compiled_ratio_vs_nanogpt_bf16": round(bf16["compiled_ratio_vs_nanogpt"], 3),
                "compiled_mfu_bf16": round(bf16["compiled_mfu"], 4),
            }
        )
    summary["peak_bf16_gflops"] = round(bf16["peak_gflops"], 1)
    summary["rows"] = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
