"""eval mqar: balanced candidate sets, the removed-pairs control at chance, a perfect reader, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from contextlab.cli import main
from contextlab.data import mqar
from contextlab.eval import EVALS
from contextlab.eval import mqar as ev
from contextlab.eval.adapter import in_memory_adapter
from contextlab.inference.open import ModelInfo
from contextlab.models.gpt import GPT, GPTConfig

CFG = mqar.MQARConfig(pairs=8, keys=16, values=16, docs=12, seed=3)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return mqar.write_mqar_store(CFG, tmp_path_factory.mktemp("mqar") / "s", progress=False)


def blind_gpt(tok) -> GPT:
    """A GPT whose attention outputs are zero: each position sees only its own token (ignores the pairs)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_embd=32, context=CFG.length))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("attn.proj.weight"):
                p.zero_()
            elif p.dim() == 2:
                p.mul_(5.0)
    return model.eval()


class Reader:
    """A perfect MQAR reader in plain Python: after a key seen before, all mass on that key's value;
    after an unseen key, uniform over the values (so every candidate ties)."""

    def __init__(self, tok):
        self.tokenizer, self.vocab_size, self.context, self.batch_size = tok, tok.vocab_size, 10_000, 8
        self.info = ModelInfo("reader", "contextlab", "-", "reader", 0, 10_000, True, tok.spec())

    def check_length(self, *a, **k):
        pass

    def _logprobs(self, prefix: list[int]) -> np.ndarray:
        out = np.full(self.vocab_size, -30.0)
        out[CFG.keys : CFG.keys + CFG.values] = -np.log(CFG.values)
        last = prefix[-1]
        for a, b in zip(prefix[:-2], prefix[1:-1]):
            if a == last:
                out[:] = -30.0
                out[b] = 0.0
        return out

    def logits(self, ids):
        ids = np.asarray(ids)
        return torch.tensor(
            np.stack([[self._logprobs(list(r[: t + 1])) for t in range(len(r))] for r in ids])
        )

    def score_continuations(self, prompt, candidates):
        return self.score_spans([(list(prompt) + list(c), len(prompt)) for c in candidates])

    def score_spans(self, items):
        return np.array([self._logprobs(list(seq[:start]))[seq[start]] for seq, start in items])


def test_a_model_blind_to_the_pairs_is_at_chance_and_gains_nothing_from_them(store):
    tok = mqar.make_tokenizer(mqar.layout_of(CFG))
    out = ev.run(in_memory_adapter(blind_gpt(tok), tok, "blind"), ev.Options(sequences=12), str(store))
    s = out.results["summary"]
    assert s["n"] == 12 * 8 and s["chance"] == 0.25
    for key in ("likelihood_accuracy", "control_accuracy"):  # it reads only the query key itself
        lo, hi = s["likelihood_accuracy_ci95" if key == "likelihood_accuracy" else "control_ci95"]
        assert lo < 0.25 < hi, key
    assert s["calibrated"] == pytest.approx(0.0, abs=1e-5)  # the same last token with or without the pairs
    assert s["calibrated_specific"] == pytest.approx(0.0, abs=1e-5)


def test_a_perfect_reader_scores_one_and_falls_to_chance_without_the_pairs(store):
    tok = mqar.make_tokenizer(mqar.layout_of(CFG))
    out = ev.run(Reader(tok), ev.Options(sequences=12, pairs=[4, 8], distance_bins=2), str(store))
    s = out.results["summary"]
    assert s["vocab_accuracy"] == 1.0 and s["likelihood_accuracy"] == 1.0
    assert s["control_accuracy"] == 0.25  # no candidate left in the control: ties, balanced: exactly 1/k
    assert s["calibrated_specific"] > 5
    assert [b["pairs"] for b in out.results["by_pairs"]] == [4, 8]
    assert [b["answers"] for b in out.results["by_pairs"]] == [12 * 4, 12 * 8]
    assert {tuple(c["cell"]) for c in out.results["by_cell"]} <= {(4, 0), (4, 8), (8, 0), (8, 16)}
    assert out.arrays["vocab_correct"].sum() == 12 * 12


def test_cli_trains_and_evaluates_a_tiny_run(store, tmp_path):
    assert "mqar" in EVALS
    run = tmp_path / "run"
    sets = {
        "data.store": store,
        "data.val_store": store,
        "data.mode": "long_docs",
        "objective.name": "recall",
        "model.size": "tiny-2x128",
        "model.n_embd": 32,
        "train.context": 0,
        "train.rows_per_step": 4,
        "train.max_steps": 2,
        "train.out_dir": run,
        "train.val_rows": 4,
        "train.dtype": "fp32",
        "train.device": "cpu",
        "train.progress": "false",
        "train.threads": 1,
        "optim.warmup_steps": 1,
    }
    assert main(["train", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]]) == 0
    log = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert log[-1]["answers"] == 8.0 and 0 <= log[-1]["answer_acc"] <= 1
    args = [
        "eval",
        "mqar",
        "--model",
        str(run),
        "--data",
        str(store),
        "--sequences",
        "4",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    res = json.loads((tmp_path / "mqar.json").read_text())["results"]
    assert res["summary"]["n"] == 4 * 8 and (tmp_path / "mqar.png").is_file()
    assert 0 <= res["summary"]["control_accuracy"] <= 1
    # the store by place and content: read on the store it trained on, the result says so (it recorded
    # only a path, so report and compare could not tell training sequences from held-out ones)
    data = json.loads((tmp_path / "mqar.json").read_text())["data"]
    assert data["store"] == str(store) and data["hash"] and data["training_store"] is True
    values = data["config"]["values"]  # the vocabulary accuracy's chance is a blind guess among the values
    assert res["summary"]["vocab_chance"] == pytest.approx(1 / values)
    assert (
        f"(a blind guess among the {values} values: {1 / values:.3f}; a model that answers" in res["text"][0]
    )
    # and the baseline a model that does not bind keys to values reaches (0.262 read as 16x chance)
    n = data["config"].get("pairs") or res["by_pairs"][0]["pairs"]
    first, eliminating = res["summary"]["vocab_no_binding"]
    assert first == pytest.approx(1 / n) and eliminating == pytest.approx(
        sum(1 / k for k in range(1, n + 1)) / n
    )
    assert f"binds none to its key: {first:.3f}, and {eliminating:.3f} if it leaves out" in res["text"][0]
    assert res["summary"]["vocab_accuracy_ci95"] == res["by_pairs"][0]["vocab_ci95"]


def test_a_text_model_is_told_the_store_is_a_synthetic_vocabulary(store):
    """A model of another tokenizer (a text model) on an MQAR store: one line saying no ingest can help
    (it used to suggest `contextlab data ingest SOURCE --tokenizer ...`, and the store has no source)."""
    from contextlab.errors import UserError
    from tests.eval.conftest import byte_adapter, tiny_gpt

    with pytest.raises(UserError, match="synthetic vocabulary of keys and values .* use kv, passkey or niah"):
        ev.run(byte_adapter(tiny_gpt(0)), ev.Options(), str(store))


def test_any_evaluation_of_a_synthetic_store_with_a_text_model_says_no_ingest_helps(store):
    """ppl (any evaluation that opens a token store) of an MQAR store with a text model: the fix names the
    synthetic vocabulary, not an ingest of a source the store does not have."""
    from contextlab.errors import UserError
    from contextlab.eval import ppl
    from tests.eval.conftest import byte_adapter, tiny_gpt

    with pytest.raises(
        UserError, match="synthetic mqar store in its own vocabulary, which no ingest can make"
    ):
        ppl.run(byte_adapter(tiny_gpt(0)), ppl.Options(), str(store))
