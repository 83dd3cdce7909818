"""Self-speculative decoding reproduces plain greedy decoding token for token (inference/speculative.py)."""

import pytest
import torch

from contextlab.errors import UserError
from contextlab.inference.decode import generate
from contextlab.inference.speculative import (
    SpeculativeStats,
    _verify,
    check_speculative,
    speculative_generate,
    speculative_greedy,
)
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.models.mtp import MTPConfig, MTPModel


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on a shared machine: one thread avoids oversubscription stalls."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mtp(seed: int, vocab: int = 6, n_future: int = 4, init_std: float = 0.3) -> MTPModel:
    """A tiny random MTP model; a small vocabulary and a large init make drafts both pass and fail."""
    torch.manual_seed(seed)
    cfg = MTPConfig(
        vocab_size=vocab, n_layer=2, n_head=2, n_embd=32, context=64, n_future=n_future, init_std=init_std
    )
    return MTPModel(cfg).eval()


@torch.no_grad()
def recompute_greedy(model, prompt: torch.Tensor, n: int) -> list[int]:
    """Greedy decoding by a full forward over the whole sequence at every step (no cache)."""
    x = prompt[None]  # (1, T)
    for _ in range(n):
        x = torch.cat([x, model(x).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return x[0, prompt.numel() :].tolist()


@pytest.mark.parametrize("seed", [0, 2])
def test_random_model_matches_recomputed_greedy_with_rejections(seed):
    model = mtp(seed)
    prompt = torch.randint(0, 6, (9,), generator=torch.Generator().manual_seed(seed))
    stats = SpeculativeStats(4)
    out = speculative_greedy(model, prompt[None], 30, stats=stats)
    assert out[0].tolist() == recompute_greedy(model, prompt, 30)
    assert out[0].tolist() == generate(model, [prompt.tolist()], 30)[0]  # plain cached greedy
    assert sum(stats.attempted) > sum(stats.accepted) > 0  # drafts were both accepted and rejected
    assert stats.forwards < 30


def test_batch_with_left_padding_matches_each_row_alone():
    model = mtp(1)
    g = torch.Generator().manual_seed(5)
    lengths = [11, 6, 9]
    idx = torch.zeros(3, 11, dtype=torch.long)
    real = torch.zeros(3, 11, dtype=torch.bool)
    prompts = [torch.randint(0, 6, (n,), generator=g) for n in lengths]
    for row, p in enumerate(prompts):
        idx[row, 11 - p.numel() :], real[row, 11 - p.numel() :] = p, True
    out = speculative_greedy(model, idx, 20, real=real)
    for row, p in enumerate(prompts):
        assert out[row].tolist() == recompute_greedy(model, p, 20)


def test_verify_truncates_rejected_drafts_from_every_layer():
    """After a verify with a rejected draft the cache holds exactly the k/v of prompt + accepted tokens."""
    model = mtp(3, vocab=50, init_std=0.02)
    prompt = torch.randint(0, 50, (1, 7), generator=torch.Generator().manual_seed(0))
    truth = torch.tensor([recompute_greedy(model, prompt[0], 4)])  # (1, 4) greedy continuation
    cache = model.new_cache(1, 32, heads=True)
    with torch.no_grad():
        model.future_logits(prompt, cache)
        drafts = truth[:, 1:].clone()  # (1, 3): the true tokens 2..4, then the third spoiled
        drafts[0, 2] = (drafts[0, 2] + 1) % 50
        n_acc, nxt, _ = _verify(model, truth[:, 0], drafts, cache)
        assert n_acc.tolist() == [2] and nxt.tolist() == [truth[0, 3].item()]
        assert cache.lengths == [7 + 1 + 2]  # prompt, pending token, two accepted drafts
        fresh = model.new_cache(1, 32, heads=True)
        model.future_logits(torch.cat([prompt, truth[:, :3]], dim=1), fresh)
    for layer in range(cache.n_layer):  # trunk, head 1 and the three extra heads
        torch.testing.assert_close(cache.k[layer][:, :, :10], fresh.k[layer][:, :, :10])
        torch.testing.assert_close(cache.v[layer][:, :, :10], fresh.v[layer][:, :, :10])


@torch.no_grad()
def test_trained_model_accepts_drafts_and_matches_greedy():
    """A tiny MTP model trained on a periodic sequence drafts well, and the output is still greedy's."""
    model = mtp(0, vocab=12, init_std=0.02).train()
    period = torch.tensor([3, 7, 1, 1, 9, 4, 0, 2, 5, 11])
    data = period.repeat(8)  # (80,)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(40):
        with torch.enable_grad():
            start = step % 10
            x = data[start : start + 48][None]  # (1, 48)
            logits = model.all_logits(x[:, :-4])  # [(1, 44, V)] * 4; head k predicts x_{t+k}
            loss = sum(
                torch.nn.functional.cross_entropy(lg[0], x[0, k : 44 + k]) for k, lg in enumerate(logits, 1)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    prompt = data[3:15]
    stats = SpeculativeStats(4)
    out = speculative_greedy(model, prompt[None], 30, stats=stats)
    assert out[0].tolist() == recompute_greedy(model, prompt, 30)
    assert stats.tokens_per_forward > 2.0  # the heads learned the period: most drafts pass


def test_generate_entry_point_keeps_stops_and_streaming():
    """speculative_generate = decode.generate (greedy): stop ids, stop strings, streaming, uneven batches."""
    model = mtp(2)
    prompts = [[1, 2, 3, 4, 5], [0, 4], [5, 5, 1, 2, 0, 3, 3]]
    kwargs = dict(stop_ids=[4], stop_strings=["3 3"], detokenize=lambda ids: " ".join(map(str, ids)))
    streamed: list[tuple[int, int]] = []
    got = speculative_generate(model, prompts, 24, on_token=lambda r, t: streamed.append((r, t)), **kwargs)
    assert got == generate(model, prompts, 24, **kwargs)
    assert min(len(out) for out in got) < 24  # a stop ended a row early
    assert sorted(streamed) == sorted((r, t) for r, out in enumerate(got) for t in out)
    assert speculative_generate(model, prompts, 24) == generate(model, prompts, 24)


def test_errors_name_the_fix():
    gpt = GPT(GPTConfig(vocab_size=8, n_layer=2, n_head=2, n_embd=16))
    with pytest.raises(UserError, match="needs an MTP model"):
        check_speculative(gpt)
    with pytest.raises(UserError, match="n_future >= 2"):
        speculative_greedy(mtp(0, n_future=1), torch.zeros(1, 3, dtype=torch.long), 4)
    with pytest.raises(UserError, match="max_new_tokens"):
        speculative_greedy(mtp(0), torch.zeros(1, 3, dtype=torch.long), 0)
