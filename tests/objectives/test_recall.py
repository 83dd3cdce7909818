"""Objective recall: the loss is on the MQAR answers only, by the store's own rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from contextlab.data import mqar
from contextlab.errors import UserError
from contextlab.objectives import OBJECTIVES
from contextlab.objectives.recall import Recall, answer_labels


class LogitTable(nn.Module):
    """A "model" whose logits are a free parameter (B, T, V): the gradient shows which positions count."""

    def __init__(self, B: int, T: int, V: int):
        super().__init__()
        self.table = nn.Parameter(torch.randn(B, T, V, generator=torch.Generator().manual_seed(0)))

    def forward(self, x, attn_mask=None, is_causal=True):
        return type("Out", (), {"logits": self.table[:, : x.shape[1]]})()


def rows(n=3):
    cfg = mqar.MQARConfig(pairs=4, keys=6, values=6, queries=3, context=16)
    return mqar.to_tokens(mqar.sample(cfg, n, np.random.default_rng(0)), cfg), cfg


def test_labels_follow_the_stores_answer_rule():
    r, cfg = rows(20)
    t = torch.from_numpy(r)
    labels = answer_labels(t[:, :-1], t[:, 1:], 0, cfg.keys)
    want = mqar.answer_positions(r, cfg.keys)[:, 1:]  # target t + 1 of input t
    assert torch.equal(labels != -100, torch.from_numpy(want))
    assert torch.equal(labels[labels != -100], t[:, 1:][labels != -100])


def test_only_answer_targets_get_gradient_and_loss():
    r, cfg = rows(3)
    tokens = torch.from_numpy(r)
    obj = Recall(Recall.Options(key_ids=[0, cfg.keys]))
    model = LogitTable(3, r.shape[1] - 1, cfg.keys + cfg.values + 2)
    loss, metrics = obj(model, tokens)
    loss.backward()
    touched = model.table.grad.abs().sum(-1) > 0  # (B, T)
    answers = torch.from_numpy(mqar.answer_positions(r, cfg.keys)[:, 1:])
    assert torch.equal(touched, answers) and int(answers.sum()) == 9
    assert float(metrics["answers"]) == 3.0
    want = nn.functional.cross_entropy(model.table[answers], tokens[:, 1:][answers])
    assert float(loss.detach()) == pytest.approx(float(want.detach()), rel=1e-6)
    # the non-answer targets may be anything: the loss does not move
    other = tokens.clone()
    mask = torch.cat([torch.zeros(3, 1, dtype=torch.bool), ~answers], 1)
    other[mask & (tokens >= cfg.keys)] = cfg.keys + cfg.values  # pair values -> filler (keys stay put)
    assert float(obj(model, other)[0].detach()) == pytest.approx(float(loss.detach()), rel=1e-6)


def test_key_ids_come_from_the_mqar_tokenizer_or_fail_in_one_line():
    obj = OBJECTIVES["recall"](Recall.Options())
    obj.bind_tokenizer(mqar.make_tokenizer(mqar.Layout(12, 20)).spec())
    assert obj.keys == (0, 12) and obj.vocab_size == 34
    with pytest.raises(UserError, match="no MQAR vocabulary; set objective.options.key_ids"):
        Recall(Recall.Options()).bind_tokenizer({"name": "byte", "vocab_size": 257})
    plain = torch.arange(10)[None].repeat(2, 1)  # no key repeats: no answers
    with pytest.raises(UserError, match="no answers in the batch"):
        Recall(Recall.Options(key_ids=[0, 5]))(LogitTable(2, 9, 10), plain)
