"""Cost of document-masked attention against plain causal attention, at contexts 1K to 32K.

One attention layer of the GPT-2-small shape (12 heads of 64), forward + backward, with the
same number of tokens in every cell (``--tokens``, rows = tokens / context), three ways:

- ``causal``: ``F.scaled_dot_product_attention(is_causal=True)``, the unmasked fast path
  (flash attention on CUDA);
- ``doc_flex``: what contextlab trains with when ``data.doc_mask`` is set on a GPU: an
  ``AttentionMask`` of the rows' documents, its FlexAttention block mask built every step
  (included in the time) and compiled FlexAttention;
- ``doc_dense``: the dense (B, 1, T, T) boolean mask through SDPA (what the CPU uses, and what
  a GPU used before FlexAttention), until it runs out of memory.

Two document layouts: ``packed`` rows cut from a stream of documents whose lengths are those
of a token store (``--store``) or, by default, of the Python standard library's modules
(bytes / 4, about their BPE length: a real code corpus, many short documents, some long),
and ``one_doc`` rows that are each a single document (the worst case for
FlexAttention: nothing to skip, only its overhead). Memory: the peak of torch's CUDA allocator
during the step minus what it held before (inputs, outputs, gradients, mask and workspace); on
CPU each cell runs in a fresh process and reports its peak RSS growth. FlexAttention has no
CPU backward, so on CPU the training path is the dense mask (``masked_over_causal`` is
dense / causal there) and FlexAttention is timed forward only, against causal forward
(``flex_forward_over_causal_forward``).

    python benchmarks/attention_cost.py --device cuda                      # 1K .. 32K
    python benchmarks/attention_cost.py --device cpu --contexts 1024 2048 4096 --tokens 8192

Last line: {"bench": "attention_cost", "device": ..., "masked_over_causal": {"1024": ..., ...},
"masked_over_causal_one_doc": {...}, "dense_over_causal": {...}, "memory_mb": {...}, ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from contextlab.models.masks import AttentionMask, flex_attention

# fwd + bwd everywhere; on CPU FlexAttention has no backward, so it is timed forward only,
# against causal forward
VARIANTS = {
    "cuda": ("causal", "doc_flex", "doc_dense"),
    "cpu": ("causal", "doc_dense", "causal_fwd", "doc_flex_fwd"),
}


def doc_lengths(store: str | None) -> np.ndarray:
    """Document lengths in tokens: of a token store, or else the standard library's .py files in bytes / 4
    (about their GPT-2 BPE length): a real code corpus, many short documents and some long ones."""
    if store:
        from contextlab.data.store import TokenStore

        return TokenStore(store).lengths().astype(np.int64)
    root = Path(sysconfig.get_paths()["stdlib"])
    sizes = np.array([p.stat().st_size for p in sorted(root.rglob("*.py"))], dtype=np.int64)
    return np.maximum(sizes // 4, 1)


def packed_segments(rows: int, T: int, layout: str, lengths: np.ndarray, seed: int = 0) -> torch.Tensor:
    """(rows, T) document ids: a shuffled stream of documents of these lengths cut into rows,
    or one per row."""
    if layout == "one_doc":
        return torch.zeros(rows, T, dtype=torch.int64)
    rng = np.random.default_rng(seed)
    copies = -(-rows * T // int(lengths.sum())) + 1
    ends = np.cumsum(
        np.concatenate([rng.permutation(lengths) for _ in range(copies)])
    )  # documents in stream order
    stream = np.searchsorted(ends, np.arange(rows * T), side="right")  # the document of every position
    seg = torch.from_numpy(stream.reshape(rows, T))
    return seg - seg[:, :1]  # row-local ids, as the loader gives


def median_seconds(fn, reps: int, warmup: int, sync, after=lambda: None, before_timing=lambda: None) -> float:
    """Median wall seconds of ``fn`` over ``reps`` calls after ``warmup`` untimed ones,
    synchronising the device around each; ``after`` runs after every call (outside the
    clock), ``before_timing`` once after the warm-up."""
    for _ in range(warmup):
        fn()
        after()
    sync()
    before_timing()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        after()
    return statistics.median(times)


def cell(variant: str, T: int, args, layout: str) -> dict:
    """Median seconds of one forward + backward and the memory it needs."""
    dev = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    rows = max(1, args.tokens // T)
    H, D = args.heads, args.head_dim
    torch.manual_seed(0)
    backward = variant not in ("doc_flex_fwd", "causal_fwd")
    q, k, v = (torch.randn(rows, H, T, D, device=dev, dtype=dtype, requires_grad=backward) for _ in range(3))
    seg = packed_segments(rows, T, layout, doc_lengths(args.store)).to(dev)
    grad = torch.randn(rows, H, T, D, device=dev, dtype=dtype)

    def step():
        if variant in ("causal", "causal_fwd"):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif variant in ("doc_flex", "doc_flex_fwd"):
            out = flex_attention(q, k, v, AttentionMask(T, segments=seg, backend="flex").block_mask())
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=AttentionMask(T, segments=seg).dense())
        if backward:
            out.backward(grad)
        return out

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def clear():
        q.grad = k.grad = v.grad = None

    base = [0]

    def reset():  # after the warm-up (compile, autotune, allocator): what the step needs on top of this
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base[0] = torch.cuda.memory_allocated()

    try:
        with torch.set_grad_enabled(backward):
            sec = median_seconds(step, args.reps, args.warmup, sync, after=clear, before_timing=reset)
            mem = (torch.cuda.max_memory_allocated() - base[0]) / 2**20 if dev.type == "cuda" else None
    except torch.OutOfMemoryError:
        return {"variant": variant, "context": T, "layout": layout, "oom": True}
    return {
        "variant": variant,
        "context": T,
        "layout": layout,
        "rows": rows,
        "seconds": sec,
        "tokens_per_s": rows * T / sec,
        "memory_mb": mem,
        "backward": backward,
        "docs_per_row": float((seg[:, 1:] != seg[:, :-1]).sum(1).float().mean() + 1),
    }


def breakdown(T: int, args) -> dict:
    """Where a document-masked step's time goes (packed layout): building the block mask, FlexAttention
    forward and forward + backward with a prebuilt mask, against causal SDPA; milliseconds."""
    dev, dtype = torch.device(args.device), torch.bfloat16 if args.dtype == "bf16" else torch.float32
    rows = max(1, args.tokens // T)
    q, k, v = (
        torch.randn(rows, args.heads, T, args.head_dim, device=dev, dtype=dtype, requires_grad=True)
        for _ in range(3)
    )
    seg = packed_segments(rows, T, "packed", doc_lengths(args.store)).to(dev)
    mask = AttentionMask(T, segments=seg, backend="flex")
    prebuilt = mask.block_mask()

    def ms(fn) -> float:
        def clear():
            q.grad = k.grad = v.grad = None

        return 1e3 * median_seconds(fn, args.reps, args.warmup, torch.cuda.synchronize, after=clear)

    def fwd_bwd(out_fn):
        out_fn().sum().backward()

    with torch.no_grad():
        out = {
            "build": ms(mask.block_mask),
            "flex_fwd": ms(lambda: flex_attention(q, k, v, prebuilt)),
            "causal_fwd": ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        }
    out["flex_fwd_bwd"] = ms(lambda: fwd_bwd(lambda: flex_attention(q, k, v, prebuilt)))
    out["causal_fwd_bwd"] = ms(
        lambda: fwd_bwd(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    )
    out["flex_all"] = ms(lambda: fwd_bwd(lambda: flex_attention(q, k, v, mask.block_mask())))
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fwd_bwd(lambda: flex_attention(q, k, v, mask.block_mask()))
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25), flush=True)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12), flush=True)
        args.profile = False  # once
    return {k: round(x, 3) for k, x in out.items()}


def model_cell(masked: bool, T: int, args) -> dict:
    """A training step of a GPT (``--model`` size; bf16 autocast, eager layers, compiled FlexAttention):
    forward, cross-entropy, backward, AdamW; with the rows' documents masked or plain causal."""
    from contextlab.models.gpt import GPT

    dev = torch.device(args.device)
    rows = max(1, args.tokens // T)
    torch.manual_seed(0)
    model = GPT.from_size(args.model, 50257, T).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, 50257, (rows, T + 1), device=dev)
    seg = packed_segments(rows, T, "packed", doc_lengths(args.store)).to(dev)

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            mask = AttentionMask(T, segments=seg) if masked else None
            logits = model(idx[:, :-1], attn_mask=mask, is_causal=not masked).logits
            loss = F.cross_entropy(logits.float().flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    sec = median_seconds(
        step, args.reps, args.warmup, torch.cuda.synchronize, before_timing=torch.cuda.reset_peak_memory_stats
    )
    return {"seconds": sec, "memory_mb": torch.cuda.max_memory_allocated() / 2**20}


def cpu_cell(variant: str, T: int, args, layout: str) -> dict:
    """A CPU cell in a fresh process, so its peak RSS is its own."""
    cmd = [
        sys.executable,
        __file__,
        "--one",
        f"{variant}:{T}:{layout}",
        "--device",
        "cpu",
        "--dtype",
        args.dtype,
        "--tokens",
        str(args.tokens),
        "--reps",
        str(args.reps),
        "--warmup",
        str(args.warmup),
        "--heads",
        str(args.heads),
        "--head-dim",
        str(args.head_dim),
    ] + (["--store", args.store] if args.store else [])
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return {"variant": variant, "context": T, "layout": layout, "oom": True, "error": res.stderr[-300:]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def _rss_mb(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"]
    )
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768])
    ap.add_argument(
        "--tokens", type=int, default=32768, help="tokens per step in every cell (rows = tokens / context)"
    )
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10, help="timed steps per cell (median reported)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (FlexAttention compiles here)")
    ap.add_argument(
        "--store",
        help="take the document lengths of the packed rows from this token store "
        "(default: the Python standard library's modules, bytes / 4)",
    )
    ap.add_argument("--dense-max", type=int, default=16384, help="longest context tried with the dense mask")
    ap.add_argument(
        "--breakdown", action="store_true", help="CUDA: where the masked step's time goes, per context"
    )
    ap.add_argument(
        "--model",
        help="CUDA: also time whole training steps of this GPT size (e.g. gpt2-small), "
        "document-masked vs causal",
    )
    ap.add_argument(
        "--profile", action="store_true", help="with --breakdown: a profiler table at the first context"
    )
    ap.add_argument(
        "--model-contexts", type=int, nargs="+", help="contexts of the --model steps (default: --contexts)"
    )
    ap.add_argument(
        "--no-cells", action="store_true", help="only --breakdown / --model, not the attention table"
    )
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: one CPU cell "variant:T:layout", prints JSON
    args = ap.parse_args()
    if args.one:
        variant, T, layout = args.one.split(":")
        before = _rss_mb("VmRSS:")
        row = cell(variant, int(T), args, layout)
        row["memory_mb"] = _rss_mb("VmHWM:") - before
        print(json.dumps(row))
        return

    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"torch {torch.__version__}, {name}, {args.dtype}, {args.tokens} tokens per step, "
        f"{args.heads} heads x {args.head_dim}",
        flush=True,
    )
    if args.breakdown:
        for T in args.contexts:
            print(f"  breakdown T={T}: {json.dumps(breakdown(T, args))}", flush=True)
    if args.model:
        model_rows = {}
        for T in args.model_contexts or args.contexts:
            c, m = model_cell(False, T, args), model_cell(True, T, args)
            model_rows[str(T)] = {
                "causal_ms": round(c["seconds"] * 1e3, 2),
                "masked_ms": round(m["seconds"] * 1e3, 2),
                "masked_over_causal": round(m["seconds"] / c["seconds"], 3),
                "causal_mb": round(c["memory_mb"]),
                "masked_mb": round(m["memory_mb"]),
            }
            print(f"  {args.model} step T={T}: {json.dumps(model_rows[str(T)])}", flush=True)
    run = cell if args.device == "cuda" else cpu_cell
    results = []
    for T in [] if args.no_cells else args.contexts:
        for layout in ("packed", "one_doc"):
            for variant in VARIANTS[args.device]:
                if variant.startswith("causal") and layout == "one_doc":
                    continue  # causal ignores documents: one measurement serves both layouts
                if variant == "doc_dense" and (args.dense_max < T or layout == "one_doc"):
                    continue
                row = run(variant, T, args, layout)
                results.append(row)
                if row.get("oom"):
                    print(f"  T={T:>6} {layout:<8} {variant:<10} out of memory", flush=True)
                    continue
                mem = f"{row['memory_mb']:>9.0f} MB" if row["memory_mb"] is not None else ""
                print(
                    f"  T={T:>6} {layout:<8} {variant:<10} {row['seconds'] * 1e3:>9.2f} ms "
                    f"{row['tokens_per_s']:>12,.0f} tok/s {mem}  ({row['docs_per_row']:.1f} docs/row)"
                    + ("" if row["backward"] else "  forward only"),
                    flush=True,
                )

    def get(variant, T, layout="packed"):
        for r in results:
            if (r["variant"], r["context"], r["layout"]) == (variant, T, layout) and not r.get("oom"):
                return r
        return None

    summary = {
        "bench": "attention_cost",
        "device": name,
        "dtype": args.dtype,
        "tokens": args.tokens,
        "masked_over_causal": {},
        "masked_over_causal_one_doc": {},
        "dense_over_causal": {},
        "memory_mb": {},
        "causal_ms": {},
    }
    if args.model:
        summary["model"] = args.model
        summary["model_step"] = model_rows
    # masked = FlexAttention on CUDA, the dense mask on CPU (the path each device trains with)
    print(
        f"\n{'context':>8} {'causal ms':>10} {'masked/caus':>12} {'flex 1-doc':>11} {'dense/causal':>13} "
        f"{'MB causal':>10} {'MB flex':>9} {'MB dense':>9}"
    )
    cpu = args.device == "cpu"
    if cpu:
        summary["flex_forward_over_causal_forward"] = {}
    for T in args.contexts:
        c, d = get("causal", T), get("doc_dense", T)
        if cpu:  # the CPU trains with the dense mask; FlexAttention forward is compared with causal forward
            f, f1 = d, None
            cf, ff = get("causal_fwd", T), get("doc_flex_fwd", T)
            summary["flex_forward_over_causal_forward"][str(T)] = (
                None if cf is None or ff is None else round(ff["seconds"] / cf["seconds"], 3)
            )
        else:
            f, f1 = get("doc_flex", T), get("doc_flex", T, "one_doc")
        if c is None:
            continue
        key = str(T)
        ratio = lambda r: None if r is None else round(r["seconds"] / c["seconds"], 3)
        summary["causal_ms"][key] = round(c["seconds"] * 1e3, 3)
        summary["masked_over_causal"][key] = ratio(f)
        summary["masked_over_causal_one_doc"][key] = ratio(f1)
        summary["dense_over_causal"][key] = ratio(d)
        summary["memory_mb"][key] = {
            v: (None if r is None or r["memory_mb"] is None else round(r["memory_mb"], 1))
            for v, r in (("causal", c), ("doc_flex", f), ("doc_dense", d))
        }
        fmt = lambda x: "-" if x is None else f"{x:.2f}"
        m = summary["memory_mb"][key]
        print(
            f"{T:>8} {c['seconds'] * 1e3:>10.2f} {fmt(ratio(f)):>12} {fmt(ratio(f1)):>11} "
            f"{fmt(ratio(d)):>13} "
            f"{fmt(m['causal']):>10} {fmt(m['doc_flex']):>9} {fmt(m['doc_dense']):>9}"
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
