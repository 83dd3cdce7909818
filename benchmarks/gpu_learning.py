"""Does a model trained on this device learn? The trainer's CUDA path, one factor at a time.

On 2026-11-26 every model trained on an H200 (compiled, bf16, causal SDPA) stopped improving
after about 100 steps near the loss of a bigram model (train 5.5-5.7 nats/token, held-out 6.99),
while the same 4 x 256 model on the same store on the CPU (bf16, eager) passed 4.6 by step 120
with a quarter of the tokens per step. This benchmark trains the same short run in variants
that each change one thing, side by side in separate processes, and says which of them learn:

- ``compiled``: the trainer as the GPU studies run it (``train.compile = true``);
- ``eager``: ``train.compile = false``;
- ``compiled_contiguous``: compiled, with q, k and v made contiguous before SDPA (strided inputs
  are a known source of silent errors in compiled attention backward passes);
- ``compiled_plain_rmsnorm``: compiled, with PyTorch's own RMSNorm instead of the hand-written
  fp32 backward (a custom autograd.Function inside the compiled graph);
- ``compiled_math_sdpa``: compiled, with SDPA restricted to its math backend (no flash kernel);
- ``eager_unfused_adamw``: eager, with the for-each AdamW instead of the fused kernel;
- opt-in, for a CPU: ``compiled_sdpa`` and ``eager_sdpa`` force SDPA for bf16 attention (the
  CPU otherwise computes small bf16 attention with two matmuls), so compiled bf16 SDPA training
  can be compared with eager without a GPU;
- opt-in: ``compiled_doc_mask`` and ``eager_doc_mask`` train with ``data.doc_mask = true``
  (block-diagonal FlexAttention; the trainer refuses it compiled on CUDA, a refusal that this
  benchmark lifts in its own child process only), to check whether that refusal, measured with
  torch 2.11 before the RMSNorm fault was found, still stands.

A variant *learns* when its mean training loss over the last quarter of the steps is below
``--learns-below`` (default 5.0 nats/token: the broken runs sat at 5.5-5.7 from step 100 on, and
the CPU reference was under 4.8 by step 100 with 16K tokens per step). The verdict also names
the setting the studies should train with: compiled if ``compiled`` learns, else eager if
``eager`` learns, else none.

    python benchmarks/gpu_learning.py --store stores/lm_train --val-store stores/lm_heldout --out DIR
    python benchmarks/gpu_learning.py ... --device cpu --size tiny-2x128 --context 128 --rows 8 --steps 20
        (a rehearsal on the CPU: the same processes and outputs, seconds per variant)

The held-out loss of a count-based bigram table of the training store is printed beside them
(``bigram_heldout_loss``): a model that reads its context must get below it.

Last line: {"bench": "gpu_learning", "device": ..., "steps": ..., "learns_below": ...,
"bigram_heldout_loss": ...,
"variants": {name: {"loss_last_quarter": ..., "val_loss": ..., "tokens_per_s": ..., "learns": ...}},
"train_with": "compiled" | "eager" | "none" | "not run" (neither of the two ran)}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {  # name: (train.compile, patch applied in the child process before training)
    "compiled": (True, None),
    "eager": (False, None),
    "compiled_contiguous": (True, "contiguous"),
    "compiled_plain_rmsnorm": (True, "plain_rmsnorm"),
    "compiled_math_sdpa": (True, "math_sdpa"),
    "eager_unfused_adamw": (False, "unfused_adamw"),
    # opt-in (not in the default list): SDPA forced where the CPU takes two matmuls for bf16, so that
    # compiled bf16 SDPA training can be checked on a CPU; on CUDA the same as compiled / eager
    "compiled_sdpa": (True, "sdpa"),
    "eager_sdpa": (False, "sdpa"),
    # opt-in: document masks (FlexAttention block masks), compiled and eager
    "compiled_doc_mask": (True, "doc_mask"),
    "eager_doc_mask": (False, "doc_mask"),
}
OPT_IN = ("compiled_sdpa", "eager_sdpa", "compiled_doc_mask", "eager_doc_mask")
DEFAULT_VARIANTS = [v for v in VARIANTS if v not in OPT_IN]  # what the GPU's learning check runs


def apply_patch(name: str | None) -> None:
    """Change one thing in this process's contextlab before it trains (child processes only)."""
    if name is None:
        return
    import torch

    if name == "contiguous":
        import contextlab.models.attention as A

        original = A.attention

        def contiguous_attention(q, k, v, *args, **kwargs):
            return original(q.contiguous(), k.contiguous(), v.contiguous(), *args, **kwargs)

        A.attention = contiguous_attention
    elif name == "plain_rmsnorm":
        import contextlab.models.kernels as K

        K.RMSNorm.forward = torch.nn.RMSNorm.forward
    elif name == "math_sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        import contextlab.models.kernels as K

        original = K.F.scaled_dot_product_attention

        class _F:  # the module's F with SDPA under the math backend only
            def __getattr__(self, attr):
                return getattr(torch.nn.functional, attr)

            @staticmethod
            def scaled_dot_product_attention(*args, **kwargs):
                with sdpa_kernel(SDPBackend.MATH):
                    return original(*args, **kwargs)

        K.F = _F()
    elif name == "sdpa":
        import contextlab.models.kernels as K

        K.MATMUL_ATTENTION_MAX_SCORES = 0  # every bf16 CPU attention takes F.scaled_dot_product_attention
    elif name == "unfused_adamw":
        import contextlab.train.optim as O
        import contextlab.train.trainer as T

        def make_adamw(module, *, lr, weight_decay, betas, eps=1e-8):
            return torch.optim.AdamW(
                O.param_groups(module, weight_decay), lr=lr, betas=betas, eps=eps, foreach=True
            )

        T.make_adamw = make_adamw
    elif name == "doc_mask":  # the config asks for data.doc_mask; lift the trainer's CUDA refusal here only
        import contextlab.train.trainer as T

        build = T.Trainer._build_optimizer

        def build_unrefused(self):
            self.cfg.data.doc_mask = False  # read by the refusal only: the objective already holds its masks
            try:
                build(self)
            finally:
                self.cfg.data.doc_mask = True

        T.Trainer._build_optimizer = build_unrefused
    else:
        raise SystemExit(f"unknown patch {name!r}")
    print(f"patch applied: {name}", flush=True)


def bigram_heldout_loss(store: str, val_store: str, alpha: float = 0.1) -> float | None:
    """Held-out cross-entropy (nats/token) of a count-based bigram table of the training store, add-alpha
    smoothed toward the unigram: the loss a model reaches that uses one token of context and no more.
    None for vocabularies over 16,384 (the table would need more than 1 GB)."""
    import numpy as np

    from contextlab.data.store import TokenStore

    train, held = TokenStore(store), TokenStore(val_store)
    V = train.vocab_size
    if V > 16384 or held.n_tokens < 2:
        return None
    t = np.asarray(train.tokens, dtype=np.int64)
    unigram = (np.bincount(t, minlength=V) + 0.5) / (len(t) + 0.5 * V)
    pairs = np.bincount(t[:-1] * V + t[1:], minlength=V * V).astype(np.float32).reshape(V, V)
    rows = pairs.sum(1)
    h = np.asarray(held.tokens, dtype=np.int64)  # documents back to back: a few cross-document pairs
    p = (pairs[h[:-1], h[1:]] + alpha * V * unigram[h[1:]]) / (rows[h[:-1]] + alpha * V)
    return float(-np.log(p).mean())


def write_config(path: Path, a: argparse.Namespace, run_dir: Path, compile_: bool, doc_mask: bool) -> None:
    val = f'val_store = "{a.val_store}"\n' if a.val_store else ""
    path.write_text(
        f"""[model]
size = "{a.size}"
[data]
store = "{a.store}"
{val}mode = "packed"
doc_mask = {str(doc_mask).lower()}
[optim]
lr = {a.lr}
min_lr_ratio = 0.1
warmup_steps = {a.warmup}
weight_decay = 0.1
grad_clip = 1.0
[train]
out_dir = "{run_dir}"
context = {a.context}
tokens_per_step = {a.rows * a.context}
micro_batch_rows = {a.micro}
max_steps = {a.steps}
dtype = "{a.dtype}"
compile = {str(compile_).lower()}
device = "{a.device}"
log_every = {max(1, a.steps // 40)}
val_every = {a.steps}
val_tokens = {a.val_tokens}
ckpt_every = 0
progress = false
threads = {a.threads}
[objective]
name = "clm"
"""
    )


def read_run(run_dir: Path, steps: int) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in rows if "loss" in r]
    last = [r["loss"] for r in train if r["step"] > steps * 3 // 4] or [train[-1]["loss"]]
    vals = [r["val_loss"] for r in rows if "val_loss" in r]
    speeds = [r["tokens_per_s"] for r in train[1:] if "tokens_per_s" in r]
    return {
        "loss_last_quarter": round(statistics.fmean(last), 4),
        "val_loss": round(vals[-1], 4) if vals else None,
        "tokens_per_s": round(statistics.median(speeds)) if speeds else None,
        "curve": [(r["step"], round(r["loss"], 4)) for r in train],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True, help="training token store")
    p.add_argument("--val-store", default="", help="held-out token store (default: a split of --store)")
    p.add_argument("--out", required=True, help="folder for the runs, logs and learning.json")
    p.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, of: {', '.join(VARIANTS)} (default: all but {', '.join(OPT_IN)})",
    )
    p.add_argument(
        "--size", default="tiny-4x256", help="model size (default tiny-4x256, as the ContextLM study)"
    )
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--rows", type=int, default=64, help="rows per step (default 64: 65,536 tokens at 1024)")
    p.add_argument("--micro", type=int, default=32, help="micro-batch rows (default 32, as the studies)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (0: the trainer's default)")
    p.add_argument("--val-tokens", type=int, default=262144)
    p.add_argument("--parallel", type=int, default=3, help="variants trained at once (default 3)")
    p.add_argument("--learns-below", type=float, default=5.0, help="loss threshold of 'learns' (nats/token)")
    p.add_argument("--child", nargs=2, metavar=("PATCH", "CONFIG"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.child:  # one variant, in its own process: patch, then the trainer's command line
        apply_patch(None if a.child[0] == "-" else a.child[0])
        from contextlab.cli import main as cli_main

        return cli_main(["train", a.child[1]])

    names = [n.strip() for n in a.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    pending, running, done = list(names), {}, {}
    t0 = time.time()
    while pending or running:
        while pending and len(running) < a.parallel:
            name = pending.pop(0)
            compile_, patch = VARIANTS[name]
            run_dir = out / "runs" / name
            cfg = out / f"{name}.toml"
            write_config(cfg, a, run_dir, compile_, doc_mask=patch == "doc_mask")
            log = open(out / f"{name}.log", "w")
            cmd = [
                sys.executable,
                __file__,
                "--store",
                a.store,
                "--out",
                str(out),
                "--child",
                patch or "-",
                str(cfg),
            ]
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            running[name] = (
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env),
                log,
                time.time(),
            )
            print(f"started {name}", flush=True)
        time.sleep(1)
        for name in [n for n, (proc, _, _) in running.items() if proc.poll() is not None]:
            proc, log, start = running.pop(name)
            log.close()
            secs = round(time.time() - start, 1)
            if proc.returncode != 0:
                tail = (out / f"{name}.log").read_text().strip().splitlines()[-3:]
                done[name] = {"error": f"exit {proc.returncode}: " + " | ".join(tail), "seconds": secs}
                print(f"FAILED {name} after {secs} s: {done[name]['error']}", flush=True)
                continue
            done[name] = read_run(out / "runs" / name, a.steps) | {"seconds": secs}
            done[name]["learns"] = done[name]["loss_last_quarter"] < a.learns_below
            print(f"done {name} in {secs} s: last-quarter loss {done[name]['loss_last_quarter']}", flush=True)

    shape = f"{a.size}, context {a.context}, {a.dtype}, {a.device}"
    print(f"\n{a.steps} steps x {a.rows * a.context:,} tokens, {shape}")
    head = f"{'variant':<24} {'loss (last 1/4)':>16} {'val loss':>9} {'tokens/s':>11}"
    print(f"{head}  learns (< {a.learns_below})")
    for name in names:
        r = done[name]
        if "error" in r:
            print(f"{name:<24} {'failed':>16}  {r['error'][:80]}")
            continue
        print(
            f"{name:<24} {r['loss_last_quarter']:>16.4f} {r['val_loss'] or float('nan'):>9.4f} "
            f"{r['tokens_per_s'] or 0:>11,}  {'yes' if r['learns'] else 'NO'}"
        )
    bigram = bigram_heldout_loss(a.store, a.val_store) if a.val_store else None
    if bigram is not None:
        print(f"held-out loss of a bigram table of the training store (one token of context): {bigram:.4f}")
    learns = lambda n: bool(done.get(n, {}).get("learns"))
    ran = "compiled" in done or "eager" in done  # the verdict is about these two
    train_with = (
        "compiled" if learns("compiled") else "eager" if learns("eager") else "none" if ran else "not run"
    )
    print(f"train the studies with: {train_with} ({round(time.time() - t0)} s in all)")
    summary = {
        "bench": "gpu_learning",
        "device": a.device,
        "size": a.size,
        "context": a.context,
        "steps": a.steps,
        "tokens_per_step": a.rows * a.context,
        "learns_below": a.learns_below,
        "bigram_heldout_loss": None if bigram is None else round(bigram, 4),
        "variants": {n: {k: v for k, v in r.items() if k != "curve"} for n, r in done.items()},
        "train_with": train_with,
    }
    (out / "learning.json").write_text(
        json.dumps(summary | {"curves": {n: r.get("curve") for n, r in done.items()}})
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
