"""Candidates that share their prompt's KV cache score as whole sequences do, on every kind of model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval import tasks
from contextlab.eval.adapter import ModelAdapter, in_memory_adapter
from contextlab.inference import ModelInfo
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.mtp import MTPConfig, MTPModel
from tests.eval.conftest import tiny_gpt, tiny_llama_adapter

PROMPT = list(b"The pass key is 31415. Remember it. What is the pass key? The pass key is")
CANDIDATES = [list(b" 31415"), list(b" 2"), list(b" 27182818"), list(b" 99999"), list(b"!"), list(b" 1 2 3")]


def contextlm() -> ContextLM:
    torch.manual_seed(3)
    cfg = ContextLMConfig(
        vocab_size=257, n_layer=2, n_head=2, n_embd=64, context=128, predictor_layers=1, fusion="plain"
    )
    return ContextLM(cfg).eval()


def mtp() -> MTPModel:
    torch.manual_seed(4)
    return MTPModel(MTPConfig(vocab_size=257, n_layer=2, n_head=2, n_embd=64, context=128, n_future=2)).eval()


def exported_adapter(batch_size: int, tmp_path) -> ModelAdapter:
    """A contextlab GPT exported to a Hugging Face folder and loaded by plain transformers: its own
    DynamicCache through the Hugging Face backend."""
    import transformers

    import contextlab.models.hf.custom_code as custom

    out = custom.export_to_hf(
        tiny_gpt(6, context=128), tmp_path / "export", extra_config={"tokenizer": "bytes"}
    )
    tok = ByteTokenizer()
    info = ModelInfo("export", "hf", "-", "contextlab-gpt", 0, 128, True, tok.spec())
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    return ModelAdapter(model, tok, info, batch_size=batch_size)


def whole_sequences(adapter: ModelAdapter, prompt, candidates) -> np.ndarray:
    """The reference: every candidate scored as its own full forward pass."""
    return adapter.score_spans([(list(prompt) + list(c), len(prompt)) for c in candidates])


ADAPTERS = {
    "gpt": lambda bs: in_memory_adapter(tiny_gpt(7, context=128), ByteTokenizer(), "gpt", batch_size=bs),
    "contextlm": lambda bs: in_memory_adapter(contextlm(), ByteTokenizer(), "clm", batch_size=bs),
    "mtp": lambda bs: in_memory_adapter(mtp(), ByteTokenizer(), "mtp", batch_size=bs),
    "hf-llama": tiny_llama_adapter,
    "hf-export": exported_adapter,
}


@pytest.mark.parametrize("kind", ADAPTERS)
@pytest.mark.parametrize("batch_size", [4, 8])  # the whole-sequence reference: two batches, then one
def test_shared_prompt_scores_equal_whole_sequences(kind, batch_size, tmp_path):
    make = ADAPTERS[kind]
    adapter = make(batch_size, tmp_path) if kind == "hf-export" else make(batch_size)
    got = adapter.score_continuations(PROMPT, CANDIDATES)
    assert not adapter._whole_sequences  # the shared path ran
    np.testing.assert_allclose(got, whole_sequences(adapter, PROMPT, CANDIDATES), rtol=1e-5, atol=1e-4)
    # one-token candidates only: the prompt's last position scores them all, no second forward
    singles = [[ord(c)] for c in "0123"]
    np.testing.assert_allclose(
        adapter.score_continuations(PROMPT, singles), whole_sequences(adapter, PROMPT, singles), atol=1e-4
    )


def test_shared_prompt_follows_a_models_left_to_right_prefix():
    """A model run left to right after mode tokens (UL2) gets them before the shared prompt too."""
    model = tiny_gpt(8, context=128)
    tok = ByteTokenizer()
    base = in_memory_adapter(model, tok, "ul2")
    info = dataclasses.replace(base.info, lm_prefix=[256])
    adapter = ModelAdapter(model, tok, info, batch_size=4)
    got = adapter.score_continuations(PROMPT, CANDIDATES)
    np.testing.assert_allclose(got, whole_sequences(adapter, PROMPT, CANDIDATES), rtol=1e-5, atol=1e-4)
    with_lead = base.score_continuations([256, *PROMPT], CANDIDATES)  # the same, written out
    np.testing.assert_allclose(got, with_lead, rtol=1e-5, atol=1e-4)


def test_bf16_shared_scores_stay_close_to_whole_sequences():
    adapter = in_memory_adapter(tiny_gpt(9, context=128), ByteTokenizer(), "gpt", batch_size=8, dtype="bf16")
    got = adapter.score_continuations(PROMPT, CANDIDATES)
    ref = whole_sequences(adapter, PROMPT, CANDIDATES)
    per_token = np.abs(got - ref) / np.array([len(c) for c in CANDIDATES])
    assert per_token.max() < 0.1  # bf16 rounding of a different but equivalent computation


class NoCache(torch.nn.Module):
    """A contextlab-kind model with no KV cache (as the negative-control bigram): whole sequences."""

    def __init__(self):
        super().__init__()
        self.gpt = tiny_gpt(10, context=128)
        self.config = self.gpt.config

    def trunk(self, idx, **kw):
        return self.gpt.trunk(idx, **kw)

    def unembed(self, h):
        return self.gpt.unembed(h)

    def forward(self, idx):
        return self.gpt(idx)


def test_a_model_without_a_cache_is_scored_on_whole_sequences():
    adapter = in_memory_adapter(NoCache(), ByteTokenizer(), "nocache", batch_size=4)
    got = adapter.score_continuations(PROMPT, CANDIDATES)
    assert adapter._whole_sequences
    reference = in_memory_adapter(tiny_gpt(10, context=128), ByteTokenizer(), "gpt", batch_size=4)
    np.testing.assert_allclose(got, reference.score_continuations(PROMPT, CANDIDATES), rtol=1e-5, atol=1e-4)


def test_likelihood_rows_with_controls_are_unchanged_by_sharing():
    """score_samples' margins and gains from the shared path equal those of whole-sequence scoring."""
    adapter = in_memory_adapter(tiny_gpt(11, context=128), ByteTokenizer(), "gpt", batch_size=8)
    control = list(b"What is the pass key? The pass key is")
    samples = [
        tasks.Sample(PROMPT, "31415", CANDIDATES[:4], control=control, group=0),
        tasks.Sample(
            PROMPT[5:], "2", [CANDIDATES[1], CANDIDATES[0], *CANDIDATES[2:4]], control=control, group=0
        ),
    ]
    shared = tasks.score_samples(adapter, samples, "likelihood")
    adapter._whole_sequences = True
    whole = tasks.score_samples(adapter, samples, "likelihood")
    for a, b in zip(shared, whole):
        assert a["likelihood_correct"] == b["likelihood_correct"] and a["rank"] == b["rank"]
        for key in ("margin", "gain_true", "gain_distractors"):
            assert a[key] == pytest.approx(b[key], abs=1e-4)


def test_candidates_take_turns_on_one_cache_of_one_row():
    """Memory stays one prompt's cache whatever the number of candidates: no row is copied per candidate,
    and after each candidate the cache is back at the prompt's length."""
    model = tiny_gpt(12, context=128)
    made = []
    original = model.new_cache

    def recording(batch, capacity):
        made.append(original(batch, capacity))
        return made[-1]

    model.new_cache = recording
    adapter = in_memory_adapter(model, ByteTokenizer(), "gpt", batch_size=2)
    got = adapter.score_continuations(PROMPT, CANDIDATES)
    assert len(made) == 1 and made[0].batch == 1 and made[0].lengths == [len(PROMPT)]
    np.testing.assert_allclose(got, whole_sequences(adapter, PROMPT, CANDIDATES), rtol=1e-5, atol=1e-4)
