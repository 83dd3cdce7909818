"""Decoding with the KV cache: greedy equals recomputation, batches, sampling, stops, streaming."""

from __future__ import annotations

import pytest
import torch

from contextlab.data.tokenizers import ByteTokenizer
from contextlab.errors import UserError
from contextlab.inference.decode import cut_at_stop, generate, recompute_greedy
from contextlab.inference.sampling import Sampling, next_tokens, restrict
from tests.models.test_kv_cache import MODELS, V

GEN_MODELS = ["gpt", "contextlm-w3-gated-enc1", "contextlm-w4-normalised-enc0", "mtp"]


def sharpen(model):
    """Larger weights than the init, so that greedy tokens depend on the context (not one token forever)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(10.0)
    return model


SHARP = {name: sharpen(type(MODELS[name])(MODELS[name].config).eval()) for name in GEN_MODELS}


@pytest.mark.parametrize("name", GEN_MODELS)
def test_cached_greedy_equals_recomputation_batched_and_alone(name):
    model = SHARP[name]
    torch.manual_seed(3)
    prompts = [torch.randint(0, V, (n,)).tolist() for n in (9, 3, 14, 1)]
    reference = [recompute_greedy(model, p, 12) for p in prompts]
    assert len({tuple(r) for r in reference}) > 1 and any(len(set(r)) > 2 for r in reference)
    assert generate(model, prompts, 12) == reference  # one batch, left-padded
    assert [generate(model, [p], 12)[0] for p in prompts] == reference


def test_stop_ids_strings_and_streaming():
    model, tok = SHARP["gpt"], ByteTokenizer()
    prompt = tok.encode("Once upon")
    full = recompute_greedy(model, prompt, 10)
    text = tok.decode(full)
    stop_id = full[4]
    first = full.index(stop_id)
    assert generate(model, [prompt], 10, stop_ids=[stop_id]) == [full[:first]]  # the stop id is not kept
    stop = tok.decode(full[5:7])
    streamed = []
    out = generate(
        model,
        [prompt, prompt],
        10,
        stop_strings=[stop],
        detokenize=tok.decode,
        on_token=lambda row, t: streamed.append((row, t)),
    )
    end = next(n for n in range(1, 11) if stop in tok.decode(full[:n]))
    assert out == [full[:end], full[:end]]  # stops once the text holds the stop string
    assert [t for r, t in streamed if r == 1] == full[:end]
    assert cut_at_stop(tok.decode(out[0]), [stop]) == text[: text.index(stop)]


def test_sampling_is_reproducible_with_a_seed_and_varies_without_it():
    model = SHARP["contextlm-w3-gated-enc1"]
    prompts = [[1, 2, 3], [4, 5]]
    s = Sampling(temperature=1.5, seed=11)
    a, b = generate(model, prompts, 16, sampling=s), generate(model, prompts, 16, sampling=s)
    assert a == b
    other = generate(model, prompts, 16, sampling=Sampling(temperature=1.5, seed=12))
    assert other != a


def test_top_k_and_top_p_restrict_the_support():
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    k = restrict(logits, top_k=5)
    assert ((k > float("-inf")).sum(-1) == 5).all()
    assert torch.equal(k.topk(5).indices.sort().values, logits.topk(5).indices.sort().values)
    p = restrict(logits, top_p=0.5)
    for row, kept in zip(logits.softmax(-1), p > float("-inf")):
        probs = row.sort(descending=True).values
        n = int(kept.sum())  # the smallest prefix of the ranking whose mass reaches p
        assert probs[:n].sum() >= 0.5 and probs[: n - 1].sum() < 0.5
        assert row[kept].min() >= row[~kept].max()
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([next_tokens(logits, Sampling(temperature=1.0, top_k=3), g) for _ in range(200)])
    allowed = logits.topk(3).indices  # (4, 3)
    assert all(set(draws[:, r].tolist()) <= set(allowed[r].tolist()) for r in range(4))
    assert len(set(draws[:, 0].tolist())) > 1
    one = torch.stack([next_tokens(logits, Sampling(temperature=1.0, top_p=1e-6), g) for _ in range(20)])
    assert (one == logits.argmax(-1)).all()  # a tiny nucleus keeps the most likely token only


def test_bad_sampling_options_are_one_line_errors():
    for bad in (dict(temperature=-1), dict(top_k=-2), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(UserError):
            Sampling(**bad)
