"""Causality of the autoregressive objectives, proved with gradients, and their FLOPs.

For every position t that carries a loss in a causal part, the loss at t must have zero
gradient with respect to the embedding of every input after t (and a non-zero one for
at least the inputs at or before t). ContextLM and MTP per head are also covered
model-level in tests/models/test_archs.py (every chunk edge, w in {2, 4, 8}).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from contextlab.models.archs import build_arch
from contextlab.models.flops import block_flops_per_token, flops_per_token, lm_head_flops_per_token
from contextlab.models.gpt import GPTConfig
from contextlab.objectives import OBJECTIVES
from contextlab.objectives.base import Batch

SPEC = {"vocab_size": 50, "eot_id": 49}


def setup(name: str, **options):
    cls = OBJECTIVES[name]
    obj = cls(cls.Options(**options))
    obj.bind_tokenizer(SPEC)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=obj.vocab_size, n_layer=2, n_head=2, n_embd=32, context=32)
    model = build_arch(obj.arch, cfg, **obj.arch_options()).eval()
    if obj.arch == "contextlm" and model.fusion.mode == "gated":
        with torch.no_grad():
            model.fusion.gate.normal_()  # open the gate so the context pathway is exercised
    return obj, model


def grads_per_input(model, batch: Batch, t: int) -> torch.Tensor:
    """(T,) gradient mass of the loss at position t with respect to each input embedding."""
    captured = {}

    def hook(module, inputs, output):
        output.retain_grad()
        captured["emb"] = output

    handle = model.wte.register_forward_hook(hook)
    model.zero_grad()
    logits = model(batch.inputs, attn_mask=batch.attn_mask, is_causal=batch.is_causal).logits
    labels = batch.labels[:, t].clamp(min=0)
    F.cross_entropy(logits[:, t], labels).backward()
    handle.remove()
    return captured["emb"].grad.abs().sum(dim=(0, 2))


def causal_positions(batch: Batch) -> list[int]:
    """Positions with a loss in every row (where the objective claims causality)."""
    return [t for t in range(batch.labels.shape[1]) if bool((batch.labels[:, t] != -100).all())]


@pytest.mark.parametrize(
    "name,options",
    [
        ("clm", {}),
        ("fim", {"fim_rate": 1.0, "min_doc_tokens": 4}),
        ("fim", {"fim_rate": 1.0, "spm_rate": 1.0, "min_doc_tokens": 4}),
        ("prefix_lm", {}),
        ("span", {"n_sentinels": 10}),
        ("ul2", {"n_sentinels": 10}),
        ("contextlm", {"chunk_size": 4}),
        ("contextlm", {"chunk_size": 8, "fusion": "plain"}),
    ],
)
def test_loss_at_t_ignores_later_inputs(name, options):
    obj, model = setup(name, **options)
    torch.manual_seed(3)
    tokens = torch.randint(0, 49, (2, 24))
    tokens[:, 11] = 49  # a document separator in the middle (FIM works per document)
    if name in ("clm", "contextlm"):
        batch = Batch(tokens[:, :-1], tokens[:, 1:])
    else:
        obj.eval()
        batch = obj.prepare(tokens)
    positions = causal_positions(batch)
    assert positions, "no position carries a loss in every row"
    for t in positions:
        grad = grads_per_input(model, batch, t)
        assert torch.all(grad[t + 1 :] == 0), f"{name}: loss at {t} depends on later inputs {grad}"
        assert grad[t] > 0


def test_prefix_lm_prefix_is_bidirectional():
    """The opposite check: a prefix position does see later prefix inputs (the mask is not causal there)."""
    obj, model = setup("prefix_lm", min_prefix=0.5, max_prefix=0.5)
    tokens = torch.randint(0, 49, (1, 21))
    batch = obj.prepare(tokens)
    P = int((batch.labels[0] == -100).sum()) + 1
    batch.labels[:] = 0
    grad = grads_per_input(model, batch, 0)
    assert torch.all(grad[:P] > 0) and torch.all(grad[P:] == 0)


def test_mtp_loss_is_the_weighted_mean_of_its_heads():
    obj, model = setup("mtp", n_future=3, loss_weights=[2.0, 1.0, 1.0])
    tokens = torch.randint(0, 49, (2, 17))
    loss, metrics = obj(model, tokens)
    heads = model.all_logits(tokens[:, :-1])
    manual = [
        F.cross_entropy(
            heads[k][:, : 17 - (k + 1)].reshape(-1, heads[k].shape[-1]), tokens[:, k + 1 :].reshape(-1)
        )
        for k in range(3)
    ]
    torch.testing.assert_close(loss, 0.5 * manual[0] + 0.25 * manual[1] + 0.25 * manual[2])
    torch.testing.assert_close(metrics["loss_head1"], manual[0])


def test_extra_flops_per_token():
    cfg = GPTConfig(vocab_size=4096, n_layer=4, n_head=4, n_embd=256, context=512)
    ctx, _ = setup("contextlm", chunk_size=4, predictor_layers=2)
    assert ctx.extra_flops_per_token(cfg, 512) == 2 * block_flops_per_token(cfg, 128) / 4
    mtp, _ = setup("mtp", n_future=4)
    assert mtp.extra_flops_per_token(cfg, 512) == 3 * (
        block_flops_per_token(cfg, 512) + lm_head_flops_per_token(cfg)
    )
    for name in ("clm", "mlm", "span", "prefix_lm", "fim", "ul2"):
        assert setup(name)[0].extra_flops_per_token(cfg, 512) == 0.0
    # the predictor adds about 2 blocks / w of a 4-block decoder: < 15% of the whole model here
    ratio = ctx.extra_flops_per_token(cfg, 512) / flops_per_token(cfg, 512)
    assert 0.05 < ratio < 0.15
