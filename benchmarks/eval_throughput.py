"""Contextwise-eval throughput vs a raw no-grad forward of the same model over the same tokens.

The contextwise evaluation (``contextlab.eval.contextwise.position_losses``: forward,
chunked fp32 log-softmax + gather, per-position accumulation) and a bare
``model(idx)`` under ``torch.no_grad`` run alternately on identical batches; each is
timed ``--repeats`` times and the medians are compared. The goal is a ratio >= 0.9: the
evaluation should cost little more than the forward pass it cannot avoid. The machine is
shared, so only the side-by-side ratio is meaningful. The last line is one JSON object.

    python benchmarks/eval_throughput.py [--model RUN_OR_HF_DIR] [--size tiny-4x256 --vocab 4096]
        [--context 512] [--docs 32] [--batch-size 8] [--dtype bf16] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval.adapter import in_memory_adapter, load_model
from contextlab.eval.contextwise import position_losses
from contextlab.models.gpt import GPT


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a run or HF folder (default: a fresh GPT of --size)")
    p.add_argument("--size", default="tiny-4x256", help="model size when no --model is given")
    p.add_argument("--vocab", type=int, default=4096, help="vocabulary of the fresh model")
    p.add_argument("--context", "--seq-len", type=int, default=512, help="tokens the model sees per document")
    p.add_argument("--docs", type=int, default=32, help="documents per timed pass")
    p.add_argument("--batch-size", type=int, default=8, help="documents per forward")
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--repeats", type=int, default=5, help="timed passes of each side (medians compared)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = default")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model:
        adapter = load_model(args.model, dtype=args.dtype, batch_size=args.batch_size)
    else:
        model = GPT.from_size(args.size, args.vocab, 256).eval()
        name = f"fresh {args.size}"
        adapter = in_memory_adapter(
            model, ByteTokenizer(), name, dtype=args.dtype, batch_size=args.batch_size
        )
    V = min(adapter.vocab_size, args.vocab if not args.model else adapter.vocab_size)
    tokens = np.random.default_rng(0).integers(0, V, (args.docs, args.context + 1)).astype(np.int64)
    n_tokens = args.docs * args.context  # forward positions of both sides

    def raw_forward():
        with torch.no_grad():
            for a in range(0, len(tokens), args.batch_size):
                idx = torch.as_tensor(tokens[a : a + args.batch_size, :-1])
                with adapter.autocast():
                    out = (
                        adapter.model(idx)
                        if adapter.info.kind == "contextlab"
                        else adapter.model(input_ids=idx)
                    )
                out.logits.sum().item()  # consume the logits as an eval would

    def contextwise_eval():
        position_losses(adapter, tokens)

    raw_forward(), contextwise_eval()  # warm-up
    t_raw, t_eval = [], []
    for _ in range(args.repeats):
        for fn, acc in ((raw_forward, t_raw), (contextwise_eval, t_eval)):
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
    raw_tps, eval_tps = n_tokens / statistics.median(t_raw), n_tokens / statistics.median(t_eval)
    print(
        f"model {adapter.info.id}, {args.docs} docs x {args.context} tokens, batch {args.batch_size}, "
        f"{args.dtype}, {torch.get_num_threads()} threads"
    )
    print(f"raw forward       {raw_tps:10,.0f} tokens/s   (runs: {', '.join(f'{t:.3f}' for t in t_raw)} s)")
    print(f"contextwise eval  {eval_tps:10,.0f} tokens/s   (runs: {', '.join(f'{t:.3f}' for t in t_eval)} s)")
    print(
        json.dumps(
            {
                "bench": "eval_throughput",
                "ratio_vs_forward": round(eval_tps / raw_tps, 4),
                "eval_tokens_per_s": round(eval_tps),
                "forward_tokens_per_s": round(raw_tps),
                "dtype": args.dtype,
                "context": args.context,
                "batch_size": args.batch_size,
            }
        )
    )


if __name__ == "__main__":
    main()
