"""A GPT whose weights are written to copy (``eval/induction_gpt.py``), saved as an ordinary run:
the regression test that the whole model path still lets a model read its context.

Through the command line, as a user would: ``eval niah`` and ``eval passkey`` score it at 1.0,
``generate`` (with the KV cache) writes back a passkey placed in its prompt, ``export`` gives a
folder that a process which cannot import contextlab loads with the same logits and the same
greedy continuation, and lm-eval's command line runs on it. The tokenizer is a 1,024-id BPE
trained on Tiny Shakespeare; the model matches the last three tokens (with two, "sky is" and
"key is" end alike in this BPE, and greedy generation copies the sky's colour)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from contextlab.cli import main as cli
from contextlab.data.tokenizers import load_tokenizer
from contextlab.eval.induction_gpt import induction_gpt, positional_margin
from contextlab.inference import open_model
from contextlab.train.checkpoint import write_untrained_run
from tests.conftest import REPO, shakespeare
from tests.models.test_hf_lm_eval import _write_tasks
from tests.models.test_hf_native_export import CHILD

PASSKEY_PROMPT = (
    "There is an important info hidden inside a lot of irrelevant text. Find it. "
    + "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. " * 6
    + "The pass key is 73915. Remember it. 73915 is the pass key. "
    + "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. " * 6
    + "What is the pass key? The pass key is"
)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("written")
    text = shakespeare(200_000)
    tok = load_tokenizer("bpe:1024", texts=lambda: [text])
    model = induction_gpt(tok.vocab_size, context=4096)
    write_untrained_run(root / "run", model, tok, note="written induction GPT (tests)")
    return root, model, tok


def test_the_construction_copies_after_a_repeated_sequence(written):
    _root, model, tok = written
    g = torch.Generator().manual_seed(0)
    half = torch.randint(0, tok.vocab_size, (1, 600), generator=g)
    x = torch.cat([half, half], dim=1)  # the second half repeats the first
    with torch.no_grad():
        pred = model(x).logits[0].argmax(-1)
    assert (pred[601:-1] == x[0, 602:]).float().mean() >= 0.99
    assert positional_margin(model.config, 4096) > 1.0  # the previous-token head holds


@pytest.mark.parametrize("task", ["niah", "passkey"])
def test_eval_scores_it_at_one_through_the_command_line(written, task, capsys):
    root, _model, _tok = written
    out = root / f"eval_{task}"
    args = ["eval", task, "--model", str(root / "run"), "--lengths", "1024", "--samples", "1"]
    args += ["--depths", "0,50,100", "--scoring", "likelihood", "--out", str(out)]
    if task == "niah":
        args += ["--data", str(REPO / "tests" / "fixtures" / "tinyshakespeare" / "input.txt")]
    assert cli(args) == 0
    summary = json.loads((out / f"{task}.json").read_text())["results"]["summary"]
    assert summary["likelihood_accuracy"] == 1.0 and summary["n"] == 15


def test_generate_with_the_cache_writes_back_the_passkey(written, capsys):
    root, _model, _tok = written
    capsys.readouterr()
    assert (
        cli(["generate", "--model", str(root / "run"), "--prompt", PASSKEY_PROMPT, "--max-new-tokens", "8"])
        == 0
    )
    assert capsys.readouterr().out.strip().startswith("73915")


def test_its_export_loads_without_contextlab_and_lm_eval_runs_on_it(written, tmp_path):
    root, _model, tok = written
    assert cli(["export", str(root / "run"), "--out", str(tmp_path / "hf")]) == 0
    model, _tok, _info = open_model(root / "run")
    x = torch.tensor([tok.encode(PASSKEY_PROMPT)])
    with torch.no_grad():
        logits = model(x).logits
        seq = x
        for _ in range(8):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    folder = str(tmp_path / "hf")
    case = {"x": x, "logits": logits, "prompt": x, "new": 8, "text": "The pass key is", "remote": True}
    torch.save(case, folder + ".expected.pt")
    env = {**os.environ, "HF_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    run = dict(capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=600)
    res = subprocess.run([sys.executable, "-I", "-c", CHILD, str(tmp_path / "out.json"), folder], **run)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads((tmp_path / "out.json").read_text())[folder]
    assert got["max_diff"] < 1e-4
    assert got["generated"] == seq[0].tolist()
    assert tok.decode(seq[0, x.size(1) :].tolist()).startswith(" 73915")
    tasks = _write_tasks(tmp_path)
    res = subprocess.run(
        [sys.executable, "-I", "-m", "lm_eval", "--model", "hf"]
        + ["--model_args", f"pretrained={folder},dtype=float32,trust_remote_code=True"]
        + ["--tasks", "cl_rolling,cl_mc", "--include_path", str(tasks), "--device", "cpu"]
        + ["--batch_size", "1", "--output_path", str(tmp_path / "lm_eval")],
        **run,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert list((tmp_path / "lm_eval").rglob("results_*.json"))
