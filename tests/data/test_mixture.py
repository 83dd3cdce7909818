"""Data mixtures: exact proportions at every step and over a long run, exact resume, rank slices,
training on a mixture."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from contextlab.config import from_dict
from contextlab.data.loader import PackedRows, TokenLoader
from contextlab.data.mixture import MixtureLoader, exact_shares
from contextlab.data.packing import PackConfig, pack
from contextlab.errors import UserError
from contextlab.eval.adapter import load_model
from contextlab.train.config import RunConfig
from contextlab.train.trainer import train
from tests.data.packing.helpers import make_store

LETTERS = ["abc", "def", "ghi"]  # each source writes with its own letters: a row's bytes name its source


def corpus(letters: str, n: int, seed: int) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    return {
        f"doc{i:03d}.txt": " ".join(
            "".join(rng.choice(list(letters), size=int(rng.integers(2, 6))))
            for _ in range(int(rng.integers(5, 30)))
        )
        for i in range(n)
    }


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    return [
        pack(
            make_store(root, corpus(letters, 60, i), name=f"s{i}"),
            root / f"p{i}",
            PackConfig(method="ep", context=32, seed=1),
            progress=False,
        ).packed
        for i, letters in enumerate(LETTERS)
    ]


def loader(packed, weights, rows, rank=0, world=1, seed=0):
    subs = [TokenLoader(PackedRows(p, 32), 1, seed=seed + i) for i, p in enumerate(packed)]
    return MixtureLoader(subs, weights, rows, rank=rank, world_size=world)


def source_of(row: np.ndarray) -> int:
    letter = next(chr(int(t)) for t in row if 97 <= t <= 122)  # the first letter (skips spaces and EOT)
    return next(i for i, letters in enumerate(LETTERS) if letter in letters)


def test_every_step_and_the_long_run_hold_the_exact_shares(packed):
    mix = loader(packed, [0.5, 0.3, 0.2], rows=10)
    totals = np.zeros(3, dtype=int)
    for _ in range(300):  # 3000 rows: several epochs of every source
        per_step = np.bincount([source_of(r) for r in mix.next_batch().tokens], minlength=3)
        assert per_step.tolist() == [5, 3, 2]
        totals += per_step
    assert totals.tolist() == [1500, 900, 600] and mix.counts.tolist() == [1500, 900, 600]


def test_shares_never_drift_by_a_row(packed):
    mix = loader(packed, [1, 2, 4], rows=7)  # weights 1/7, 2/7, 4/7: not integral per row
    counts = np.zeros(3)
    w = np.array([1, 2, 4]) / 7
    for n, src in enumerate(mix.assign(20_000), start=1):
        counts[src] += 1
        assert np.all(np.abs(counts - w * n) < 1)
    assert exact_shares(20_000, [1, 2, 4]).tolist() == counts.tolist()


def test_each_source_yields_its_own_loader_order(packed):
    mix = loader(packed, [0.5, 0.5, 0.0001], rows=4)
    rows = np.concatenate([mix.next_batch().tokens for _ in range(30)])
    alone = TokenLoader(PackedRows(packed[1], 32), 1, seed=1)  # source 1 by itself, same seed
    from_b = [r for r in rows if source_of(r) == 1]
    assert len(from_b) == 60
    assert all(np.array_equal(r, alone.next_batch().tokens[0]) for r in from_b)


def test_resume_is_exact_and_ranks_split_the_global_batch(packed):
    ref = loader(packed, [0.5, 0.25, 0.25], rows=8)
    expected = [ref.next_batch().tokens for _ in range(40)]
    first = loader(packed, [0.5, 0.25, 0.25], rows=8)
    got = [first.next_batch().tokens for _ in range(13)]
    state = json.loads(json.dumps(first.state_dict()))  # through JSON, as in a checkpoint
    second = loader(packed, [0.5, 0.25, 0.25], rows=8)
    second.load_state_dict(state)
    got += [second.next_batch().tokens for _ in range(27)]
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    r0, r1 = (loader(packed, [0.5, 0.25, 0.25], rows=8, rank=r, world=2) for r in (0, 1))
    for batch in expected[:10]:
        assert np.array_equal(np.concatenate([r0.next_batch().tokens, r1.next_batch().tokens]), batch)
    with pytest.raises(UserError, match="other weights"):
        loader(packed, [0.5, 0.5, 0.25], rows=8).load_state_dict(state)


def test_bad_weights_are_refused(packed):
    with pytest.raises(UserError, match="must be positive"):
        loader(packed, [1.0, 0.0, 1.0], rows=4)


def mixture_config(sources, out_dir, **data) -> RunConfig:
    return from_dict(
        RunConfig,
        {
            "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
            "optim": {"lr": 3e-3, "warmup_steps": 2},
            "data": {
                "mixture": [
                    {"packed": str(sources[0].path), "weight": 0.5},
                    {"packed": str(sources[1].path), "weight": 0.5},
                ],
                "val_fraction": 0.1,
                **data,
            },
            "train": {
                "out_dir": str(out_dir),
                "context": 32,
                "tokens_per_step": 128,
                "max_steps": 6,
                "ckpt_every": 3,
                "val_every": 0,
                "val_tokens": 128,
                "threads": 1,
                "peak_flops": 1e12,
                "progress": False,
                "dtype": "fp32",
                "log_every": 1,
            },
        },
    )


def test_training_on_a_mixture_resumes_exactly(packed, tmp_path):
    ref = tmp_path / "ref"
    res = train(mixture_config(packed, ref))
    assert res.steps == 6 and res.val_loss is not None
    state = json.loads((ref / "checkpoints" / "step_000006" / "state.json").read_text())
    assert state["loader"]["mixture"] and state["loader"]["counts"] == [12, 12]  # 6 steps x 4 rows, half each
    crashed = tmp_path / "crashed"
    shutil.copytree(ref, crashed)
    shutil.rmtree(crashed / "checkpoints" / "step_000006")
    train(mixture_config(packed, crashed))
    loss = lambda d: [json.loads(x)["loss"] for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert len(loss(ref)) == 6 and loss(crashed) == loss(ref)  # steps 4-6 recomputed bitwise
    adapter = load_model(ref)  # evaluations find the tokenizer through the mixture's packed stores
    assert adapter.tokenizer.hash == packed[0].store.tokenizer_hash
    with pytest.raises(UserError, match="set data.packed or data.mixture, not both"):
        train(mixture_config(packed, tmp_path / "both", packed=str(packed[2].path)))
