"""Every objective trains a tiny model through the real trainer; the checkpoint loads back.

The loaded model (``read_checkpoint(...).build()``, the architecture recorded in the checkpoint)
must give the same next-token logits as the model in the trainer, and ContextLM / MTP
export to Hugging Face with the same logits.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.inference import read_checkpoint
from contextlab.models.contextlm import ContextLM
from contextlab.models.gpt import GPT
from contextlab.models.mtp import MTPModel
from contextlab.train import distributed as D
from contextlab.train.config import RunConfig
from contextlab.train.trainer import Trainer, train
from tests.conftest import shakespeare

TINY = {
    "model": {"size": "tiny-2x128", "n_layer": 2, "n_head": 2, "n_embd": 32},
    "optim": {"lr": 3e-3, "warmup_steps": 1},
    "train": {
        "context": 32,
        "tokens_per_step": 128,
        "log_every": 1,
        "val_every": 0,
        "val_tokens": 64,
        "ckpt_every": 0,
        "keep_last": 1,
        "threads": 1,
        "peak_flops": 1e12,
        "progress": False,
        "dtype": "fp32",
        "max_steps": 3,
    },
    "data": {"val_split": "tail", "val_fraction": 0.1},
}

CASES = [
    ("clm", {}, GPT),
    ("mlm", {}, GPT),
    ("span", {"n_sentinels": 10}, GPT),
    ("prefix_lm", {}, GPT),
    ("fim", {}, GPT),
    ("mtp", {"n_future": 3}, MTPModel),
    ("ul2", {"n_sentinels": 10}, GPT),
    ("contextlm", {"chunk_size": 4}, ContextLM),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    out = tmp_path_factory.mktemp("store") / "shakes"
    src = tmp_path_factory.mktemp("src") / "shakes.txt"
    src.write_text(shakespeare(50_000))
    return ingest(src, out, IngestConfig(), progress=False).store


def config(store, out_dir, name: str, options: dict, **data_overrides) -> RunConfig:
    data = json.loads(json.dumps(TINY))
    data["data"].update(store=str(store.path), **data_overrides)
    data["train"]["out_dir"] = str(out_dir)
    data["objective"] = {"name": name, "options": options}
    return from_dict(RunConfig, data)


@pytest.mark.parametrize("name,options,cls", CASES, ids=[c[0] for c in CASES])
def test_objective_trains_and_its_checkpoint_loads_back(store, tmp_path, name, options, cls):
    trainer = Trainer(config(store, tmp_path / "run", name, options))
    try:
        result = trainer.run()
    finally:
        D.shutdown()
    assert result.steps == 3 and np.isfinite(result.final_loss) and result.val_loss is not None
    ckpt = read_checkpoint(tmp_path / "run")
    model, state = ckpt.build(), ckpt.state
    assert type(model) is cls and state["arch"] == trainer.objective.arch and state["objective"] == name
    assert model.config.vocab_size == trainer.objective.vocab_size
    idx = torch.randint(0, 256, (2, 32))
    trainer.model.eval()
    with torch.no_grad():
        assert torch.equal(model(idx).logits, trainer.model(idx).logits)
    if name == "contextlm":
        assert float(model.fusion.gate.detach().abs().sum()) > 0  # the gate opened during training
    check_left_to_right_loss(trainer, tmp_path / "run", name)
    if name in ("contextlm", "mtp"):  # `contextlab export` writes the arch's own HF type
        from contextlab.models.hf import load_hf_causal_lm
        from contextlab.train.export import export_checkpoint

        hf = load_hf_causal_lm(export_checkpoint(tmp_path / "run", tmp_path / "hf"))
        assert type(hf).__name__ == (
            "ContextlabContextLMForCausalLM" if name == "contextlm" else "ContextlabGPTForCausalLM"
        )
        with torch.no_grad():
            ours = model(idx).logits if name == "contextlm" else model.to_gpt()(idx).logits
            assert torch.allclose(hf(idx).logits, ours, atol=1e-5)


def check_left_to_right_loss(trainer, run_dir, name: str) -> None:
    """val_lm_loss: the validation rows' next-token loss with the model run left to right (after
    UL2's [S]), computed here by hand; equal to val_loss for clm and contextlm; absent for mlm and span."""
    (last,) = [
        r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "val_loss" in r
    ]
    if name in ("mlm", "span"):
        assert "val_lm_loss" not in last
        return
    rows = torch.from_numpy(trainer.val_rows)
    x, y = rows[:, :-1], rows[:, 1:]
    if name == "ul2":  # [S] takes one of the context's positions: the row's last target is not scored
        x, y = x[:, :-1], y[:, :-1]
        x = torch.cat([torch.full((len(x), 1), trainer.objective.special_ids["[S]"]), x], dim=1)
    assert x.size(1) == trainer.cfg.train.context  # never a position past the context it trained at
    from contextlab.eval.adapter import load_model

    info = load_model(run_dir).info  # evaluations read as many text tokens as the prefix leaves
    assert info.context == trainer.cfg.train.context - len(info.lm_prefix) and len(info.lm_prefix) == (
        name == "ul2"
    )
    with torch.no_grad():
        logits = trainer.model(x).logits[:, x.size(1) - y.size(1) :]
    want = float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)))
    assert last["val_lm_loss"] == pytest.approx(want, rel=1e-5)
    if name in ("clm", "contextlm"):  # their own loss is the left-to-right loss
        assert last["val_lm_loss"] == last["val_loss"]
    else:
        assert last["val_lm_loss"] != last["val_loss"]  # a different quantity from the objective's own


def test_contextlm_with_document_mask_and_encoder_split_trains(store, tmp_path):
    res = train(
        config(
            store,
            tmp_path / "run",
            "contextlm",
            {"chunk_size": 2, "encoder_layers": 1, "fusion": "normalised"},
            doc_mask=True,
        )
    )
    assert res.steps == 3 and np.isfinite(res.final_loss)
    model = read_checkpoint(tmp_path / "run").build()
    assert model.config.encoder_layers == 1 and model.config.fusion == "normalised"


def test_bad_objective_options_fail_with_the_option_name(store, tmp_path):
    from contextlab.errors import UserError

    with pytest.raises(UserError, match="fusion"):
        train(config(store, tmp_path / "a", "contextlm", {"fusion": "concat"}))
    with pytest.raises(UserError, match="loss_weights"):
        train(config(store, tmp_path / "b", "mtp", {"n_future": 2, "loss_weights": [1.0]}))


def test_contextlm_and_mtp_export_to_hugging_face(tmp_path):
    import transformers  # noqa: F401  (the hf extra is always installed for tests)

    from contextlab.models.archs import build_arch
    from contextlab.models.gpt import GPTConfig
    from contextlab.models.hf import gpt_from_hf_export, load_hf_causal_lm
    from contextlab.models.hf.export import export_arch_to_hf

    base = GPTConfig(vocab_size=70, n_layer=2, n_head=2, n_embd=32, context=32)
    torch.manual_seed(0)
    ctx = build_arch("contextlm", base, chunk_size=4).eval()
    with torch.no_grad():
        ctx.fusion.gate.normal_()
    mtp = build_arch("mtp", base, n_future=3).eval()
    idx = torch.randint(0, 70, (2, 19))
    for model, folder in ((ctx, "ctx"), (mtp, "mtp")):
        out = export_arch_to_hf(model, tmp_path / folder)
        hf = load_hf_causal_lm(out)
        with torch.no_grad():
            assert torch.equal(hf(idx).logits, model(idx).logits)
        gen = hf.generate(idx[:1, :5], max_new_tokens=4, do_sample=False)
        assert gen.shape == (1, 9)
    assert type(gpt_from_hf_export(tmp_path / "mtp")) is GPT  # MTP exports its next-token GPT
    # a fresh process that imports only contextlab.models.hf loads the ContextLM export with plain
    # transformers
    code = (
        "import sys, torch, transformers, contextlab.models.hf\n"
        "m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])\n"
        "print(type(m).__name__)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "ctx")], capture_output=True, text=True, check=True
    )
    assert res.stdout.strip().splitlines()[-1] == "ContextlabContextLMForCausalLM"
    assert json.loads((tmp_path / "ctx" / "config.json").read_text())["model_type"] == "contextlab-contextlm"
