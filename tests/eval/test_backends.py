"""The two model backends answer the adapter's interface alike, and evaluations only use the adapter."""

from __future__ import annotations

import contextlib

import pytest
import torch

from contextlab.analysis import entropy
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.errors import UserError
from contextlab.eval import bayes_fit, contextwise, passkey, ppl, vartrack
from contextlab.eval.adapter import ModelAdapter
from contextlab.eval.backends import BACKENDS
from contextlab.eval.backends.contextlab import ContextlabBackend
from contextlab.eval.backends.hf import HFBackend
from contextlab.inference import ModelInfo
from tests.conftest import shakespeare
from tests.eval.conftest import byte_adapter, tiny_gpt


def hf_adapter() -> ModelAdapter:
    """A tiny GPT-2 made in memory (nothing downloaded), run through the Hugging Face backend."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=257, n_positions=512, n_embd=32, n_layer=2, n_head=2))
    tok = ByteTokenizer()
    info = ModelInfo("gpt2", "hf", "-", "gpt2", 0, 512, False, tok.spec())
    return ModelAdapter(model, tok, info, batch_size=2)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    text = shakespeare(100_000)
    for i, n in enumerate([300, 500, 400, 260]):
        (src / f"d{i}.txt").write_text(text[i * 1000 : i * 1000 + n])
    return ingest(src, tmp_path_factory.mktemp("st") / "b", IngestConfig(), progress=False).store


@pytest.mark.parametrize(
    "make", [lambda: byte_adapter(tiny_gpt(context=512)), hf_adapter], ids=["contextlab", "hf"]
)
def test_backends_give_the_same_answers_through_every_path(make):
    adapter = make()
    assert type(adapter.backend) is BACKENDS[adapter.info.kind] and adapter.vocab_size == 257
    ids = torch.randint(0, 256, (3, 17), generator=torch.Generator().manual_seed(1))
    logits = adapter.logits(ids[:, :-1]).float()  # (3, 16, 257)
    by_hand = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(adapter.token_logprobs(ids), by_hand, rtol=1e-5, atol=1e-5)
    feats, last = adapter.features_and_last_logprob(ids, layer=1, position=-2)
    torch.testing.assert_close(feats, adapter.hidden_states(ids[:, :-1], layer=1)[:, -2])
    torch.testing.assert_close(last, by_hand[:, -1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(adapter.last_token_logprobs(ids), by_hand[:, -1], rtol=1e-5, atol=1e-5)
    assert feats.dtype == last.dtype == torch.float32 and feats.shape == (
        3,
        adapter.hidden_states(ids).size(-1),
    )


def test_the_kind_picks_the_backend_once():
    assert {"contextlab": ContextlabBackend, "hf": HFBackend} == BACKENDS
    assert isinstance(byte_adapter(tiny_gpt()).backend, ContextlabBackend)
    assert isinstance(hf_adapter().backend, HFBackend)
    with pytest.raises(UserError, match="layer 5 does not exist; gpt2 has 2 blocks"):
        hf_adapter().hidden_states([1, 2, 3], layer=5)


@pytest.mark.parametrize("layer", [3, 4, -4])
def test_a_layer_the_model_lacks_is_refused_not_wrapped_around(layer):
    """`analyze entropy --layer 4` on a 2-block model read layer 1 (4 mod 3) and recorded layer 4."""
    adapter = byte_adapter(tiny_gpt())  # 2 blocks: layers 0..2, or -3..-1
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(0))
    with pytest.raises(UserError, match=f"layer {layer} does not exist; .* has 2 blocks"):
        adapter.hidden_states(ids, layer=layer)
    with pytest.raises(UserError, match=f"layer {layer} does not exist"):
        adapter.features_and_last_logprob(ids, layer=layer, position=-1)
    for ok in (0, 2, -1, -3):
        assert adapter.hidden_states(ids, layer=ok).shape[:2] == (1, 9)


@pytest.mark.parametrize(
    "make", [lambda: byte_adapter(tiny_gpt(context=512)), hf_adapter], ids=["contextlab", "hf"]
)
def test_evaluations_never_reach_into_the_model(make, store):
    adapter = make()
    del adapter.model  # only the backend holds the model: an evaluation that looks inside fails here
    data = str(store.path)
    assert ppl.run(adapter, ppl.Options(context=32, max_docs=2), data).results["n_tokens_scored"] > 0
    assert contextwise.run(adapter, contextwise.Options(length=40, max_docs=2), data).results["loss"]
    assert bayes_fit.run(adapter, bayes_fit.Options(lengths=[1, 2, 4, 8, 16], samples=8), data).results
    assert passkey.run(adapter, passkey.Options(lengths=[400], depths=[50.0], samples=1), None).results
    assert vartrack.run(adapter, vartrack.Options(lengths=[400], n_chains=1, hops=1, samples=1), None).results
    opts = entropy.Options(contexts=[4, 8, 16], samples=12, n_components=[4], kde_dims=0, estimators=[])
    assert len(entropy.run(adapter, opts, data, progress=False).results["contexts"]) == 3


def test_log_probabilities_do_not_depend_on_the_chunk_size():
    """The chunk is sized for the cache (about 2M logits, 128..4096 rows); the numbers are the same."""
    from contextlab.eval.backends.base import chunked_logprobs, logprob_chunk

    assert (logprob_chunk(257), logprob_chunk(4096), logprob_chunk(50257)) == (4096, 512, 128)
    logits = torch.randn(1000, 300, generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, 300, (1000,), generator=torch.Generator().manual_seed(1))
    rows = lambda a, b: logits[a:b]
    whole = chunked_logprobs(rows, targets, contextlib.nullcontext, 4096)
    for chunk in (128, 333, 1000):
        assert torch.equal(chunked_logprobs(rows, targets, contextlib.nullcontext, chunk), whole)
    assert torch.allclose(whole, torch.log_softmax(logits, -1).gather(1, targets[:, None])[:, 0], atol=1e-6)
