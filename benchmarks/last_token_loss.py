"""A last token's loss with the output layer at the last position only, against all positions.

``eval bayes-fit`` (the visible-context curve, also the profile's step) and the one-visible-token
side of ``eval contextwise`` need only log p(last token | the l before it), but read it as
``token_logprobs(rows)[:, -1]``, which applies the output layer at all l positions. With a
GPT-2-sized vocabulary (50,257 ids) that layer is most of a small model's forward. Here both
ways run alternately on the same rows (``--rows`` of ``--length`` tokens), for a random-weight
Hugging Face GPT-NeoX (``logits_to_keep``) and a contextlab GPT of the same shape, each timed
``--repeats`` times; the medians are compared and the answers must agree. The machine is shared,
so only the side-by-side ratio means anything. The last line is one JSON object.

    python benchmarks/last_token_loss.py [--vocab 50257] [--length 1024] [--rows 16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval.adapter import ModelAdapter, in_memory_adapter
from contextlab.inference import ModelInfo
from contextlab.models.gpt import GPT, GPTConfig


def adapters(vocab: int, context: int) -> dict[str, ModelAdapter]:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    shape = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    hf = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=vocab, max_position_embeddings=context, **shape)).eval()
    tok = ByteTokenizer()  # only its spec is read: the rows are ids
    info = ModelInfo("neox", "hf", "-", "gpt_neox", 0, context, True, tok.spec())
    gpt = GPT(GPTConfig(vocab_size=vocab, n_layer=2, n_head=4, n_embd=64, context=context)).eval()
    return {"hf": ModelAdapter(hf, tok, info, batch_size=8), "contextlab": in_memory_adapter(gpt, tok, "gpt")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=50257, help="vocabulary of both models")
    p.add_argument("--length", type=int, default=1024, help="tokens per row (the visible context + 1)")
    p.add_argument("--rows", type=int, default=16, help="rows per timed pass")
    p.add_argument("--repeats", type=int, default=5, help="timed passes of each side (medians compared)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = default")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = torch.randint(0, a.vocab, (a.rows, a.length), generator=torch.Generator().manual_seed(1))
    out = {"bench": "last_token_loss", "vocab": a.vocab, "length": a.length, "rows": a.rows}
    for name, adapter in adapters(a.vocab, a.length).items():
        ways = {
            "all_positions": lambda: adapter.token_logprobs(rows)[:, -1],
            "last_position": lambda: adapter.last_token_logprobs(rows),
        }
        times: dict[str, list[float]] = {k: [] for k in ways}
        answers = {}
        for _ in range(a.repeats):
            for k, fn in ways.items():
                t0 = time.perf_counter()
                answers[k] = fn()
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        diff = float((answers["all_positions"] - answers["last_position"]).abs().max())
        print(
            f"{name:10s} all positions {med['all_positions']:.3f} s  "
            f"last position {med['last_position']:.3f} s  "
            f"speed-up {med['all_positions'] / med['last_position']:.1f}x  max |difference| {diff:.2e}"
        )
        out[f"{name}_all_positions_s"] = round(med["all_positions"], 4)
        out[f"{name}_last_position_s"] = round(med["last_position"], 4)
        out[f"{name}_speedup"] = round(med["all_positions"] / med["last_position"], 2)
        out[f"{name}_max_abs_diff"] = diff
    print(json.dumps(out))


if __name__ == "__main__":
    main()
