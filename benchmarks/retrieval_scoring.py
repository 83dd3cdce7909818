"""Retrieval scoring: candidates sharing their prompt, answers generated a batch at a time; old vs new.

Retrieval tasks (needle, passkey, kv, vartrack, icl, mqar) score k candidate answers after one
long prompt and generate the answer greedily. Both sides run on the same random prompts with the
same model, side by side in one process, alternating, through both backends: a fresh contextlab
GPT (SwiGLU, so it exports as a native ``LlamaForCausalLM``) and the same weights loaded by
``transformers`` (the Hugging Face backend, the model's own cache).

- candidates: ``ModelAdapter.score_continuations`` runs the prompt once into a KV cache that each of
  the k candidates in turn continues (``shared``) against prompt + candidate run k times
  (``whole``, the former way: ``score_spans`` on the whole sequences);
- generation: ``generate_many`` on ``--batch-size`` prompts at once (``batched``, what
  ``scoring.score_samples`` does) against ``generate`` one prompt at a time (``one_by_one``, the
  former way);
- both (the default scoring of needle, passkey and kv): ``score_and_generate``, one prefill of each
  prompt serving its candidates and its greedy answer (``shared_prefill``, what ``scoring.score_samples``
  does on a CPU) against the candidates scored (shared) and the answers generated in batches apart
  (``apart``, what it does on a GPU).

Reported: seconds per prompt (medians of ``--repeats``), speedups, the largest difference between
the two sides' candidate scores (nats; the same numbers up to rounding) and whether the generated
tokens are identical.

    python benchmarks/retrieval_scoring.py [--size tiny-4x256] [--vocab 8192] [--prompt 2048]
        [--candidates 5] [--answer 6] [--prompts 8] [--new 16] [--repeats 3] [--threads N]

Last line: {"bench": "retrieval_scoring", ..., "speedup_contextlab": ..., "speedup_hf": ...,
"max_abs_diff_contextlab": ..., "max_abs_diff_hf": ..., "gen_speedup_contextlab": ...,
"gen_speedup_hf": ..., "gen_identical": ..., "both_speedup_contextlab": ..., "both_speedup_hf": ...,
"both_identical": ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np
import torch

from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval.adapter import ModelAdapter, in_memory_adapter
from contextlab.inference import ModelInfo
from contextlab.models.gpt import GPT
from contextlab.models.hf.llama import save_llama


def score_all(adapter: ModelAdapter, items, whole: bool) -> tuple[float, np.ndarray]:
    """Seconds for every (prompt, candidates) item, and the scores (n, k)."""
    adapter._whole_sequences = whole
    t = time.perf_counter()
    scores = np.stack([adapter.score_continuations(p, c) for p, c in items])
    return time.perf_counter() - t, scores


def compare(adapter: ModelAdapter, items, repeats: int) -> dict:
    times: dict[str, list[float]] = {"whole": [], "shared": []}
    scores = {}
    for _ in range(repeats):
        for side in ("whole", "shared"):
            seconds, scores[side] = score_all(adapter, items, side == "whole")
            times[side].append(seconds)
    per_prompt = {k: statistics.median(v) / len(items) for k, v in times.items()}
    return {
        "seconds_per_prompt": {k: round(v, 4) for k, v in per_prompt.items()},
        "speedup": round(per_prompt["whole"] / per_prompt["shared"], 2),
        "max_abs_diff": float(np.abs(scores["whole"] - scores["shared"]).max()),
        "same_winners": bool((scores["whole"].argmax(1) == scores["shared"].argmax(1)).all()),
    }


def compare_generation(adapter: ModelAdapter, prompts: list[list[int]], new: int, repeats: int) -> dict:
    times: dict[str, list[float]] = {"one_by_one": [], "batched": []}
    outs = {}
    bs = adapter.batch_size
    for _ in range(repeats):
        t = time.perf_counter()
        outs["one_by_one"] = [adapter.generate(p, new, stop=[adapter.tokenizer.eot_id]) for p in prompts]
        times["one_by_one"].append(time.perf_counter() - t)
        t = time.perf_counter()
        outs["batched"] = [
            g for a in range(0, len(prompts), bs) for g in adapter.generate_many(prompts[a : a + bs], new)
        ]
        times["batched"].append(time.perf_counter() - t)
    per_prompt = {k: statistics.median(v) / len(prompts) for k, v in times.items()}
    return {
        "seconds_per_prompt": {k: round(v, 4) for k, v in per_prompt.items()},
        "speedup": round(per_prompt["one_by_one"] / per_prompt["batched"], 2),
        "identical": outs["one_by_one"] == outs["batched"],
    }


def compare_both(adapter: ModelAdapter, items, new: int, repeats: int) -> dict:
    """Candidates and answers of every item: one shared prefill each vs scored and generated apart."""
    times: dict[str, list[float]] = {"apart": [], "shared_prefill": []}
    outs = {}
    bs = adapter.batch_size
    for _ in range(repeats):
        t = time.perf_counter()
        scores = [adapter.score_continuations(p, c) for p, c in items]
        prompts = [p for p, _ in items]
        gens = [g for a in range(0, len(items), bs) for g in adapter.generate_many(prompts[a : a + bs], new)]
        times["apart"].append(time.perf_counter() - t)
        outs["apart"] = (np.stack(scores), gens)
        t = time.perf_counter()
        done = [adapter.score_and_generate(p, c, new) for p, c in items]
        times["shared_prefill"].append(time.perf_counter() - t)
        outs["shared_prefill"] = (np.stack([d[0] for d in done]), [d[1] for d in done])
    per_prompt = {k: statistics.median(v) / len(items) for k, v in times.items()}
    return {
        "seconds_per_prompt": {k: round(v, 4) for k, v in per_prompt.items()},
        "speedup": round(per_prompt["apart"] / per_prompt["shared_prefill"], 2),
        "max_abs_diff": float(np.abs(outs["apart"][0] - outs["shared_prefill"][0]).max()),
        "identical": outs["apart"][1] == outs["shared_prefill"][1],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="tiny-4x256", help="model size (models.gpt.SIZES)")
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary of the fresh model")
    p.add_argument("--prompt", type=int, default=2048, help="prompt tokens")
    p.add_argument(
        "--candidates", type=int, default=5, help="candidates per prompt (the true one and distractors)"
    )
    p.add_argument("--answer", type=int, default=6, help="tokens per candidate")
    p.add_argument("--prompts", type=int, default=8, help="prompts scored per timed run")
    p.add_argument("--new", type=int, default=16, help="tokens generated per prompt")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (the eval default)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per side (medians compared)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT.from_size(
        args.size, args.vocab, args.prompt + max(args.answer, args.new), mlp="swiglu"
    ).eval()
    g = torch.Generator().manual_seed(1)
    items = [
        (
            torch.randint(0, args.vocab, (args.prompt,), generator=g).tolist(),
            torch.randint(0, args.vocab, (args.candidates, args.answer), generator=g).tolist(),
        )
        for _ in range(args.prompts)
    ]
    tok = ByteTokenizer()  # ids only: nothing is encoded or decoded here
    ours = in_memory_adapter(model, tok, args.size, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as folder:
        from transformers import LlamaForCausalLM

        save_llama(model, folder)
        llama = LlamaForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    info = ModelInfo("llama", "hf", "-", "llama", 0, model.config.context, False, tok.spec())
    theirs = ModelAdapter(llama, tok, info, batch_size=args.batch_size)
    results, gen, both = {}, {}, {}
    prompts = [p for p, _ in items]
    for name, adapter in (("contextlab", ours), ("hf", theirs)):
        results[name] = compare(adapter, items, args.repeats)
        gen[name] = compare_generation(adapter, prompts, args.new, args.repeats)
        both[name] = compare_both(adapter, items, args.new, args.repeats)
        row = {"candidates": results[name], "generation": gen[name], "both": both[name]}
        print(json.dumps({"backend": name, **row}))
    print(
        json.dumps(
            {
                "bench": "retrieval_scoring",
                "model": f"{args.size} swiglu, vocab {args.vocab}, fp32, threads {torch.get_num_threads()}",
                "prompt": args.prompt,
                "candidates": args.candidates,
                "answer": args.answer,
                "speedup_contextlab": results["contextlab"]["speedup"],
                "speedup_hf": results["hf"]["speedup"],
                "max_abs_diff_contextlab": results["contextlab"]["max_abs_diff"],
                "max_abs_diff_hf": results["hf"]["max_abs_diff"],
                "same_winners": results["contextlab"]["same_winners"] and results["hf"]["same_winners"],
                "new": args.new,
                "gen_speedup_contextlab": gen["contextlab"]["speedup"],
                "gen_speedup_hf": gen["hf"]["speedup"],
                "gen_identical": gen["contextlab"]["identical"] and gen["hf"]["identical"],
                "both_speedup_contextlab": both["contextlab"]["speedup"],
                "both_speedup_hf": both["hf"]["speedup"],
                "both_identical": both["contextlab"]["identical"] and both["hf"]["identical"],
                "by_backend": {
                    k: {"candidates": results[k], "generation": gen[k], "both": both[k]} for k in results
                },
            }
        )
    )


if __name__ == "__main__":
    main()
