"""``contextlab generate --speculative``: the plain greedy output, and one-line errors where it cannot run."""

from __future__ import annotations

import json

import pytest

from contextlab.cli import main
from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from tests.conftest import shakespeare


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny trained runs on the same bytes: {"mtp": n_future 3, "clm": a plain GPT}."""
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    root = tmp_path_factory.mktemp("spec")
    (root / "src").mkdir()
    (root / "src" / "a.txt").write_text(shakespeare(20_000))
    store = ingest(root / "src", root / "store", IngestConfig(tokenizer="byte"), progress=False).store
    out = {}
    for name, objective in [("mtp", {"name": "mtp", "options": {"n_future": 3}}), ("clm", {"name": "clm"})]:
        cfg = {
            "model": {"size": "tiny-2x128", "n_embd": 64},
            "data": {"store": str(store.path), "val_split": "tail", "val_fraction": 0.1},
            "objective": objective,
            "optim": {"lr": 3e-3, "warmup_steps": 2},
            "train": {
                "out_dir": str(root / name),
                "context": 64,
                "tokens_per_step": 512,
                "max_steps": 8,
                "val_every": 0,
                "val_tokens": 256,
                "ckpt_every": 0,
                "threads": 1,
                "peak_flops": 1e12,
                "progress": False,
                "dtype": "fp32",
            },
        }
        train(from_dict(RunConfig, cfg))
        out[name] = root / name
    return out


def test_speculative_output_equals_plain_greedy(runs, tmp_path, capsys):
    run = str(runs["mtp"])
    assert main(["generate", "--model", run, "--prompt", "ROMEO:", "--max-new-tokens", "20"]) == 0
    plain = capsys.readouterr().out
    args = ["generate", "--model", run, "--prompt", "ROMEO:", "--max-new-tokens", "20", "--speculative"]
    assert main(args) == 0
    said = capsys.readouterr()
    assert said.out == plain and len(plain) > 1
    # what the drafts gave is said (it printed nothing of it): tokens a forward, each head's acceptance
    line = next(x for x in said.err.splitlines() if x.startswith("speculative: "))
    rate = float(line.split()[1])
    assert 1.0 <= rate <= 3.0 and "drafts accepted: head 2 " in line and ", head 3 " in line
    prompts = tmp_path / "p.txt"
    prompts.write_text("First Citizen:\nO\nWhat say you to this, my lord? I\n")
    outs = []
    for extra in ([], ["--speculative"]):
        dest = tmp_path / f"out{len(outs)}.jsonl"
        argv = ["generate", "--model", run, "--prompts", str(prompts), "--max-new-tokens", "16", "--out"]
        assert main([*argv, str(dest), "--stop", "e", *extra]) == 0
        outs.append([json.loads(line) for line in dest.read_text().splitlines()])
    assert outs[0] == outs[1] and len(outs[0]) == 3


def test_speculative_errors_are_one_line(runs, capsys):
    argv = ["generate", "--prompt", "a", "--speculative"]
    assert main([*argv, "--model", str(runs["clm"])]) == 2
    err = capsys.readouterr().err
    assert "needs an MTP model" in err and len(err.strip().splitlines()) == 1
    assert main([*argv, "--model", str(runs["mtp"]), "--temperature", "0.8"]) == 2
    err = capsys.readouterr().err
    assert "greedy only" in err and len(err.strip().splitlines()) == 1
