"""Architectures: ContextLM's alignment and causality (by gradients), MTP's heads, build_arch."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from contextlab.errors import UserError
from contextlab.models.archs import ARCHS, arch_config, build_arch
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.gpt import GPT, GPTConfig, TrunkState
from contextlab.models.mtp import MTPModel

V = 61
BASE = GPTConfig(vocab_size=V, n_layer=2, n_head=2, n_embd=32, context=32)


def contextlm(
    w: int, fusion: str = "gated", encoder_layers: int = 0, n_layer: int = 2, seed: int = 0
) -> ContextLM:
    torch.manual_seed(seed)
    model = build_arch(
        "contextlm",
        dataclasses.replace(BASE, n_layer=n_layer),
        chunk_size=w,
        fusion=fusion,
        encoder_layers=encoder_layers,
    )
    if fusion == "gated":  # the zero-initialised gate would hide the context pathway from the tests
        with torch.no_grad():
            model.fusion.gate.normal_()
    return model.eval()


def embedding_grads(model, loss_of_model) -> torch.Tensor:
    """Gradient mass (T,) of loss_of_model(model) with respect to each input position's embedding."""
    captured = {}

    def hook(module, inputs, output):
        output.retain_grad()
        captured["emb"] = output

    handle = model.wte.register_forward_hook(hook)
    try:
        model.zero_grad()
        loss_of_model(model).backward()
    finally:
        handle.remove()
    return captured["emb"].grad.abs().sum(dim=(0, 2))


# --------------------------------------------------------------------------- ContextLM


@pytest.mark.parametrize("w", [2, 4, 8])
@pytest.mark.parametrize("T", [13, 19])
def test_contextlm_broadcast_is_the_seeds_alignment(w, T):
    """ĉ^b = (c_init × (w-1), ĉ_1 × w, ..., ĉ_{K-1} × (T+1-(K-1)w)), K = T//w + 1."""
    model = contextlm(w)
    B, C = 2, BASE.n_embd
    h = torch.randn(B, T, C)
    predicted = torch.arange(1, T // w + 1, dtype=torch.float).view(1, -1, 1).expand(B, -1, C)  # ĉ_j = j
    cb = model.broadcast_contexts(h, predicted)
    assert cb.shape == (B, T, C)
    assert torch.equal(cb[:, : w - 1], h[:, :1].expand(B, w - 1, C))  # c_init = h_0
    K = T // w + 1
    expected = [j for j in range(1, K) for _ in range(w)][: T - (w - 1)]
    assert cb[0, w - 1 :, 0].tolist() == expected
    assert expected.count(K - 1) == T + 1 - (K - 1) * w  # the last prediction fills the tail


@pytest.mark.parametrize("w", [2, 4, 8])
@pytest.mark.parametrize("T", [13, 19, 27])
def test_contextlm_context_at_t_uses_exactly_the_chunks_ending_by_t(w, T):
    """∂ĉ^b_t/∂h_s ≠ 0 iff s < ((t+1)//w)·w (the chunks that end at or before t); c_init for t < w-1."""
    model = contextlm(w)
    h = torch.randn(1, T, BASE.n_embd, requires_grad=True)
    cb = model.context_for(h)
    for t in range(T):
        (g,) = torch.autograd.grad(cb[0, t].sum(), h, retain_graph=True)
        used = g[0].abs().sum(-1) > 0  # (T,)
        j = (t + 1) // w
        if j == 0:
            allowed = torch.zeros(T, dtype=torch.bool)
            allowed[0] = True
        else:
            allowed = torch.arange(T) < j * w
        assert torch.equal(used, allowed), (
            f"w={w} t={t}: context depends on {used.nonzero().flatten().tolist()}"
        )


@pytest.mark.parametrize("w", [2, 4, 8])
@pytest.mark.parametrize(
    "fusion,encoder_layers", [("gated", 0), ("plain", 0), ("normalised", 0), ("gated", 1)]
)
def test_contextlm_loss_at_t_has_no_gradient_from_later_inputs(w, fusion, encoder_layers):
    T = 21  # not divisible by 2, 4 or 8
    model = contextlm(w, fusion, encoder_layers)
    idx = torch.randint(0, V, (2, T))
    y = torch.randint(0, V, (2, T))
    for t in range(T):
        grad = embedding_grads(model, lambda m: F.cross_entropy(m(idx).logits[:, t], y[:, t]))
        assert torch.all(grad[t + 1 :] == 0), f"w={w} t={t}: loss depends on later inputs {grad}"
        assert torch.all(grad[: t + 1] > 0), f"w={w} t={t}: loss ignores earlier inputs {grad}"


def test_contextlm_is_causal_with_a_document_mask_too():
    T, w = 18, 4
    model = contextlm(w)
    idx = torch.randint(0, V, (1, T))
    docs = torch.tensor([[0] * 7 + [1] * 11])
    mask = (docs[:, :, None] == docs[:, None, :])[:, None]
    y = torch.randint(0, V, (1, T))
    for t in range(T):
        grad = embedding_grads(model, lambda m: F.cross_entropy(m(idx, attn_mask=mask).logits[:, t], y[:, t]))
        assert torch.all(grad[t + 1 :] == 0)


def test_gated_contextlm_starts_exactly_as_the_gpt():
    torch.manual_seed(0)
    gpt = GPT(BASE)
    torch.manual_seed(0)
    clm = build_arch("contextlm", BASE, fusion="gated")
    idx = torch.randint(0, V, (2, 17))
    assert torch.equal(gpt(idx).logits, clm(idx).logits)
    assert clm.num_params() > gpt.num_params()  # plus the predictor


def test_contextlm_short_sequences_and_generation_lengths():
    model = contextlm(4)
    for T in (1, 2, 3, 4, 5):
        assert model(torch.randint(0, V, (1, T))).logits.shape == (1, T, V)
    # a prefix's logits do not change when tokens are appended (what generation relies on)
    idx = torch.randint(0, V, (1, 23))
    full = model(idx).logits
    for T in (5, 8, 11, 16):
        torch.testing.assert_close(model(idx[:, :T]).logits, full[:, :T], rtol=1e-5, atol=1e-5)


def test_contextlm_config_errors_name_the_option():
    with pytest.raises(UserError, match="fusion"):
        arch_config("contextlm", {**dataclasses.asdict(BASE), "fusion": "sum"})
    with pytest.raises(UserError, match="encoder_layers"):
        arch_config("contextlm", {**dataclasses.asdict(BASE), "encoder_layers": 2})
    with pytest.raises(UserError, match="unknown model architecture"):
        arch_config("rnn", {})
    with pytest.raises(UserError, match="no option"):
        build_arch("gpt", BASE, chunk_size=4)


def test_contextlm_fuses_through_the_gpt_hook_at_the_encoder_split():
    """ContextLM overrides GPT.mix, not the forward: the context enters after block encoder_layers only."""
    assert "forward" not in vars(ContextLM) and "trunk" not in vars(ContextLM)
    idx = torch.randint(0, V, (2, 13))
    for n_enc in (0, 1, 2):
        model = contextlm(4, encoder_layers=n_enc, n_layer=3)
        with torch.no_grad():
            layers = model(idx, return_hidden=True).layers
            x = model.embed(idx)
            state = model.prepare(idx)
            assert torch.equal(layers[0], x)  # layer 0: the embeddings, before any context
            for i in range(4):
                if i > 0:
                    x = model.blocks[i - 1](x, state.rope, None, True)
                fused = model.mix(i, x, state)
                assert torch.equal(fused, x) == (i != n_enc), (n_enc, i)
                x = fused
                if i > 0:
                    assert torch.equal(layers[i], x)


# --------------------------------------------------------------------------- MTP


def test_mtp_with_one_head_is_the_gpt_and_forward_is_head_one():
    torch.manual_seed(0)
    gpt = GPT(BASE)
    torch.manual_seed(0)
    one = build_arch("mtp", BASE, n_future=1)
    idx = torch.randint(0, V, (2, 11))
    assert torch.equal(gpt(idx).logits, one(idx).logits)
    four = build_arch("mtp", BASE, n_future=4)
    heads = four.all_logits(idx)
    assert len(heads) == 4 and torch.equal(heads[0], four(idx).logits)
    assert torch.equal(four.to_gpt()(idx).logits, four(idx).logits)
    assert len(four.future_heads) == 3


def test_mtp_heads_share_the_gpt_trunk_with_any_positions():
    """trunk_states reuses GPT.prepare/run_blocks: head 1 at position offsets is GPT.forward's output."""
    assert "forward" not in vars(MTPModel) and "trunk" not in vars(MTPModel)
    model = build_arch("mtp", BASE, n_future=2).eval()
    idx = torch.randint(0, V, (2, 11))
    with torch.no_grad():
        for positions in (None, 5, torch.arange(3, 14)):
            z, state = model.trunk_states(idx, position_ids=positions)
            assert isinstance(state, TrunkState) and z.shape == (2, 11, BASE.n_embd)
            expected = model(idx, position_ids=positions).logits
            assert torch.equal(model.head_logits(z, 1, state), expected)


def test_mtp_each_head_is_causal():
    T = 12
    model = build_arch("mtp", BASE, n_future=3).eval()
    idx = torch.randint(0, V, (2, T))
    for k in (1, 2, 3):
        for t in range(T):
            grad = embedding_grads(model, lambda m: m.all_logits(idx)[k - 1][:, t].logsumexp(-1).sum())
            assert torch.all(grad[t + 1 :] == 0), f"head {k} at {t} sees the future"
            assert torch.all(grad[: t + 1] > 0)


def test_archs_dict_and_model_classes():
    assert set(ARCHS) == {"gpt", "contextlm", "mtp"}
    assert isinstance(build_arch("contextlm", BASE), ContextLM)
    assert isinstance(build_arch("mtp", BASE), MTPModel)
    assert isinstance(arch_config("contextlm", dataclasses.asdict(BASE)), ContextLMConfig)


@pytest.mark.parametrize("arch", ["gpt", "contextlm"])
def test_explicit_positions_use_the_rope_extension(arch):
    """Explicit position_ids (padded HF generation) must rotate exactly like the cached, extended RoPE."""
    torch.manual_seed(0)
    base = GPTConfig(
        vocab_size=50, n_layer=2, n_head=2, n_embd=32, context=16, rope_extension="yarn", rope_factor=4.0
    )
    model = (GPT(base) if arch == "gpt" else build_arch("contextlm", base, chunk_size=4)).eval()
    idx = torch.randint(0, 50, (2, 40))  # beyond context: the extension matters
    with torch.no_grad():
        cached = model(idx).logits
        explicit = model(idx, position_ids=torch.arange(40)).logits
    assert torch.allclose(explicit, cached, atol=1e-5)
