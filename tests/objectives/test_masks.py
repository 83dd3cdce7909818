"""Exact inputs, labels and attention masks of the rewriting objectives on hand-made rows."""

from __future__ import annotations

import torch

from contextlab.objectives import OBJECTIVES
from contextlab.objectives.base import prefix_lm_mask
from contextlab.objectives.fim import MID, PRE, SUF, document_runs, fim_document
from contextlab.objectives.mlm import mlm_corrupt, select_positions
from contextlab.objectives.prefix_lm import prefix_labels
from contextlab.objectives.span import (
    prefix_batch,
    random_segmentation,
    random_spans_noise_mask,
    replace_spans,
    span_layout,
    span_sequence,
)
from contextlab.objectives.ul2 import parse_denoiser

SPEC = {"vocab_size": 100, "eot_id": 99}
I = -100  # ignored label


def make(name: str, doc_mask: bool = False, **options):
    cls = OBJECTIVES[name]
    obj = cls(cls.Options(**options), doc_mask=doc_mask)
    obj.bind_tokenizer(SPEC)
    return obj


def rows(*lists) -> torch.Tensor:
    return torch.tensor(lists, dtype=torch.long)


# --------------------------------------------------------------------------- MLM


def test_mlm_80_10_10_rewrite_is_exact():
    tokens = rows([10, 11, 12, 13, 14, 15, 16, 17])
    selected = torch.tensor([[0, 1, 0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    action = torch.tensor([[0.0, 0.5, 0.0, 0.85, 0.95, 0.0, 0.0, 0.79]])  # mask, random, keep, mask
    random_tokens = torch.full((1, 8), 42)
    inputs, labels = mlm_corrupt(tokens, selected, action, random_tokens, mask_id=100)
    assert inputs.tolist() == [[10, 100, 12, 42, 14, 15, 16, 100]]
    assert labels.tolist() == [[I, 11, I, 13, 14, I, I, 17]]


def test_mlm_prepare_counts_attention_and_proportions():
    obj = make("mlm")
    assert obj.special_ids == {"[MASK]": 100} and obj.vocab_size == 101
    torch.manual_seed(0)
    tokens = torch.randint(0, 99, (64, 201))
    batch = obj.prepare(tokens)
    assert batch.is_causal is False and batch.attn_mask is None  # full bidirectional attention
    sel = batch.labels != I
    assert sel.sum(1).tolist() == [30] * 64  # round(0.15 * 200) per row
    x = tokens[:, :-1]
    assert torch.equal(batch.labels[sel], x[sel]) and torch.equal(batch.inputs[~sel], x[~sel])
    masked = (batch.inputs[sel] == 100).float().mean()
    kept = (batch.inputs[sel] == x[sel]).float().mean()
    assert 0.75 < masked < 0.85 and 0.06 < kept < 0.14
    assert int(select_positions(3, 10, 4, None, "cpu").sum()) == 12


def test_mlm_document_mask_is_block_diagonal_both_ways():
    obj = make("mlm", doc_mask=True)
    docs = rows([0, 0, 1, 1, 1])
    batch = obj.prepare(torch.randint(0, 99, (1, 5)), docs)
    assert batch.attn_mask.dense()[0, 0].int().tolist() == [
        [1, 1, 0, 0],
        [1, 1, 0, 0],
        [0, 0, 1, 1],
        [0, 0, 1, 1],
    ]


# --------------------------------------------------------------------------- span corruption


def test_span_corruption_of_a_hand_made_row():
    tokens = rows(list(range(10, 20)))
    noise = torch.tensor([[0, 0, 1, 1, 0, 0, 0, 1, 0, 0]], dtype=torch.bool)
    s0, s1, s2 = 200, 201, 202
    sentinels = torch.tensor([s0, s1, s2, 203])
    assert replace_spans(tokens, noise, sentinels).tolist() == [[10, 11, s0, 14, 15, 16, s1, 18, 19]]
    seq, prefix, n_targets = span_sequence(tokens, noise, sentinels, eos=99, total=19)
    assert seq.tolist() == [[10, 11, s0, 14, 15, 16, s1, 18, 19, s0, 12, 13, s1, 17, s2, 99, 99, 99, 99]]
    assert (prefix, n_targets) == (9, 7)
    batch = prefix_batch(seq, torch.tensor([prefix]), torch.tensor([n_targets]))
    # y[q] = seq[q+1]; loss on the 7 targets s0 12 13 s1 17 s2 EOS only (not on the padding)
    assert batch.labels.tolist() == [[I] * 8 + [s0, 12, 13, s1, 17, s2, 99] + [I] * 3]
    mask = batch.attn_mask.dense()[0, 0]
    assert mask[:9, :9].all()  # bidirectional over the corrupted input
    assert not mask[:9, 9:].any()  # the input never sees the targets
    assert torch.equal(mask[9:, :], torch.ones(9, 18, dtype=torch.bool).tril(9))  # causal targets


def test_t5_noise_mask_counts_and_layout():
    L, N, S = span_layout(33, 0.15, 3.0)
    assert (L, N, S) == (29, 4, 1)  # inputs 29 - 4 + 1, targets 4 + 1 + EOS: 32 <= 33 (L = 30 needs 35)
    assert span_layout(513, 0.15, 3.0) == (466, 70, 23)  # 466 + 2 * 23 + 1 = 513: no padding
    torch.manual_seed(0)
    noise = random_spans_noise_mask(16, 466, 70, 23)
    assert noise.sum(1).tolist() == [70] * 16
    starts = noise & ~torch.cat([torch.zeros(16, 1, dtype=torch.bool), noise[:, :-1]], 1)
    assert starts.sum(1).tolist() == [23] * 16 and not noise[:, 0].any() and noise[:, -1].all()
    seg = random_segmentation(100, 10, 4, None, "cpu")
    assert seg.sum(1).eq(10).all() and seg.min() >= 1


def test_span_prepare_shapes_and_vocab():
    obj = make("span", n_sentinels=30)
    assert obj.vocab_size == 130 and obj.special_ids["<extra_id_0>"] == 100
    tokens = torch.randint(0, 99, (4, 513))
    batch = obj.prepare(tokens)
    assert batch.inputs.shape == (4, 512) and batch.is_causal is False
    assert ((batch.labels != I).sum(1) == 70 + 23 + 1).all()  # noise tokens + sentinels + EOS


# --------------------------------------------------------------------------- prefix LM


def test_prefix_lm_mask_and_labels_by_hand():
    mask = prefix_lm_mask(torch.tensor([2]), 5).dense()[0, 0].int().tolist()
    assert mask == [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    y = rows([11, 12, 13, 14, 15])
    assert prefix_labels(y, torch.tensor([2])).tolist() == [[I, 12, 13, 14, 15]]  # tokens 2.. are the suffix
    docs = rows([0, 0, 0, 1, 1])
    assert prefix_lm_mask(torch.tensor([4]), 5, docs).dense()[0, 0].int().tolist() == [
        [1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 1, 1],
    ]


def test_prefix_lm_prepare_agrees_with_its_split():
    obj = make("prefix_lm")
    torch.manual_seed(1)
    tokens = torch.randint(0, 99, (8, 21))
    batch = obj.prepare(tokens)
    for b in range(8):
        P = int((batch.labels[b] == I).sum()) + 1
        assert 2 <= P <= 18  # round(0.1 * 20) .. round(0.9 * 20)
        expect = prefix_lm_mask(torch.tensor([P]), 20).dense()[0]
        assert torch.equal(batch.attn_mask.dense()[b], expect)
        assert batch.labels[b, P - 1 :].tolist() == tokens[b, P:].tolist()


# --------------------------------------------------------------------------- UL2


def test_ul2_mode_tokens_and_denoisers():
    assert parse_denoiser("X:64:0.5") == ("X", 64.0, 0.5) and parse_denoiser("S") == ("S", 0.0, 0.0)
    obj = make("ul2", denoisers=["S"], n_sentinels=8)
    assert obj.special_ids["[R]"] == 100 and obj.special_ids["[S]"] == 101 and obj.special_ids["[X]"] == 102
    tokens = rows(list(range(10, 22)))
    torch.manual_seed(0)
    batch = obj.prepare(tokens)
    assert batch.inputs[0].tolist() == [101] + list(range(10, 20))  # [S] + row, shifted
    P = int((batch.labels[0] == I).sum()) + 1
    assert batch.labels[0].tolist() == [I] * (P - 1) + list(range(10 + P - 1, 21))
    assert torch.equal(batch.attn_mask.dense()[0], prefix_lm_mask(torch.tensor([P]), 11).dense()[0])


def test_ul2_r_denoiser_row_is_mode_token_plus_t5_layout():
    obj = make("ul2", denoisers=["R:3:0.15"], n_sentinels=8)
    tokens = torch.randint(0, 99, (2, 41))
    batch = obj.prepare(tokens)
    L, N, S = span_layout(41, 0.15, 3.0, reserve=1)
    P = 1 + L - N + S
    assert batch.inputs[:, 0].tolist() == [100, 100]  # [R]
    assert ((batch.labels != I).sum(1) == N + S + 1).all()
    assert batch.attn_mask.dense()[:, 0, :P, :P].all() and not batch.attn_mask.dense()[:, 0, :P, P:].any()


# --------------------------------------------------------------------------- FIM


def test_fim_psm_and_spm_by_hand():
    doc = [1, 2, 3, 4, 5, 6, 7, 8, 9]  # body = first 6 tokens, 3 slots for the sentinels
    assert fim_document(doc, 2, 4, False, 90, 91, 92) == [90, 1, 2, 91, 5, 6, 92, 3, 4]
    assert fim_document(doc, 2, 4, True, 90, 91, 92) == [91, 5, 6, 90, 1, 2, 92, 3, 4]
    assert document_runs([0, 0, 1, 1, 1], [5, 6, 7, 8, 9], None) == [(0, 2), (2, 5)]
    assert document_runs(None, [5, 99, 7, 8, 99, 3], 99) == [(0, 2), (2, 5), (5, 6)]


def test_fim_applies_per_document_and_keeps_boundaries():
    obj = make("fim", fim_rate=1.0, spm_rate=0.0, min_doc_tokens=4)
    pre, suf, mid = (obj.special_ids[n] for n in (PRE, SUF, MID))
    row = list(range(10, 20)) + [99] + list(range(30, 37)) + [99] + [40, 41]
    docs = [0] * 11 + [1] * 8 + [2] * 2
    out = obj.transform(rows(row), rows(docs))[0].tolist()
    assert len(out) == len(row) and out[10] == 99 and out[18] == 99  # separators stay
    assert out[0] == pre and out[11] == pre and out[19:] == [40, 41]  # short document untouched
    first = out[:10]
    assert first.count(suf) == 1 and first.count(mid) == 1
    assert sorted(t for t in first if t < 99) == list(range(10, 17))  # the first n-3 tokens, rearranged
    none = make("fim", fim_rate=0.0)
    assert none.transform(rows(row), rows(docs))[0].tolist() == row
