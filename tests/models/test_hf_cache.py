"""Exports with custom code run with transformers' KV cache (use_cache=True) as without it.

In a fresh ``python -I`` that cannot import contextlab (as tests/models/test_hf_native_export.py
does), each custom-code export (GELU GPT, ContextLMs whose chunks do and do not divide the
lengths) is run: the logits of a prefill plus token-by-token forwards on a ``DynamicCache``
against one full forward, left-padded rows against each row alone, and ``generate`` with and
without the cache on a batch of uneven prompts; the greedy tokens must also be contextlab's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from contextlab.inference.decode import generate
from contextlab.models import GPT, GPTConfig
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.hf.export import export_arch_to_hf
from tests.models.test_hf_native_export import CHILD

VOCAB, NEW = 257, 7
SHAPE = {"vocab_size": VOCAB, "n_layer": 2, "n_head": 2, "n_embd": 64, "context": 32}
LENGTHS = (9, 4, 13)

CACHE_CHILD = (
    CHILD.split("results = {}")[0]
    + r"""
from transformers import DynamicCache
results = {}
lengths = [9, 4, 13]
for folder in sys.argv[2:]:
    x = torch.load(folder + ".x.pt")  # (3, 20)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    r = {}
    with torch.no_grad():
        full = model(x, use_cache=False).logits
        cache = DynamicCache()
        parts = [model(x[:, :10], past_key_values=cache, use_cache=True).logits]
        parts += [model(x[:, t : t + 1], past_key_values=cache, use_cache=True).logits for t in range(10, 20)]
        r["cached_diff"] = (torch.cat(parts, 1) - full).abs().max().item()
        P = max(lengths)
        ids = torch.zeros(3, P, dtype=torch.long)
        mask = torch.zeros(3, P, dtype=torch.long)
        for b, n in enumerate(lengths):
            ids[b, P - n :], mask[b, P - n :] = x[b, :n], 1
        padded = model(ids, attention_mask=mask, use_cache=False).logits
        r["padded_diff"] = max(
            (padded[b, P - n :] - model(x[b : b + 1, :n], use_cache=False).logits[0]).abs().max().item()
            for b, n in enumerate(lengths)
        )
        seen = []
        hook = model.gpt.wte.register_forward_hook(lambda m, a, o: seen.append(a[0].size(1)))
        for use_cache in (True, False):
            seen.clear()
            flag = {} if use_cache else {"use_cache": False}  # the default must be the cache
            out = model.generate(ids, attention_mask=mask, max_new_tokens=7, do_sample=False,
                                 pad_token_id=0, eos_token_id=None, **flag)
            r[f"generated_{use_cache}"] = out[:, P:].tolist()
            r[f"step_tokens_{use_cache}"] = list(seen)
        hook.remove()
    results[folder] = r
json.dump(results, open(sys.argv[1], "w"))
"""
)


def sharp(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(6.0)
            if "fusion" in name:
                p.normal_(0.0, 1.0)
    return model.eval()


def test_custom_code_exports_cache_as_they_recompute(tmp_path):
    torch.manual_seed(0)
    kinds = {
        "gelu": GPT(GPTConfig(**SHAPE)),
        "contextlm-w4-enc1": ContextLM(ContextLMConfig(**SHAPE, chunk_size=4, encoder_layers=1)),
        "contextlm-w3-plain": ContextLM(ContextLMConfig(**SHAPE, chunk_size=3, fusion="plain")),
    }
    x = torch.randint(0, VOCAB, (3, 20), generator=torch.Generator().manual_seed(5))
    folders, expected = [], {}
    for kind, model in kinds.items():
        model = sharp(model)
        folder = export_arch_to_hf(model, tmp_path / kind)
        torch.save(x, f"{folder}.x.pt")
        folders.append(str(folder))
        expected[str(folder)] = generate(model, [x[b, :n].tolist() for b, n in enumerate(LENGTHS)], NEW)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [sys.executable, "-I", "-c", CACHE_CHILD, str(tmp_path / "out.json"), *folders],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads((tmp_path / "out.json").read_text())
    for folder, greedy in expected.items():
        got = results[folder]
        assert got["cached_diff"] <= 1e-5 and got["padded_diff"] <= 1e-5, (folder, got)
        assert got["generated_True"] == got["generated_False"] == greedy, folder
        assert got["step_tokens_True"] == [13] + [1] * (NEW - 1)  # prefill, then one token per step
        assert got["step_tokens_False"] == list(range(13, 13 + NEW))  # the whole sequence every step
        assert len({tuple(g) for g in greedy}) == 3
