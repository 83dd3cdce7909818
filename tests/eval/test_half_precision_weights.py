"""A Hugging Face model saved in float16 or bfloat16 (most checkpoints are bf16) was scored in that
precision while its result recorded ``"dtype": "fp32"``: a user's bf16 copy differed from its fp32
twin by 3.2e-3 nats a token, read as the model's. Under ``--dtype fp32`` its weights are upcast (exactly)
and computed in fp32, a note says so once, and the result records what they were saved as."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from contextlab.eval.adapter import load_model
from contextlab.eval.results import model_record
from tests.conftest import save_tiny_llama, shakespeare


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("half")
    fp32 = save_tiny_llama(root / "fp32", vocab=300, layers=1, chars=20_000)
    out = {"float32": fp32}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        model = transformers.AutoModelForCausalLM.from_pretrained(fp32, dtype=dtype)
        assert next(model.parameters()).dtype == dtype  # transformers keeps what it was given
        model.save_pretrained(root / name)
        (root / name / "tokenizer.json").write_bytes((fp32 / "tokenizer.json").read_bytes())
        out[name] = root / name
    return out


@pytest.mark.parametrize("saved", ["bfloat16", "float16"])
def test_half_precision_weights_compute_in_fp32_as_recorded(folders, saved, capsys):
    adapter = load_model(folders[saved])
    assert {p.dtype for p in adapter.model.parameters()} == {torch.float32}
    assert f"weights are saved in {saved}; they are computed in fp32" in capsys.readouterr().err
    ids = adapter.encode(shakespeare(400))
    got = adapter.token_logprobs(ids).numpy()
    # the same weights, upcast by hand: the same numbers (a model left in bf16 differs by ~1e-3)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(folders[saved]).float().eval()
    with torch.no_grad():
        logits = ref_model(torch.tensor([ids])).logits[0, :-1]
    ref = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
    assert np.abs(got.reshape(-1)[-len(ref) :] - ref).max() < 1e-5
    record = model_record(adapter)
    assert record["dtype"] == "fp32" and record["weights_saved_as"] == saved
    assert "weights_saved_as" not in model_record(load_model(folders["float32"]))


def test_bf16_weights_stay_bf16_when_bf16_is_asked(folders, capsys):
    adapter = load_model(folders["bfloat16"], dtype="bf16")
    assert {p.dtype for p in adapter.model.parameters()} == {torch.bfloat16}
    assert "computed in fp32" not in capsys.readouterr().err
    assert model_record(adapter)["weights_saved_as"] == "bfloat16"
