"""lm-evaluation-harness runs on an export through its command line, with no workaround.

Two local tasks defined here (a rolling-loglikelihood task over a few documents and a
multiple-choice task, both read from JSONL files in tmp_path, offline) run with
``lm_eval --model hf`` on a custom-code export (GELU GPT) and on a native Llama export.
The log-likelihoods lm-eval logs per sample are compared with contextlab's own forward:
the rolling one starts from the tokenizer's end-of-text (lm-eval's prefix token), so a
wrong eos breaks it too."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from contextlab.data.tokenizer_base import ByteTokenizer
from contextlab.models import GPT, GPTConfig
from contextlab.models.hf.export import export_arch_to_hf

DOCS = ["The quick brown fox jumps over the lazy dog.", "To be or not to be, that is the question."]
MC = [
    {"question": "Colour of the sky?", "choices": ["blue", "green"], "answer": 0},
    {"question": "2+2=", "choices": ["3", "4", "5"], "answer": 1},
]
ROLLING_TASK = """task: cl_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/docs.jsonl
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""
MC_TASK = """task: cl_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _write_tasks(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    (data / "mc.jsonl").write_text("".join(json.dumps(d) + "\n" for d in MC))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "rolling.yaml").write_text(ROLLING_TASK.format(data=data))
    (tasks / "mc.yaml").write_text(MC_TASK.format(data=data))
    return tasks


def _logprob(model, context: list[int], continuation: list[int]) -> float:
    """log p(continuation | context) by contextlab's forward."""
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0, :-1].double(), dim=-1)  # (T-1, V)
    rows = torch.arange(len(context) - 1, ids.size(1) - 1)
    return float(lp[rows, ids[0, len(context) :]].sum())


def _samples(out_dir, task: str) -> list[dict]:
    (path,) = out_dir.rglob(f"samples_{task}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])  # custom code, native Llama
def test_lm_eval_command_line_on_an_export(tmp_path, mlp):
    tok = ByteTokenizer()
    tok.save(tmp_path / "tok")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=257, n_layer=2, n_head=2, n_embd=64, context=64, mlp=mlp)).eval()
    export = export_arch_to_hf(model, tmp_path / "export", tokenizer_dir=tmp_path / "tok")
    tasks = _write_tasks(tmp_path)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # lm-eval sees the folder only
    args = f"pretrained={export},dtype=float32" + (",trust_remote_code=True" if mlp == "gelu" else "")
    res = subprocess.run(
        [sys.executable, "-I", "-m", "lm_eval", "--model", "hf", "--model_args", args]
        + ["--tasks", "cl_rolling,cl_mc", "--include_path", str(tasks), "--device", "cpu"]
        + ["--batch_size", "1", "--output_path", str(tmp_path / "out"), "--log_samples"],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    eot = tok.special_tokens["<|endoftext|>"]
    rolling = _samples(tmp_path / "out", "cl_rolling")
    assert len(rolling) == len(DOCS)
    for sample in rolling:
        expected = _logprob(model, [eot], tok.encode(sample["doc"]["text"]))
        assert float(sample["resps"][0][0]) == pytest.approx(expected, abs=1e-4)
    mc = _samples(tmp_path / "out", "cl_mc")
    assert len(mc) == len(MC)
    for sample in mc:
        question, choices = sample["doc"]["question"], sample["doc"]["choices"]
        expected = [_logprob(model, tok.encode(question), tok.encode(" " + c)) for c in choices]
        got = [float(r[0][0]) for r in sample["resps"]]
        assert got == pytest.approx(expected, abs=1e-4)
        assert sample["acc"] == float(max(range(len(got)), key=got.__getitem__) == sample["doc"]["answer"])
