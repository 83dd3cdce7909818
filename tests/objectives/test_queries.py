"""The queries objective: K questions on one context score exactly as K single-question rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contextlab.errors import UserError
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.objectives import OBJECTIVES
from contextlab.objectives.queries import Queries, queries_mask


def test_mask_is_causal_on_the_context_and_isolates_the_questions():
    m = queries_mask(4, 3)[0, 0]
    assert m[:4, :4].equal(torch.ones(4, 4, dtype=torch.bool).tril())
    assert m[4:, :4].all() and not m[:4, 4:].any()
    assert m[4:, 4:].equal(torch.eye(3, dtype=torch.bool))


def test_each_answer_is_scored_as_its_own_single_question_row():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, n_layer=2, n_head=2, n_embd=32, context=32)).eval()
    L, K, B = 9, 4, 3
    rows = torch.randint(0, 64, (B, L + 2 * K))
    obj = OBJECTIVES["queries"](Queries.Options(n_queries=K))
    with torch.no_grad():
        loss, _ = obj(model, rows)
        singles = []
        for k in range(K):
            one = torch.cat([rows[:, :L], rows[:, L + k : L + k + 1]], dim=1)  # [context, Q_k], plain causal
            logits = model(one).logits[:, -1]
            singles.append(torch.nn.functional.cross_entropy(logits, rows[:, L + K + k], reduction="none"))
    want = torch.stack(singles).mean()
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    # and the answers matter: a different answer changes the loss
    other = rows.clone()
    other[:, -1] = (other[:, -1] + 1) % 64
    with torch.no_grad():
        assert obj(model, other)[0].item() != pytest.approx(loss.item(), rel=1e-6)


def test_rows_too_short_are_refused():
    model = GPT(GPTConfig(vocab_size=64, n_layer=1, n_head=2, n_embd=16, context=16))
    obj = Queries(Queries.Options(n_queries=4))
    with pytest.raises(UserError, match="train.context"):
        obj(model, torch.zeros(2, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="n_queries"):
        Queries.Options(n_queries=0)


def test_training_on_queries_lowers_the_answer_loss():
    """A few steps on a 12-bit parity store with K = 8 move the answer loss off its start."""
    from contextlab.data import synthetic as syn

    torch.manual_seed(0)
    cfg = syn.ParityConfig(n_bits=12, n_tasks=4, min_far_bit=2, queries=8, bias_fraction=0.5)
    tasks = syn.make_tasks(cfg)
    rows = torch.from_numpy(syn.to_tokens(syn.sample(cfg, tasks, 256, np.random.default_rng(0))))
    model = GPT(GPTConfig(vocab_size=257, n_layer=2, n_head=2, n_embd=32, context=32))
    obj = Queries(Queries.Options(n_queries=8))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = obj(model, rows)[0].item()
    for _ in range(60):
        loss, _ = obj(model, rows)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first - 0.1
