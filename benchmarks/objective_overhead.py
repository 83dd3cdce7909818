"""Training-step time and peak memory of ContextLM and MTP relative to the GPT baseline.

Same decoder for all three (default 4 x 256, vocab 8192, context 512, 8 rows per step,
bf16 autocast on CPU, AdamW): ``clm`` on a GPT, ``contextlm`` (w=4, 2-layer predictor,
gated fusion) and ``mtp`` (n=4: 3 extra head blocks and output layers). Every (variant,
round) runs in a fresh process so that its memory high-water mark is its own:

- time: median seconds per optimizer step (forward, backward, AdamW) after warm-up steps;
- memory: peak RSS during training minus RSS before the model is built (weights,
  gradients, AdamW state, activations; the torch runtime itself is left out); with
  ``--device cuda`` the peak of torch's CUDA allocator minus what it held before the model.

Rounds rotate the variant order; the reported ratio is median(variant) / median(GPT)
over rounds. The seed claims +6.25% FLOPs and < 5% memory for ContextLM on GPUs.

    python benchmarks/objective_overhead.py [--rounds 3] [--steps 8] [--threads 2]
    python benchmarks/objective_overhead.py --device cuda --size gpt2-small --vocab 50257 \
        --context 1024 --rows 16

Last line: {"bench": "objective_overhead", "contextlm_time_ratio": ..., "contextlm_mem_ratio": ...,
"mtp_time_ratio": ..., "mtp_mem_ratio": ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "gpt": ("clm", {}),
    "contextlm": ("contextlm", {"chunk_size": 4, "predictor_layers": 2}),
    "mtp": ("mtp", {"n_future": 4}),
}


def _rss_kb(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def measure(variant: str, args) -> dict:
    """One variant in this process: median step seconds and peak training memory (MB)."""
    import torch

    from contextlab.models.archs import build_arch
    from contextlab.models.gpt import size_config
    from contextlab.objectives import OBJECTIVES, TrainModule
    from contextlab.train.flops import flops_per_token
    from contextlab.train.optim import make_adamw

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = args.device == "cuda"
    tokens = torch.randint(0, args.vocab, (args.rows, args.context + 1), device=args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    before = torch.cuda.memory_allocated() if cuda else _rss_kb("VmRSS:") * 1024
    name, options = VARIANTS[variant]
    cls = OBJECTIVES[name]
    objective = cls(cls.Options(**options))
    objective.bind_tokenizer({"vocab_size": args.vocab, "eot_id": args.vocab - 1})
    base = size_config(args.size, objective.vocab_size, args.context)
    model = build_arch(objective.arch, base, **objective.arch_options())
    module = TrainModule(model, objective).to(args.device)
    opt = make_adamw(module, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    times = []
    for step in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(args.device, dtype=torch.bfloat16):
            loss, _ = module(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if cuda else _rss_kb("VmHWM:") * 1024
    fpt = flops_per_token(model.config, args.context) + objective.extra_flops_per_token(
        model.config, args.context
    )
    return {
        "variant": variant,
        "step_s": statistics.median(times),
        "mem_mb": (peak - before) / 2**20,
        "params": sum(p.numel() for p in model.parameters()),
        "flops_per_token": fpt,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="tiny-4x256")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--context", "--seq-len", type=int, default=512, help="training context")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cuda: time with synchronisation, memory = peak allocated by torch minus before the model",
    )
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one variant and print JSON
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return

    names = list(VARIANTS)
    results: dict[str, list[dict]] = {n: [] for n in names}
    passthrough = [a for a in sys.argv[1:]]
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            out = subprocess.run(
                [sys.executable, __file__, *passthrough, "--one", n],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[n].append(json.loads(out.strip().splitlines()[-1]))
            row = results[n][-1]
            print(f"round {r + 1}  {n:<10} {row['step_s']:.3f} s/step  {row['mem_mb']:.0f} MB", flush=True)

    med = {n: {k: statistics.median(x[k] for x in results[n]) for k in ("step_s", "mem_mb")} for n in names}
    print(
        f"\n{'variant':<10} {'s/step':>8} {'x GPT':>6} {'MB':>7} {'x GPT':>6} {'params':>10} "
        f"{'FLOPs/tok x GPT':>16}"
    )
    for n in names:
        r0 = results[n][0]
        print(
            f"{n:<10} {med[n]['step_s']:>8.3f} {med[n]['step_s'] / med['gpt']['step_s']:>6.3f} "
            f"{med[n]['mem_mb']:>7.0f} {med[n]['mem_mb'] / med['gpt']['mem_mb']:>6.3f} {r0['params']:>10,} "
            f"{r0['flops_per_token'] / results['gpt'][0]['flops_per_token']:>16.3f}"
        )
    ratio = {
        f"{n}_{k}_ratio": round(med[n][m] / med["gpt"][m], 3)
        for n in ("contextlm", "mtp")
        for k, m in (("time", "step_s"), ("mem", "mem_mb"))
    }
    print(
        json.dumps(
            {
                "bench": "objective_overhead",
                "device": _device_name(args.device),
                "size": args.size,
                "context": args.context,
                "rows": args.rows,
                **ratio,
            }
        )
    )


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return "cpu"


if __name__ == "__main__":
    main()
