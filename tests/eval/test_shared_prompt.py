"""Candidates that share their prompt's KV cache score as whole sequences do, on every kind of model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval import scoring, tasks
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
    shared = scoring.score_samples(adapter, samples, "likelihood")
    adapter._whole_sequences = True
    whole = scoring.score_samples(adapter, samples, "likelihood")
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


@pytest.mark.parametrize("kind", ADAPTERS)
def test_one_prefill_serves_candidates_and_the_greedy_answer(kind, tmp_path):
    """score_and_generate gives the candidates' scores of score_continuations and the tokens of
    generate_many from one prefill of the prompt, on every kind of model."""
    make = ADAPTERS[kind]
    adapter = make(4, tmp_path) if kind == "hf-export" else make(4)
    got = adapter.score_and_generate(PROMPT, CANDIDATES, 12)
    assert got is not None
    np.testing.assert_allclose(got[0], adapter.score_continuations(PROMPT, CANDIDATES), rtol=1e-5, atol=1e-4)
    assert got[1] == adapter.generate_many([PROMPT], 12)[0] and len(got[1]) == 12
    one = adapter.score_and_generate(PROMPT, CANDIDATES, 1)
    assert one[1] == got[1][:1]


class StopAt(ByteTokenizer):
    """A byte tokenizer whose end-of-text is a chosen id, to make greedy decoding stop there."""

    def __init__(self, stop: int):
        super().__init__()
        self.stop = stop

    @property
    def eot_id(self):
        return self.stop


def test_the_shared_answer_ends_at_end_of_text_as_generation_does():
    model = tiny_gpt(13, context=128)
    free = in_memory_adapter(model, ByteTokenizer(), "gpt").score_and_generate(PROMPT, CANDIDATES, 10)[1]
    stop = free[3]
    adapter = in_memory_adapter(model, StopAt(stop), "gpt")
    got = adapter.score_and_generate(PROMPT, CANDIDATES, 10)[1]
    assert got == free[: free.index(stop)] == adapter.generate_many([PROMPT], 10)[0]


def test_a_model_without_a_cache_answers_apart():
    adapter = in_memory_adapter(NoCache(), ByteTokenizer(), "nocache", batch_size=4)
    assert adapter.score_and_generate(PROMPT, CANDIDATES, 4) is None


@pytest.mark.parametrize("kind", ["gpt", "hf-llama"])
def test_score_samples_rows_are_the_same_with_one_prefill_or_two(kind, monkeypatch):
    """The default scoring (both) gives the same rows whether a prompt's prefill serves its candidates
    and its answer (a CPU) or they run apart (a GPU): samples of other answer lengths, one without
    candidates (generated in a batch either way), controls."""
    adapter = ADAPTERS[kind](3)
    control = list(b"What is the pass key? The pass key is")
    samples = [
        tasks.Sample(PROMPT, "31415", CANDIDATES[:4], control=control, group=0, max_new=6),
        tasks.Sample(PROMPT[5:], "2", [CANDIDATES[1], *CANDIDATES[2:4]], control=control, group=0),
        tasks.Sample(PROMPT[9:], "31415", [], max_new=3),
        tasks.Sample(PROMPT[2:], "27182818", CANDIDATES[2:5], max_new=9),
    ]
    batched, generate_many = [], adapter.generate_many

    def counting(prompts, *args, **kw):  # the prompts generated a batch at a time, apart from scoring
        batched.extend(prompts)
        return generate_many(prompts, *args, **kw)

    monkeypatch.setattr(adapter, "generate_many", counting)
    assert scoring.shares_prefill(adapter)
    shared = scoring.score_samples(adapter, samples, "both", max_new_tokens=5)
    assert len(batched) == 1  # only the sample without candidates: the others shared their prefill
    monkeypatch.setattr(scoring, "shares_prefill", lambda adapter: False)
    apart = scoring.score_samples(adapter, samples, "both", max_new_tokens=5)
    assert len(batched) == 1 + 4
    assert [r.keys() for r in shared] == [r.keys() for r in apart]
    for a, b in zip(shared, apart):
        for key, value in a.items():
            if isinstance(value, float):
                assert value == pytest.approx(b[key], abs=1e-4), key
            else:
                assert value == b[key], key
    if kind == "gpt":  # bytes: one character per token, each sample's own answer length
        assert [len(r["generated"]) for r in shared] == [6, 5, 3, 9]
