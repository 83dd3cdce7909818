"""The GPT model: shapes, causality (by gradients), RoPE beyond the training context, masks,
training on both MLP kinds, bf16 autocast, parameter counts and weight tying."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from contextlab.errors import UserError
from contextlab.models import GPT, SIZES, Block, GPTConfig, describe_model, size_config
from contextlab.models.rope import apply_rope, rope_tables

VOCAB = 257


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and OpenMP spin-waits crawl on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(
        GPTConfig(
            **{"vocab_size": VOCAB, "n_layer": 2, "n_head": 2, "n_embd": 64, "context": 32, **overrides}
        )
    )


def tokens(B: int, T: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


def test_output_shapes_and_hidden_layers():
    model = tiny()
    out = model(tokens(3, 20))
    assert out.logits.shape == (3, 20, VOCAB)  # padded vocab (320) sliced back
    assert out.hidden.shape == (3, 20, 64)
    assert out.layers is None
    out = model(tokens(3, 20), return_hidden=True)
    assert len(out.layers) == model.config.n_layer + 1
    assert torch.equal(out.layers[0], model.embed(tokens(3, 20)))  # index 0 = embeddings
    assert torch.allclose(model.final_norm(out.layers[-1]), out.hidden)
    assert torch.equal(model.unembed(out.hidden), out.logits)
    picked = model(tokens(3, 20), return_hidden=[-1]).layers
    assert len(picked) == 1 and torch.equal(picked[0], out.layers[-1])


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_causality_by_gradient(mlp):
    model = tiny(mlp=mlp)
    captured = {}

    def keep_embeddings(module, args, output):
        output.retain_grad()
        captured["emb"] = output

    model.wte.register_forward_hook(keep_embeddings)
    T = 12
    idx = tokens(2, T)
    for t in (0, 5, T - 2):
        model.zero_grad()
        logits = model(idx).logits  # (B, T, V)
        F.cross_entropy(logits[:, t], idx[:, t + 1]).backward()
        grad = captured["emb"].grad.abs().sum(dim=(0, 2))  # (T,) gradient mass per input position
        assert torch.all(grad[t + 1 :] == 0), f"loss at {t} depends on later inputs: {grad}"
        assert torch.all(grad[: t + 1] > 0), f"loss at {t} ignores some earlier inputs: {grad}"


def test_rope_beyond_block_size_equals_a_precomputed_cache():
    model = tiny().eval()  # context 32
    idx = tokens(2, 80)
    with torch.no_grad():
        short = model(idx[:, :32]).logits
        long = model(idx).logits  # grows the cos/sin cache to 80
        assert model._rope_cache[0].shape[0] == 80
        assert torch.isfinite(long).all()
        assert torch.allclose(long[:, :32], short, atol=1e-5)  # the grown cache keeps old positions
        bigger = GPT(GPTConfig(**{**vars(model.config), "context": 128})).eval()
        bigger.load_state_dict(model.state_dict())  # same weights, cache built for 128 up front
        assert torch.allclose(bigger(idx).logits, long, atol=1e-5)


def test_position_ids_offset_and_relative_positions():
    model = tiny().eval()
    idx = tokens(2, 16)
    with torch.no_grad():
        base = model(idx).logits
        explicit = model(idx, position_ids=torch.arange(16)).logits
        offset = model(idx, position_ids=7).logits
        shifted = model(idx, position_ids=torch.arange(7, 23).expand(2, 16)).logits
    assert torch.allclose(explicit, base, atol=1e-6)
    assert torch.allclose(offset, shifted, atol=1e-6)
    # RoPE attention depends only on relative positions: a common shift changes nothing
    assert torch.allclose(offset, base, atol=1e-4)
    cos, sin = model.rope(4, "cpu", offset=3)
    assert cos.shape == sin.shape == (4, model.config.head_dim)
    assert torch.allclose(cos[0, 0], torch.cos(torch.tensor(3.0)))  # first frequency is 1


def test_apply_rope_rotates_pairs_of_the_two_halves():
    hs, T = 8, 5
    x = torch.randn(T, hs)
    cos, sin = rope_tables(torch.arange(T), GPTConfig(n_embd=hs, n_head=1, rope_base=100.0))
    out = apply_rope(x, cos, sin)
    theta = torch.arange(T)[:, None] * 100.0 ** (-torch.arange(0, hs, 2) / hs)  # (T, hs/2)
    rotated = torch.polar(torch.ones_like(theta), theta) * torch.complex(x[:, : hs // 2], x[:, hs // 2 :])
    assert torch.allclose(out, torch.cat([rotated.real, rotated.imag], dim=-1), atol=1e-5)
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation keeps lengths


def test_default_causal_equals_an_explicit_lower_triangular_mask():
    model = tiny().eval()
    idx = tokens(2, 24)
    tril = torch.ones(24, 24, dtype=torch.bool).tril()
    with torch.no_grad():
        default = model(idx).logits
        explicit = model(idx, attn_mask=tril, is_causal=False).logits
        combined = model(
            idx, attn_mask=torch.ones(2, 1, 24, 24, dtype=torch.bool)
        ).logits  # is_causal adds tril
        additive = model(
            idx, attn_mask=torch.zeros(24, 24).masked_fill(~tril, float("-inf")), is_causal=False
        ).logits
    assert torch.allclose(explicit, default, atol=1e-5)
    assert torch.allclose(combined, default, atol=1e-5)
    assert torch.allclose(additive, default, atol=1e-5)
    with torch.no_grad():  # and without is_causal, a full mask really is bidirectional
        bidirectional = model(idx, is_causal=False).logits
    assert not torch.allclose(bidirectional[:, :-1], default[:, :-1], atol=1e-3)


def test_document_mask_isolates_documents():
    model = tiny().eval()
    n1, n2 = 10, 14
    doc_id = torch.tensor([0] * n1 + [1] * n2)
    mask = doc_id[:, None] == doc_id[None, :]  # (T, T) block diagonal; causality added by is_causal
    idx = tokens(1, n1 + n2)
    other = idx.clone()
    other[:, :n1] = tokens(1, n1, seed=99)  # a different first document
    with torch.no_grad():
        a = model(idx, attn_mask=mask).logits[:, n1:]
        b = model(other, attn_mask=mask).logits[:, n1:]
        alone = model(idx[:, n1:], position_ids=n1).logits  # document 2 by itself, same positions
        unmasked = model(other).logits[:, n1:]
    assert torch.allclose(a, b, atol=1e-5)
    assert torch.allclose(a, alone, atol=1e-5)
    assert not torch.allclose(a, unmasked, atol=1e-3)  # without the mask document 1 leaks in


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_both_mlps_learn_a_repeated_sequence(mlp):
    model = tiny(mlp=mlp)
    seq = torch.tensor(list(b"the cat sat on the mat. " * 3))[None, :33]  # (1, 33)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        logits = model(seq[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 5.0  # about log(257) at init
    assert losses[-1] < 0.4 * losses[0], losses


def test_swiglu_hidden_width():
    assert GPTConfig(n_embd=256, n_head=4, mlp="swiglu").mlp_dim == 704  # 2/3 * 4 * 256 = 682.7 -> 704
    assert GPTConfig(n_embd=768, n_head=12, mlp="swiglu").mlp_dim == 2048
    assert GPTConfig(n_embd=256, n_head=4, mlp="swiglu", mlp_hidden=512).mlp_dim == 512
    assert GPTConfig(n_embd=256, n_head=4).mlp_dim == 1024


def test_bf16_autocast_is_close_to_fp32():
    model = tiny().eval()
    idx = tokens(2, 32)
    with torch.no_grad():
        ref = model(idx).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(idx).logits
    assert low.dtype == torch.bfloat16
    err = (low.float() - ref).abs().max() / ref.abs().max()
    assert err < 0.02, err
    assert (low.float().argmax(-1) == ref.argmax(-1)).float().mean() > 0.9
    with torch.autocast("cpu", dtype=torch.bfloat16):  # and the backward pass runs
        model.train()
        model(idx).logits.float().logsumexp(-1).mean().backward()
    assert model.wte.weight.grad is not None and torch.isfinite(model.wte.weight.grad).all()


def test_gpt2_small_has_124m_parameters():
    with torch.device("meta"):  # no memory, no init cost
        model = GPT.from_size("gpt2-small", vocab_size=50257, context=1024)
    n = model.num_params(non_embedding=False)
    assert abs(n - 124.4e6) / 124.4e6 < 0.01, n  # GPT-2 small: 124,439,808 (it adds 786K learned positions)
    assert model.num_params(non_embedding=True) == n - 50304 * 768  # padded embedding rows
    assert "GPT 12x768 (12 heads, gelu), 123.6M parameters (85.0M non-embedding)" in describe_model(model)


def test_tied_weights_share_storage():
    model = tiny()
    assert model.lm_head.weight is model.wte.weight
    assert model.lm_head.weight.data_ptr() == model.wte.weight.data_ptr()
    untied = tiny(tie_embeddings=False)
    assert untied.lm_head.weight.data_ptr() != untied.wte.weight.data_ptr()
    assert untied.num_params(non_embedding=False) == model.num_params(non_embedding=False) + 320 * 64
    assert untied.num_params(non_embedding=True) == model.num_params(non_embedding=True)


def test_standalone_block_and_sizes():
    model = tiny()
    block = Block(model.config)
    x = torch.randn(2, 10, 64)
    assert block(x, model.rope(10, x.device)).shape == (2, 10, 64)
    assert block(x).shape == (2, 10, 64)  # no positions at all is allowed
    for name in ("tiny-4x256", "gpt2-small", "gpt2-xl", "pythia-1b"):
        cfg = size_config(name, vocab_size=VOCAB, context=64)
        assert cfg.n_embd % cfg.n_head == 0 and cfg.n_layer == SIZES[name]["n_layer"]
    with pytest.raises(UserError, match="unknown model size"):
        GPT.from_size("huge", VOCAB, 64)
    with pytest.raises(UserError, match="n_head"):
        GPTConfig(n_embd=100, n_head=3)


def test_traces_as_one_graph_for_torch_compile():
    model = tiny()
    idx = tokens(2, 16)
    torch._dynamo.reset()
    for kwargs in (
        {},
        {"position_ids": torch.arange(16)},
        {"attn_mask": torch.ones(16, 16, dtype=torch.bool)},
    ):
        explained = torch._dynamo.explain(model)(idx, **kwargs)
        assert explained.graph_break_count == 0, (kwargs, explained.break_reasons)


@pytest.mark.parametrize("causal", [True, False])
def test_bf16_matmul_attention_matches_sdpa(causal):
    """The CPU bf16 fast path (two batched matmuls) agrees with fp32 SDPA, values and gradients."""
    from contextlab.models.kernels import attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 48, 32, requires_grad=True) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    grad = torch.randn_like(ref)
    ref.backward(grad)
    qb, kb, vb = (t.detach().bfloat16().requires_grad_() for t in (q, k, v))
    out = attention(qb, kb, vb, is_causal=causal)
    out.backward(grad.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=4e-2, rtol=0)
    for fast, exact in zip((qb, kb, vb), (q, k, v)):
        torch.testing.assert_close(fast.grad.float(), exact.grad, atol=4e-2, rtol=0)
    if causal:  # causality: the first query sees only the first key
        torch.testing.assert_close(out[:, :, 0].float(), vb[:, :, 0].float())


def test_rmsnorm_matches_torch_and_its_gradient_is_exact():
    from contextlab.models.kernels import RMSNorm, _RMSNormFunction

    x64 = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    w64 = torch.randn(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: _RMSNormFunction.apply(x, w, 1e-5), (x64, w64))
    torch.manual_seed(0)
    ours, theirs = RMSNorm(64, eps=1e-5), torch.nn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
    ours.load_state_dict(theirs.state_dict())  # same parameter name: checkpoints load either way
    x = torch.randn(4, 16, 64)
    grad = torch.randn_like(x)
    results = []
    for norm in (ours, theirs):
        xx = x.clone().requires_grad_()
        y = norm(xx)
        y.backward(grad)
        results.append((y, xx.grad, norm.weight.grad))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_rmsnorm_uses_the_hand_written_backward_on_the_cpu_only(monkeypatch):
    """Off the CPU (CUDA) the norm is PyTorch's: the hand-written Function inside a compiled CUDA model
    trained models that stalled near a bigram's loss (measured on an H200). A meta tensor stands in for
    a device this machine does not have."""
    from contextlab.models import kernels

    calls = []
    original = kernels._RMSNormFunction.apply
    monkeypatch.setattr(
        kernels._RMSNormFunction, "apply", lambda *a: calls.append(a[0].device) or original(*a)
    )
    norm = kernels.RMSNorm(8, eps=1e-5)
    norm(torch.randn(2, 8))
    assert [d.type for d in calls] == ["cpu"]
    meta = kernels.RMSNorm(8, eps=1e-5, device="meta")
    assert meta(torch.empty(2, 8, device="meta")).shape == (2, 8)
    assert len(calls) == 1  # not taken off the CPU
