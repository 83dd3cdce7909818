"""The evaluations that generate (needle, passkey, kv, vartrack) give the results of recomputation.

``score_samples`` generates a batch of prompts of different lengths together
(``ModelAdapter.generate_many``: left padding, the KV cache); ``recomputed`` is the former greedy
loop (one prompt at a time, the whole sequence re-run at every step, through ``adapter.logits``).
Every generated answer, and so every exact/contains/keyword score, must be the same.
"""

from __future__ import annotations

import torch

from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval import kv, needle, passkey, scoring, tasks, vartrack
from contextlab.eval.adapter import in_memory_adapter
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from tests.conftest import KV_75, shakespeare
from tests.eval.conftest import byte_adapter, tiny_gpt, tiny_llama_adapter


def recomputed(adapter):
    """generate_many as the former loop: one prompt at a time, the whole sequence at every step."""
    stop = [adapter.tokenizer.eot_id]

    def generate_many(prompts, max_new_tokens, **kw):
        outs = []
        for prompt in prompts:
            ids, out = list(prompt), []
            for _ in range(max_new_tokens):
                nxt = int(adapter.logits(ids)[0, -1].float().argmax())
                if nxt in stop:
                    break
                out.append(nxt)
                ids.append(nxt)
            outs.append(out)
        return outs

    return generate_many


def samples_of(adapter, tmp_path):
    hay = tmp_path / "hay"
    hay.mkdir(exist_ok=True)
    (hay / "a.txt").write_text(shakespeare()[:6000])
    built = [
        needle.build(adapter, needle.Options(lengths=[260], depths=[0.0, 100.0], samples=1), str(hay)),
        passkey.build(adapter, passkey.Options(lengths=[300], depths=[50], samples=1), None),
        kv.build(adapter, kv.Options(n_examples=1, n_pairs=3, positions=[1]), str(KV_75)),
        vartrack.build(adapter, vartrack.Options(lengths=[420], samples=1, hops=1), None),
    ]
    return [s for samples, _ in built for s in samples[:1]]


def test_generating_evaluations_equal_recomputation(tmp_path, monkeypatch):
    torch.manual_seed(2)
    cfg = ContextLMConfig(
        vocab_size=257, n_layer=2, n_head=2, n_embd=64, context=512, chunk_size=3, fusion="plain"
    )
    contextlm = ContextLM(cfg).eval()
    adapters = [
        byte_adapter(tiny_gpt(4, context=512)),
        in_memory_adapter(contextlm, ByteTokenizer(), "clm"),
        tiny_llama_adapter(batch_size=4, context=512),  # transformers' generate, left-padded with a mask
    ]
    for adapter in adapters:
        samples = samples_of(adapter, tmp_path)
        cached = scoring.score_samples(adapter, samples, "generate", max_new_tokens=6)
        monkeypatch.setattr(adapter, "generate_many", recomputed(adapter))
        reference = scoring.score_samples(adapter, samples, "generate", max_new_tokens=6)
        monkeypatch.undo()
        assert len(cached) == 4 and cached == reference
        assert len({r["generated"] for r in cached}) > 1


def test_a_batch_never_generates_past_what_each_sample_was_checked_for():
    """The longest prompt wants the fewest new tokens: generating the batch with the largest limit would
    run past a fixed-position model's context, which no sample alone does. Groups of one limit instead."""
    adapter = tiny_llama_adapter(batch_size=4, context=101)  # absolute limit: no positions past 101
    long_short = tasks.Sample(list(range(1, 101)), "x", [], max_new=2)  # 100 + 2 - 1 = 101
    short_long = tasks.Sample(list(range(1, 91)), "y", [], max_new=12)  # 90 + 12 - 1 = 101
    rows = scoring.score_samples(adapter, [long_short, short_long], "generate")
    alone = [scoring.score_samples(adapter, [s], "generate")[0] for s in (long_short, short_long)]
    assert rows == alone
