"""Self-speculative greedy decoding vs plain cached greedy decoding of the same MTP model.

The model is a run trained by ``recipes/mtp_code.toml`` (``scripts/speculative.sh`` makes it);
the prompts are held-out code: windows of documents of a token store the model never trained
on (the recipe's held-out store is the standard library's test packages, which the training
store excludes), each at a seeded random offset. Both decoders run greedily at batch 1 in one
dtype (``--dtype``: fp32, or the model cast to bf16), on the same prompts, alternating in one
process (``--repeats`` passes over all prompts; the medians of the pass times are compared).
Plain decoding is ``models.decode.generate`` (what ``contextlab generate`` runs: one cached
forward of the next-token model, trunk + head 1, per token); speculative decoding is
``models.speculative.speculative_greedy``. It also prints each head's held-out loss on the
prompt windows (head k predicts the token k steps ahead): drafts are accepted only when
heads 2..n learned something. The machine is shared, so only the side-by-side ratio means
anything. The last line is one JSON object.

    python benchmarks/speculative.py RUN --heldout STORE [--step N] [--prompts 8]
        [--prompt-tokens 256] [--new-tokens 128] [--repeats 3] [--threads 1] [--seed 0]
        [--dtype fp32|bf16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from contextlab.data.store import TokenStore
from contextlab.errors import UserError
from contextlab.inference import read_checkpoint
from contextlab.inference.decode import generate
from contextlab.inference.speculative import SpeculativeStats, check_speculative, speculative_greedy


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="an MTP run directory or checkpoint (recipes/mtp_code.toml)")
    p.add_argument("--heldout", required=True, help="token store of documents the model did not train on")
    p.add_argument("--step", type=int, default=None, help="checkpoint step; default: the newest")
    p.add_argument("--prompts", type=int, default=8, help="held-out prompts (one per document)")
    p.add_argument("--prompt-tokens", type=int, default=256, help="tokens per prompt")
    p.add_argument("--new-tokens", type=int, default=128, help="tokens generated per prompt")
    p.add_argument("--repeats", type=int, default=3, help="timed passes of each decoder (medians compared)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument(
        "--dtype",
        default="fp32",
        choices=["fp32", "bf16"],
        help="weights and activations of both decoders (bf16: the model cast, no autocast)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the documents and offsets")
    return p.parse_args()


def heldout_windows(store: TokenStore, n: int, length: int, seed: int) -> list[torch.Tensor]:
    """n windows of ``length`` tokens, each from its own document (seeded choice and offset)."""
    rng = np.random.default_rng(seed)
    long_enough = np.flatnonzero(store.lengths() >= length)
    if len(long_enough) < n:
        raise UserError(
            f"{store.path} has {len(long_enough)} documents of >= {length} tokens, {n} needed; "
            "lower --prompts, --prompt-tokens or --new-tokens"
        )
    windows = []
    for i in rng.choice(long_enough, size=n, replace=False):
        doc = store.doc(int(i))
        start = int(rng.integers(0, len(doc) - length + 1))
        windows.append(torch.as_tensor(doc[start : start + length].astype(np.int64)))
    return windows


@torch.no_grad()
def head_losses(model, windows: list[torch.Tensor]) -> list[float]:
    """Mean cross-entropy (nats/token) of every head on the windows: head k predicts x_{t+k}."""
    x = torch.stack(windows)  # (N, L)
    logits = model.all_logits(x)  # [(N, L, V)] * n
    return [
        F.cross_entropy(lg[:, :-k].flatten(0, 1), x[:, k:].flatten()).item()
        for k, lg in enumerate(logits, start=1)
    ]


def distinct_4grams(outputs: list[list[int]]) -> float:
    """Distinct 4-grams / 4-grams over the continuations: near 0 = greedy decoding fell into a loop
    (which every head predicts trivially, so acceptance says little about drafting real code)."""
    grams = [tuple(o[i : i + 4]) for o in outputs for i in range(len(o) - 3)]
    return len(set(grams)) / max(len(grams), 1)


def same_prefix(a: list[int], b: list[int]) -> int:
    """Tokens two continuations share from their start."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def timed(fn, *args, **kwargs) -> tuple[float, torch.Tensor]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def run(model, prompts: list[torch.Tensor], new: int, repeats: int) -> dict:
    """Alternate the two decoders over all prompts ``repeats`` times; medians of the pass times."""
    stats = SpeculativeStats(model.config.n_future)
    speculative_greedy(model, prompts[0][None], 8)  # warm-up, untimed
    generate(model, [prompts[0].tolist()], 8)
    plain_s, spec_s, identical, outputs, agree = [], [], True, [], []
    bar = tqdm(total=repeats * len(prompts), desc="prompts x repeats", unit="prompt")
    for r in range(repeats):
        plain_t = spec_t = 0.0
        for p in prompts:
            order = ("spec", "plain") if r % 2 else ("plain", "spec")
            for side in order:
                if side == "plain":
                    dt, a = timed(generate, model, [p.tolist()], new)
                    plain_t += dt
                else:
                    dt, b = timed(speculative_greedy, model, p[None], new, stats=stats if r == 0 else None)
                    spec_t += dt
            identical &= a[0] == b[0].tolist()
            if r == 0:
                outputs.append(a[0])
                agree.append(same_prefix(a[0], b[0].tolist()))
            bar.update()
        plain_s.append(plain_t)
        spec_s.append(spec_t)
    bar.close()
    plain_med, spec_med = statistics.median(plain_s), statistics.median(spec_s)
    tokens = new * len(prompts)
    return {
        "speedup": plain_med / spec_med,
        "tokens_per_forward": stats.tokens_per_forward,
        "identical_output": identical,
        "identical_prompts": sum(n == new for n in agree),
        "agreeing_prefix_tokens": agree,
        "acceptance_per_head": stats.acceptance_per_head(),
        "distinct_4gram_fraction": distinct_4grams(outputs),
        "forwards_speculative": stats.forwards,
        "forwards_plain": tokens,
        "plain_tokens_per_s": tokens / plain_med,
        "speculative_tokens_per_s": tokens / spec_med,
        "plain_s": plain_s,
        "speculative_s": spec_s,
        "outputs": outputs,
    }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    ckpt = read_checkpoint(args.run, args.step)
    model, state, path = ckpt.build(), ckpt.state, ckpt.dir
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    model = check_speculative(model).to(dtype).eval()
    store = TokenStore(args.heldout)
    store.check_tokenizer(state["tokenizer"], f"the model {path}")
    windows = heldout_windows(store, args.prompts, args.prompt_tokens + args.new_tokens, args.seed)
    losses = head_losses(model, windows)
    print(
        "held-out loss per head (nats/token): "
        + "  ".join(f"head{k} {v:.3f}" for k, v in enumerate(losses, 1))
    )
    prompts = [w[: args.prompt_tokens] for w in windows]
    result = run(model, prompts, args.new_tokens, args.repeats)
    acc = "  ".join(f"{k} {v:.3f}" for k, v in result["acceptance_per_head"].items() if v is not None)
    plain, spec = result["plain_tokens_per_s"], result["speculative_tokens_per_s"]
    print(
        f"plain {plain:.1f} tok/s, speculative {spec:.1f} tok/s: speedup {result['speedup']:.2f}x, "
        f"{result['tokens_per_forward']:.2f} tokens/forward, "
        f"identical output {result['identical_output']} ({result['identical_prompts']}/{len(prompts)} "
        f"prompts); acceptance {acc}"
    )
    sample = store.tokenizer().decode(result.pop("outputs")[0])
    print(f"first continuation ({result['distinct_4gram_fraction']:.2f} distinct 4-grams): {sample[:300]!r}")
    result.update(
        checkpoint=str(path),
        heldout=str(store.path),
        heldout_loss_per_head=losses,
        prompts=args.prompts,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        threads=args.threads,
        dtype=args.dtype,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
