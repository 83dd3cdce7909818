"""``--step`` names a checkpoint of a run; given with a checkpoint folder of another step, or with an
export (one set of weights), it was ignored in silence (an evaluation of step 40 recorded as asked
for step 60). Both are one line now."""

from __future__ import annotations

import pytest

from contextlab.cli import main
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.errors import UserError
from contextlab.inference.open import open_model
from contextlab.rundir import resolve_checkpoint
from contextlab.train.checkpoint import write_untrained_run
from tests.eval.conftest import tiny_gpt


def test_a_step_other_than_the_checkpoint_given_is_refused(tmp_path):
    ckpt = write_untrained_run(tmp_path / "run", tiny_gpt(0, context=32), ByteTokenizer(), note="test")
    assert resolve_checkpoint(ckpt) == resolve_checkpoint(ckpt, 0) == ckpt
    with pytest.raises(UserError, match=r"is the checkpoint of step 0, and --step 60 asks for another; give"):
        resolve_checkpoint(ckpt, 60)
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    open_model(tmp_path / "hf")
    with pytest.raises(UserError, match=r"is an export of step 0, which holds one set of weights; --step 60"):
        open_model(tmp_path / "hf", step=60)


def test_train_given_a_run_folder_and_an_empty_stop_string_are_one_line(tmp_path, capsys):
    """`contextlab train RUN` ended in IsADirectoryError; `generate --stop ""` in an IndexError (or,
    with --prompts, every completion empty)."""
    ckpt = write_untrained_run(tmp_path / "run", tiny_gpt(0, context=32), ByteTokenizer(), note="test")
    assert main(["train", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'run'} is a run folder, and contextlab train takes a config file (TOML)" in err
    assert "resume a run with `contextlab train RUN/config.toml`" in err
    assert main(["train", str(ckpt)]) == 2
    assert "is a checkpoint, and contextlab train takes a config file" in capsys.readouterr().err
    argv = ["generate", "--model", str(tmp_path / "run"), "--prompt", "ab", "--stop", ""]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "an empty --stop TEXT would stop every continuation at once" in capsys.readouterr().err


def test_sampling_flags_at_temperature_zero_are_said_to_change_nothing(tmp_path, capsys):
    write_untrained_run(tmp_path / "run", tiny_gpt(0, context=32), ByteTokenizer(), note="test")
    argv = ["generate", "--model", str(tmp_path / "run"), "--prompt", "ab", "--max-new-tokens", "2"]
    assert main([*argv, "--top-k", "5", "--seed", "1"]) == 0
    assert (
        "note: --top-k, --seed shape sampling, and --temperature 0 decodes greedily"
        in capsys.readouterr().err
    )
    assert main([*argv, "--temperature", "0.8", "--top-k", "5", "--seed", "1"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_exporting_an_export_says_what_it_is(tmp_path, capsys):
    write_untrained_run(tmp_path / "run", tiny_gpt(0, context=32), ByteTokenizer(), note="test")
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    assert main(["export", str(tmp_path / "hf"), "--out", str(tmp_path / "hf2")]) == 2
    assert (
        "is already a Hugging Face model folder (an export, or a model of its own)" in capsys.readouterr().err
    )
