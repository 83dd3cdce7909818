"""``--no-progress`` on the long commands: pack-stats, export and analyze (eval's: test_fitted_defaults).

Bars show on a terminal only (tqdm's ``disable=None``), so under pytest none draws either way; the
tests record what each bar was told: ``disable=True`` with ``--no-progress``, ``None`` without."""

from __future__ import annotations

import pytest
import tqdm.auto

from contextlab.cli import main


@pytest.fixture
def bars(monkeypatch):
    """(desc, disable, total) of every tqdm.auto bar made while the test runs."""
    made = []

    class Recorded(tqdm.auto.tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append((k.get("desc"), k.get("disable"), self.total))

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorded)
    yield made
    from contextlab.eval import progress

    progress.set_enabled(True)  # a command run with --no-progress switched the evaluations' bars off


def test_pack_stats_shows_a_bar_over_the_zipf_fits_unless_told_not_to(tmp_path, bars, capsys):
    from contextlab.data.packing import PackConfig, pack
    from tests.data.packing.helpers import make_store, mixed_corpus

    store = make_store(tmp_path, mixed_corpus(16))
    packed = pack(store, tmp_path / "p", PackConfig(method="ep", context=63), progress=False).packed
    full = int((packed.sequence_lengths() == packed.row_len).sum())
    bars.clear()  # the ingest's and the pack's
    assert main(["data", "pack-stats", str(packed.path), "--json", "--no-plot", "--no-progress"]) == 0
    assert bars == [("pack-stats: Zipf fits", True, full)]
    bars.clear()
    assert main(["data", "pack-stats", str(packed.path), "--json", "--no-plot"]) == 0
    assert bars == [("pack-stats: Zipf fits", None, full)]
    assert '"n_sequences"' in capsys.readouterr().out


def test_export_shows_its_steps_unless_told_not_to(tmp_path, bars, capsys):
    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.models.gpt import GPT, GPTConfig
    from contextlab.train.checkpoint import write_untrained_run

    model = GPT(GPTConfig(vocab_size=257, n_layer=1, n_head=2, n_embd=32, context=32, mlp="swiglu"))
    run = write_untrained_run(tmp_path / "run", model, ByteTokenizer(), note="test")
    out = tmp_path / "hf"
    assert main(["export", str(run), "--out", str(out), "--no-progress"]) == 0
    assert [b for b in bars if str(b[0]).startswith("export")] == [("export: read the checkpoint", True, 2)]
    bars.clear()
    assert main(["export", str(run), "--out", str(out), "--overwrite"]) == 0
    assert [b for b in bars if str(b[0]).startswith("export")] == [("export: read the checkpoint", None, 2)]
    assert capsys.readouterr().out.splitlines()[-1] == f"exported to {out}"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()


@pytest.mark.parametrize("command", ["entropy", "attention"])
def test_analyze_takes_no_progress(command):
    from contextlab.cli.analyze import _attention_parser, _parser

    parser = _parser() if command == "entropy" else _attention_parser()
    args = parser.parse_args(["--model", "M", "--data", "S", "--no-progress"])
    assert args.no_progress is True
    assert parser.parse_args(["--model", "M", "--data", "S"]).no_progress is False


def test_generate_bar_shows_on_a_terminal_only_and_never_with_no_progress(tiny_runs, tmp_path, bars, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("ROMEO:\nJULIET:\nO\n")
    argv = ["generate", "--model", str(tiny_runs["a"]), "--prompts", str(prompts), "--max-new-tokens", "2"]
    assert main([*argv, "--batch-size", "2", "--no-progress"]) == 0
    assert [b[:2] for b in bars] == [("generate", True)]
    bars.clear()
    assert main([*argv, "--batch-size", "2"]) == 0
    assert [b[:2] for b in bars] == [("generate", None)]  # None: tqdm draws it only when stderr is a terminal
    assert len(capsys.readouterr().out.splitlines()) == 6


def test_transformers_loading_bar_is_off_in_logs_and_with_no_progress(tmp_path, monkeypatch):
    """transformers draws its 'Loading weights' bar into logs too, where its redraws fill the file; it is
    turned off when stderr is no terminal or --no-progress is given (eval passed its list of models
    where a list was expected and never turned it off), and left on for a terminal."""
    import io

    from transformers.utils import logging as hf_logging

    from contextlab.cli.runtime import quiet_transformers
    from tests.conftest import save_tiny_llama

    folder = save_tiny_llama(tmp_path / "llama", vocab=300, layers=1, chars=20_000)
    try:
        hf_logging.enable_progress_bar()
        monkeypatch.setattr("sys.stderr", io.StringIO())  # a log: no terminal
        quiet_transformers([str(folder)], asked=False)
        assert not hf_logging.is_progress_bar_enabled()
        hf_logging.enable_progress_bar()
        quiet_transformers([str(tmp_path / "not-a-model")], asked=True)  # no HF folder: left alone
        assert hf_logging.is_progress_bar_enabled()

        from contextlab.cli import runtime

        monkeypatch.setattr(runtime, "on_terminal", lambda: True)
        quiet_transformers([str(folder)], asked=False)
        assert hf_logging.is_progress_bar_enabled()
        quiet_transformers([str(folder)], asked=True)
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()
