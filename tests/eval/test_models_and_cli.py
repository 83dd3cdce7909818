"""Loading through the real code: a tiny HF GPT-2 folder, a trained contextlab run; the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contextlab.cli.eval import cmd_eval
from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.tokenizers import train_bpe
from contextlab.errors import UserError
from contextlab.eval import load_model
from tests.conftest import shakespeare

TEXT = shakespeare(60_000)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A tiny GPT-2 saved with save_pretrained, with a trained BPE tokenizer.json beside it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("hf") / "tiny-gpt2"
    tok = train_bpe([TEXT], 300)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=tok.vocab_size, n_positions=128, n_embd=32, n_layer=2, n_head=2)
    )
    model.save_pretrained(folder)
    tok._tok.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def stores(tmp_path_factory, hf_folder):
    src = tmp_path_factory.mktemp("src")
    for i in range(4):
        (src / f"part{i}.txt").write_text(TEXT[i * 15_000 : (i + 1) * 15_000])
    root = tmp_path_factory.mktemp("stores")
    hf_store = ingest(
        src, root / "hf", IngestConfig(tokenizer=f"hf:{hf_folder / 'tokenizer.json'}"), progress=False
    )
    byte_store = ingest(src, root / "bytes", IngestConfig(tokenizer="byte"), progress=False)
    return hf_store.store, byte_store.store


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, stores):
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    _, byte_store = stores
    out = tmp_path_factory.mktemp("runs") / "tiny"
    cfg = {
        "model": {"size": "tiny-4x256", "n_layer": 2, "n_head": 2, "n_embd": 64},
        "data": {"store": str(byte_store.path), "val_split": "tail", "val_fraction": 0.1},
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "train": {
            "out_dir": str(out),
            "context": 64,
            "tokens_per_step": 512,
            "max_steps": 6,
            "val_every": 0,
            "val_tokens": 256,
            "ckpt_every": 0,
            "threads": 1,
            "peak_flops": 1e12,
            "progress": False,
            "dtype": "fp32",
            "log_every": 3,
        },
    }
    train(from_dict(RunConfig, cfg))
    return out


def test_hf_gpt2_loads_through_the_real_code_and_matches_its_own_forward(hf_folder, stores):
    from transformers import GPT2LMHeadModel

    adapter = load_model(hf_folder, batch_size=2)
    assert adapter.info.kind == "hf" and adapter.info.context == 128 and not adapter.info.extends_beyond
    assert adapter.tokenizer.hash == stores[0].tokenizer_hash
    ids = np.asarray(stores[0].doc(0)[:50], dtype=np.int64)
    ref = GPT2LMHeadModel.from_pretrained(hf_folder).eval()
    with torch.no_grad():
        logp = F.log_softmax(ref(torch.as_tensor(ids[None, :-1])).logits.float(), -1)[0]
    expected = logp.gather(-1, torch.as_tensor(ids[1:, None]))[:, 0]
    torch.testing.assert_close(adapter.token_logprobs(ids)[0], expected, rtol=1e-4, atol=1e-4)
    h = adapter.hidden_states(ids[None], layer=1)
    assert h.shape == (1, 50, 32)
    with pytest.raises(UserError, match="supports at most 128"):
        adapter.token_logprobs(np.zeros(200, np.int64))


def test_tokenizer_mismatch_is_one_clear_error(hf_folder, stores):
    with pytest.raises(UserError, match="tokenizer .* differs from") as err:
        cmd_eval(["ppl", "--model", str(hf_folder), "--data", str(stores[1].path), "--out", "/tmp/never"])
    # a Hugging Face folder's tokenizer is hf:FOLDER (dir: is for tokenizers saved by contextlab)
    assert str(err.value).endswith(
        "ingest the data again with the model's tokenizer (contextlab data ingest SOURCE --tokenizer "
        f"hf:{hf_folder} --out STORE)"
    )


def test_contextwise_past_the_context_is_one_grammatical_line(hf_folder, stores, tmp_path):
    args = ["contextwise", "--model", str(hf_folder), "--data", str(stores[0].path)]
    with pytest.raises(UserError) as err:
        cmd_eval([*args, "--out", str(tmp_path), "--length", "200", "--max-docs", "2"])
    assert str(err.value) == (
        f"each contextwise piece runs {hf_folder} on 199 tokens but it supports at most 128; lower --length"
    )


def test_cli_on_hf_folder_writes_json_and_plot(hf_folder, stores, tmp_path):
    assert (
        cmd_eval(
            [
                "contextwise",
                "--model",
                str(hf_folder),
                "--data",
                str(stores[0].path),
                "--out",
                str(tmp_path),
                "--length",
                "100",
                "--max-docs",
                "4",
                "--pieces-per-doc",
                "0",
            ]
        )
        == 0
    )
    doc = json.loads((tmp_path / "contextwise.json").read_text())
    assert doc["model"]["kind"] == "hf" and doc["data"]["hash"] == stores[0].hash
    assert doc["options"]["length"] == 100 and doc["contextlab_version"] and len(doc["results"]["loss"]) == 99
    assert (tmp_path / "contextwise.png").stat().st_size > 1000
    assert (
        cmd_eval(
            [
                "ppl",
                "--model",
                str(hf_folder),
                "--data",
                str(stores[0].path),
                "--out",
                str(tmp_path),
                "--stride",
                "64",
                "--dtype",
                "bf16",
                "--max-docs",
                "2",
                "--max-tokens",
                "600",
            ]
        )
        == 0
    )
    doc = json.loads((tmp_path / "ppl.json").read_text())
    losses = np.load(tmp_path / doc["arrays"]["token_losses"])
    assert len(losses) == doc["results"]["n_tokens_scored"] == 2 * 599 and np.isfinite(losses).all()


def test_trained_run_loads_its_tokenizer_and_runs_evals(trained_run, stores, tmp_path, hf_folder):
    adapter = load_model(trained_run)
    assert adapter.info.kind == "contextlab" and adapter.tokenizer.hash == stores[1].tokenizer_hash
    assert adapter.info.context == 64 and adapter.info.step == 6
    assert (
        cmd_eval(
            [
                "contextwise",
                "--model",
                str(trained_run),
                "--model",
                str(trained_run / "checkpoints" / "step_000006"),
                "--data",
                str(stores[1].path),
                "--out",
                str(tmp_path),
                "--max-docs",
                "4",
            ]
        )
        == 0
    )
    assert (tmp_path / "contextwise_models.png").is_file()
    assert (
        cmd_eval(
            [
                "niah",
                "--model",
                str(trained_run),
                "--lengths",
                "256,512",
                "--depths",
                "0,100",
                "--samples",
                "1",
                "--scoring",
                "likelihood",
            ]
        )
        == 0
    )  # default haystack, default output
    doc = json.loads((trained_run / "eval" / "niah.json").read_text())
    assert doc["results"]["heatmap"]["cols_length"] == [256, 512]
    assert len(doc["results"]["samples"]) == 4 * 5  # 4 cells, each haystack asked with the 5 needle values
    assert (trained_run / "eval" / "niah.png").is_file()


def test_cli_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        cmd_eval(["niah", "--help"])
    text = capsys.readouterr().out
    for flag in ("--model", "--data", "--out", "--dtype", "--lengths", "--depths", "--answers", "--scoring"):
        assert flag in text
    with pytest.raises(SystemExit):
        cmd_eval(["nonsense", "--model", "x"])


def test_plot_is_an_option_of_contextwise_only_and_needs_several_models(tmp_path, capsys):
    """--plot (the combined plot of several models' contextwise curves) showed in every evaluation's
    --help; it is contextwise's option alone, and one model's --plot is one line, not ignored."""
    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.train.checkpoint import write_untrained_run
    from tests.eval.conftest import tiny_gpt

    for name in ("ppl", "niah", "kv", "vartrack", "contextwise"):
        with pytest.raises(SystemExit):
            cmd_eval([name, "--help"])
        text = capsys.readouterr().out
        assert ("--plot" in text) == (name == "contextwise"), name
    assert "contextwise only, with several --model" in " ".join(text.split())
    with pytest.raises(SystemExit):
        cmd_eval(["ppl", "--model", "x", "--plot", "p.png"])
    assert "unrecognized arguments: --plot p.png" in capsys.readouterr().err
    run = write_untrained_run(tmp_path / "run", tiny_gpt(0, context=32), ByteTokenizer(), note="test")
    with pytest.raises(
        UserError, match=r"^--plot is the combined plot of several models' contextwise curves"
    ):
        cmd_eval(["contextwise", "--model", str(run), "--plot", str(tmp_path / "p.png")])


def test_ppl_context_option_and_its_old_name_window(hf_folder, stores, tmp_path, capsys):
    common = [
        "--model",
        str(hf_folder),
        "--data",
        str(stores[0].path),
        "--max-docs",
        "1",
        "--max-tokens",
        "300",
    ]
    assert cmd_eval(["ppl", *common, "--out", str(tmp_path / "new"), "--context", "64"]) == 0
    assert cmd_eval(["ppl", *common, "--out", str(tmp_path / "old"), "--window", "64"]) == 0
    assert "config key 'window' is read as 'context'" in capsys.readouterr().err
    new, old = (json.loads((tmp_path / d / "ppl.json").read_text()) for d in ("new", "old"))
    assert new["results"]["context"] == old["results"]["context"] == 64
    assert new["results"]["summary"] == old["results"]["summary"]
    assert new["options"]["context"] == 64 and "window" not in new["options"]


def test_a_checkpoint_from_before_the_context_rename_loads(trained_run, tmp_path):
    """Checkpoints written before GPTConfig.block_size became GPTConfig.context say block_size."""
    import shutil

    import torch

    from contextlab.inference import read_checkpoint

    old = tmp_path / "old_run"
    shutil.copytree(trained_run, old)
    (ckpt,) = (old / "checkpoints").iterdir()
    state = json.loads((ckpt / "state.json").read_text())
    state["model_config"]["block_size"] = state["model_config"].pop("context")
    (ckpt / "state.json").write_text(json.dumps(state))
    model = read_checkpoint(old).build()
    new = read_checkpoint(trained_run).build()
    assert model.config == new.config and model.config.context == 64
    idx = torch.randint(0, 257, (1, 20))
    with torch.no_grad():
        assert torch.equal(model(idx).logits, new(idx).logits)
    assert load_model(old).info.context == 64


def test_a_corrupt_checkpoint_is_one_line_for_eval_and_export(trained_run, stores, tmp_path, capsys):
    import shutil

    from contextlab.cli import main as cli

    bad = tmp_path / "bad_run"
    shutil.copytree(trained_run, bad)
    (ckpt,) = (bad / "checkpoints").iterdir()
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated by a kill or a full disk
    data = str(stores[1].path)
    assert cli(["eval", "ppl", "--model", str(bad), "--data", data, "--out", str(tmp_path / "e")]) == 2
    assert cli(["export", str(bad), "--out", str(tmp_path / "hf")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(
        "cannot be read (SafetensorError" in line and "--step" in line for line in lines
    )
