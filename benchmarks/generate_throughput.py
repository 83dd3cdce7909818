"""Generation throughput: contextlab's KV-cached decoding vs recomputation vs ``transformers``.

One fresh model (default 6 x 384, SwiGLU, so it exports as a native ``LlamaForCausalLM``:
the ``transformers`` side is Llama's own code with its own cache) decodes the same random
prompts greedily, side by side in one process: ``cached`` is ``models.decode.generate``
(prefill + one token per step with the KV cache); ``recompute`` re-runs the whole sequence
at every step (``models.decode.recompute_greedy``, the former adapter loop, one prompt at a
time); ``transformers`` is ``LlamaForCausalLM.generate(use_cache=True)`` on the exported
weights, with left padding and an attention mask as a user would call it. Tokens/s count
generated tokens (batch x new tokens) over the wall time of the whole call (prefill
included); medians of ``--repeats`` runs alternate between the sides. The greedy tokens of
every side are compared (``identical_*``). Recomputation is slow: ``--recompute-new`` can time
it over fewer new tokens (it then runs on shorter sequences, so its tokens/s is favoured).

    python benchmarks/generate_throughput.py [--size tiny-6x384] [--vocab 32000] [--prompt 512]
        [--new 256] [--batches 1,8] [--repeats 3] [--recompute-new 256] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from contextlab.inference.decode import generate, recompute_greedy
from contextlab.models.gpt import GPT
from contextlab.models.hf.llama import save_llama


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def hf_generate(llama, prompts: torch.Tensor, new: int) -> list[list[int]]:
    out = llama.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=new,
        do_sample=False,
        use_cache=True,
        pad_token_id=0,
    )
    return out[:, prompts.size(1) :].tolist()


def bench_batch(model, llama, B: int, args) -> dict:
    g = torch.Generator().manual_seed(B)
    prompts = torch.randint(0, args.vocab, (B, args.prompt), generator=g)
    rows = prompts.tolist()
    times: dict[str, list[float]] = {"cached": [], "transformers": [], "recompute": []}
    outs: dict[str, list] = {}
    for _ in range(args.repeats):
        times["cached"].append(timed(lambda: generate(model, rows, args.new))[0])
        t, outs["transformers"] = timed(lambda: hf_generate(llama, prompts, args.new))
        times["transformers"].append(t)
    outs["cached"] = generate(model, rows, args.new)
    for _ in range(max(1, args.repeats // 2)):  # the slow side: fewer repeats
        t, outs["recompute"] = timed(lambda: [recompute_greedy(model, r, args.recompute_new) for r in rows])
        times["recompute"].append(t)
    tps = {
        k: B * (args.recompute_new if k == "recompute" else args.new) / statistics.median(v)
        for k, v in times.items()
    }
    return {
        "batch": B,
        "tokens_per_s": {k: round(v, 1) for k, v in tps.items()},
        "kv_speedup_vs_recompute": round(tps["cached"] / tps["recompute"], 2),
        "ratio_vs_transformers": round(tps["cached"] / tps["transformers"], 3),
        "identical_to_transformers": outs["cached"] == outs["transformers"],
        "identical_to_recompute": [r[: args.recompute_new] for r in outs["cached"]] == outs["recompute"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="tiny-6x384", help="model size (models.gpt.SIZES)")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary of the fresh model")
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    p.add_argument("--new", type=int, default=256, help="new tokens per prompt")
    p.add_argument("--batches", default="1,8", help="batch sizes, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per side (medians compared)")
    p.add_argument("--recompute-new", type=int, default=0, help="new tokens timed for recompute (0 = --new)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    args = p.parse_args()
    args.recompute_new = args.recompute_new or args.new
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT.from_size(args.size, args.vocab, args.prompt + args.new, mlp="swiglu").eval()
    with tempfile.TemporaryDirectory() as folder:
        from transformers import LlamaForCausalLM

        save_llama(model, folder)
        llama = LlamaForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    llama.generation_config.eos_token_id = None  # every side generates all --new tokens
    results = []
    with torch.no_grad():
        for B in [int(b) for b in args.batches.split(",")]:
            results.append(bench_batch(model, llama, B, args))
            print(json.dumps(results[-1]))
    print(
        json.dumps(
            {
                "bench": "generate_throughput",
                "model": f"{args.size} swiglu, vocab {args.vocab}, fp32, threads {torch.get_num_threads()}",
                "prompt": args.prompt,
                "new": args.new,
                "recompute_new": args.recompute_new,
                "kv_speedup_vs_recompute": min(r["kv_speedup_vs_recompute"] for r in results),
                "ratio_vs_transformers": min(r["ratio_vs_transformers"] for r in results),
                "by_batch": results,
            }
        )
    )


if __name__ == "__main__":
    main()
