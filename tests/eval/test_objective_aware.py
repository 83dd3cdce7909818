"""Objective-aware scoring: a run knows its objective. Causal evaluations and export refuse a model
that is no left-to-right LM (MLM, span corruption) in one line; a UL2 model is scored after its
[S] mode token, exactly as computed by hand."""

from __future__ import annotations

import pytest
import torch

from contextlab.cli import main as cli
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.eval import load_model
from contextlab.inference import read_checkpoint
from contextlab.train.export import export_checkpoint
from contextlab.train.trainer import train
from tests.conftest import shakespeare
from tests.objectives.test_training import config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("objective_runs")
    src = root / "shakes.txt"
    src.write_text(shakespeare(30_000))
    store = ingest(src, root / "store", IngestConfig(), progress=False).store
    options = {"mlm": {}, "span": {"n_sentinels": 10}, "ul2": {"n_sentinels": 10}, "clm": {}}
    for name, opts in options.items():
        train(config(store, root / name, name, opts))
    return root, store


@pytest.mark.parametrize("name", ["mlm", "span"])
def test_a_model_that_is_no_causal_lm_is_refused_by_causal_evals_and_export(runs, name, tmp_path, capsys):
    root, store = runs
    args = [
        "eval",
        "ppl",
        "--model",
        str(root / name),
        "--data",
        str(store.path),
        "--out",
        str(tmp_path / "e"),
    ]
    assert cli(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"trained with objective {name}:" in err[0] and "left-to-right" in err[0]
    assert not (tmp_path / "e" / "ppl.json").exists()
    with pytest.raises(UserError, match=f"is not exported: .*objective {name}"):
        export_checkpoint(root / name, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_ul2_model_is_scored_after_its_s_mode_token(runs):
    root, store = runs
    adapter = load_model(root / "ul2")
    ckpt = read_checkpoint(root / "ul2")
    model, state = ckpt.build(), ckpt.state
    (s_id,) = state["left_to_right"]["prefix_ids"]
    assert adapter.info.objective == "ul2" and adapter.info.lm_prefix == [s_id] and not adapter.info.not_lm
    ids = torch.tensor(store.doc(0)[:30], dtype=torch.long)
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.cat([torch.tensor([s_id]), ids])[None]).logits.float(), -1)[0]
    by_hand = lp[1:-1].gather(1, ids[1:, None])[:, 0]  # position i (after [S]) predicts ids[i]
    assert torch.allclose(adapter.token_logprobs(ids.tolist()), by_hand, atol=1e-5)
    with pytest.raises(UserError, match="is not exported: .*mode token"):
        export_checkpoint(root / "ul2", root / "ul2_hf")


def test_a_clm_model_is_scored_as_it_is(runs):
    root, _ = runs
    adapter = load_model(root / "clm")
    assert adapter.info.objective == "clm" and adapter.info.lm_prefix == [] and not adapter.info.not_lm
