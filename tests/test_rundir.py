"""The run-directory layout: checkpoints, metrics, eval results, kinds of folders, the run's tokenizer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from contextlab import rundir
from contextlab.errors import UserError


def checkpoint(run, step: int, *, complete: bool = True):
    d = rundir.step_dir(run, step)
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"")
    if complete:
        (d / "state.json").write_text(json.dumps({"step": step}))
    return d


def saved_tokenizer(folder, hash_: str, extra: str = "x"):
    folder.mkdir(parents=True)
    (folder / "tokenizer_spec.json").write_text(json.dumps({"kind": "bpe", "hash": hash_}))
    (folder / "tokenizer.json").write_text(extra)
    return folder


def test_checkpoints_are_named_listed_and_resolved(tmp_path):
    run = tmp_path / "run"
    assert rundir.step_dir(run, 42) == run / "checkpoints" / "step_000042"
    assert rundir.list_checkpoints(run) == [] and rundir.latest_checkpoint(run) is None
    c5, c1234567 = checkpoint(run, 5), checkpoint(run, 1234567)
    checkpoint(run, 9, complete=False)  # no state.json: half written, never listed
    (run / "checkpoints" / "step_12").mkdir()  # not the naming scheme
    assert rundir.list_checkpoints(run) == [(5, c5), (1234567, c1234567)]  # numeric, not text, order
    assert rundir.latest_checkpoint(run) == c1234567
    assert rundir.resolve_checkpoint(run) == c1234567 and rundir.resolve_checkpoint(run, 5) == c5
    assert rundir.resolve_checkpoint(c5) == c5 and rundir.read_checkpoint_state(c5) == {"step": 5}
    with pytest.raises(UserError, match="no checkpoint at step 7; available: 5, 1234567"):
        rundir.resolve_checkpoint(run, 7)
    with pytest.raises(UserError, match="not found"):
        rundir.resolve_checkpoint(tmp_path / "nope")
    with pytest.raises(UserError, match="has no checkpoints"):
        rundir.resolve_checkpoint(tmp_path)


def test_reading_the_newest_checkpoint_of_a_run_in_training_says_so_once(tmp_path, capsys):
    """A run whose lock names a live process here is being trained: its newest checkpoint is not its
    last (an export or evaluation of it would surprise); a killed writer's lock says nothing."""
    import os

    from contextlab.io import exclusive_lock

    run = tmp_path / "run"
    checkpoint(run, 20)
    with exclusive_lock(run / rundir.LOCK, "run directory"):  # this process trains it
        assert rundir.resolve_checkpoint(run) == rundir.step_dir(run, 20)
        rundir.resolve_checkpoint(run)  # said once
        assert rundir.resolve_checkpoint(run, 20) == rundir.step_dir(run, 20)  # --step: nothing to say
    err = capsys.readouterr().err
    assert err.count("note:") == 1, err
    assert f"{run} is still training (pid {os.getpid()} on " in err and "checkpoint step_000020" in err
    other = tmp_path / "killed"
    checkpoint(other, 4)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    import socket

    (other / rundir.LOCK).write_text(f"pid {int(dead.stdout)} on {socket.gethostname()} (train)")
    rundir.resolve_checkpoint(other)
    assert capsys.readouterr().err == ""


def test_kinds_of_folder_and_the_run_of_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    ckpt = checkpoint(run, 3)
    (run / "config.toml").write_text("[train]\nseq_len = 8\n")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert rundir.is_checkpoint(ckpt) and not rundir.is_checkpoint(run) and not rundir.is_checkpoint(hf)
    assert rundir.is_run(run) and not rundir.is_run(hf) and not rundir.is_run(tmp_path / "nope")
    assert rundir.is_hf_folder(hf) and not rundir.is_hf_folder(run) and not rundir.is_hf_folder(ckpt)
    assert rundir.run_of(ckpt) == run and rundir.run_of(run) == run and rundir.run_of(hf) == hf
    assert rundir.eval_dir(ckpt) == run / "eval" and rundir.eval_dir(hf) == hf / "eval"
    assert rundir.read_config(run) == {"train": {"seq_len": 8}} and rundir.read_config(hf) == {}
    (run / "config.toml").write_text("[train\n")
    with pytest.raises(UserError, match="not valid TOML"):
        rundir.read_config(run)


def test_metrics_and_eval_results_are_read_back(tmp_path):
    run = tmp_path / "runs" / "a"
    assert rundir.read_metrics(run) == [] and rundir.summarize([]) == {} and rundir.read_evals(run) == {}
    run.mkdir(parents=True)
    rows = [{"step": 1, "loss": 3.0, "tokens": 8}, {"step": 2, "loss": 2.5, "val_loss": 2.7, "tokens": 16}]
    rows.append({"step": 3, "loss": 2.0, "val_loss": 2.9, "tokens": 24})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    assert rundir.read_metrics(run) == rows
    assert rundir.summarize(rows) == {
        "steps": 3,
        "tokens": 24,
        "train_loss": 2.0,
        "val_loss": 2.9,
        "best_val_loss": 2.7,
        "best_step": 2,
    }
    (run / "eval").mkdir()
    (run / "eval" / "niah.json").write_text(json.dumps({"results": {"summary": {"acc": 1.0}}}))
    (run / "eval" / "broken.json").write_text("{")
    (run / "eval" / "list.json").write_text("[1]")
    assert rundir.read_evals(run) == {"niah": {"results": {"summary": {"acc": 1.0}}}}
    assert rundir.read_eval(run, "niah")["results"]["summary"]["acc"] == 1.0
    assert rundir.read_eval(run, "broken") is None and rundir.read_eval(run, "kv") is None
    assert rundir.find_runs(tmp_path) == [run]


def test_a_run_keeps_a_copy_of_its_tokenizer(tmp_path):
    run = tmp_path / "run"
    store_tok = saved_tokenizer(tmp_path / "store" / "tokenizer", "h1")
    assert rundir.save_tokenizer(run, store_tok, {"hash": "h1"}) == run / "tokenizer"
    assert (run / "tokenizer" / "tokenizer.json").read_text() == "x"
    (store_tok / "tokenizer.json").write_text("changed")  # same hash: the run's copy is kept as it is
    rundir.save_tokenizer(run, store_tok, {"hash": "h1"})
    assert (run / "tokenizer" / "tokenizer.json").read_text() == "x"
    other = saved_tokenizer(tmp_path / "other", "h2", "y")  # a different tokenizer replaces it whole
    rundir.save_tokenizer(run, other, {"hash": "h2"})
    assert (run / "tokenizer" / "tokenizer.json").read_text() == "y"
    assert sorted(p.name for p in run.iterdir()) == ["tokenizer"]  # no temporary folder left
    assert rundir.save_tokenizer(tmp_path / "r2", tmp_path / "missing", {"hash": "h3"}) is None


def test_launch_dir_is_read_back_from_the_relative_out_dir(tmp_path):
    run = tmp_path / "proj" / "out" / "runs" / "tiny"
    run.mkdir(parents=True)
    assert rundir.launch_dir(run, {"train": {"out_dir": "out/runs/tiny"}}) == (tmp_path / "proj").resolve()
    assert rundir.launch_dir(run, {"train": {"out_dir": "./tiny"}}) == run.parent.resolve()
    assert rundir.launch_dir(run, {"train": {"out_dir": "out/runs/other"}}) is None  # renamed run
    assert rundir.launch_dir(run, {"train": {"out_dir": str(run)}}) is None  # absolute: nothing to tell
    assert rundir.launch_dir(run, {"train": {"out_dir": "../x/tiny"}}) is None
    assert rundir.launch_dir(run, {}) is None


def old_run(tmp_path, store_rel: str = "stores/shakes"):
    """A run written before runs carried their tokenizer: only the store's path, relative to /proj."""
    proj = tmp_path / "proj"
    saved_tokenizer(proj / store_rel / "tokenizer", "h1")
    run = proj / "out" / "runs" / "tiny"
    ckpt = checkpoint(run, 4)
    toml = f'[train]\nout_dir = "out/runs/tiny"\n[data]\nstore = "{store_rel}"\n'
    (run / "config.toml").write_text(toml)
    (ckpt / "config.toml").write_text(toml)
    return proj, run, ckpt


def test_an_old_run_finds_its_store_tokenizer_from_any_directory(tmp_path, monkeypatch):
    proj, run, ckpt = old_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    found = rundir.find_tokenizer_dir(ckpt, {"hash": "h1"})
    assert found is not None and found.resolve() == (proj / "stores" / "shakes" / "tokenizer").resolve()
    assert rundir.find_tokenizer_dir(ckpt, {"hash": "other"}) is None  # the hash decides
    rundir.save_tokenizer(run, found, {"hash": "h1"})  # once the run has its own copy, that comes first
    assert rundir.find_tokenizer_dir(ckpt, {"hash": "h1"}) == run / "tokenizer"


def test_training_stores_reads_packed_and_mixture_stores(tmp_path):
    packed = tmp_path / "packed"
    packed.mkdir()
    (packed / "meta.json").write_text(json.dumps({"store": {"path": "stores/b"}}))
    config = {"data": {"store": "stores/a", "mixture": [{"packed": "packed"}, {"packed": "gone"}]}}
    assert rundir.training_stores(config, tmp_path) == [tmp_path / "stores/a", tmp_path / "stores/b"]
    assert rundir.training_stores({}) == []


def test_rundir_is_a_bottom_layer_module():
    code = (
        "import sys, contextlab.rundir; print(sorted(m for m in sys.modules if m.startswith('contextlab.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == [
        "contextlab.errors",
        "contextlab.io",
        "contextlab.rundir",
    ]  # not contextlab.outputs: it knows the run's layout, so it stands above it


def test_a_torn_last_metrics_line_is_skipped_and_other_damage_named(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5, "val_loss": 2.7}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (run / "metrics.jsonl").write_text(text + '{"step": 3, "lo')  # a kill inside the third write
    assert rundir.read_metrics(run) == rows and rundir.summarize(rundir.read_metrics(run))["steps"] == 2
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\nnot json\n' + text)
    with pytest.raises(UserError, match=r"metrics.jsonl line 2 is not a metrics row"):
        rundir.read_metrics(run)


def test_only_a_run_or_an_empty_folder_is_a_run_to_write(tmp_path):
    rundir.check_run_dir(tmp_path / "new")
    sweep_run = tmp_path / "sweep_run"
    sweep_run.mkdir()
    for name in rundir.BEFORE_TRAIN:  # a sweep writes its files before the run's train starts
        (sweep_run / name).write_text("")
    rundir.check_run_dir(sweep_run)
    run = tmp_path / "run"
    checkpoint(run, 3)
    rundir.check_run_dir(run)
    refused = {
        "store": ("meta.json", "token store or packed store"),
        "hf": ("config.json", "model folder"),
        "other": ("notes.txt", "non-empty folder without a run"),
        "toml": ("config.toml", "non-empty folder without a run"),  # a config.toml with no [train]
    }
    for name, (file, kind) in refused.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / file).write_text("{}" if file.endswith(".json") else "x = 1\n")
        with pytest.raises(UserError, match=f"{kind}.*, not a contextlab run"):
            rundir.check_run_dir(tmp_path / name)
    with pytest.raises(UserError, match="is a checkpoint, not a contextlab run"):
        rundir.check_run_dir(run / "checkpoints" / "step_000003")


def test_step_best_reads_the_checkpoint_of_the_best_validation_loss(tmp_path, capsys):
    """An early-stopped run keeps its best checkpoint beside the newest (where it stopped, the loss risen):
    a sweep scored the newest (a user's row: best_val_loss 5.784 at step 80 beside a contextwise of step
    140's model, 0.63 nats worse). ``--step best`` reads the best; reading the newest says which is best."""
    import argparse

    run = tmp_path / "run"
    _, c4, c6 = (checkpoint(run, s) for s in (2, 4, 6))
    rows = [{"step": s, "loss": 1.0, "val_loss": v} for s, v in ((2, 5.9), (4, 5.78), (6, 6.4))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert rundir.resolve_checkpoint(run, "best") == c4
    assert rundir.resolve_checkpoint(run) == c6
    assert capsys.readouterr().err == (
        f"note: {run}'s best validation loss (5.7800) was at step 4, before its newest checkpoint "
        "step_000006, which this reads; --step best reads the best\n"
    )
    rundir.resolve_checkpoint(run)
    assert capsys.readouterr().err == ""  # once
    assert rundir.parse_step("best") == "best" and rundir.parse_step("12") == 12
    with pytest.raises(argparse.ArgumentTypeError, match="'last' is no step: give a step number"):
        rundir.parse_step("last")
    with pytest.raises(UserError, match="give the run folder, not"):
        rundir.resolve_checkpoint(c4, "best")
    import shutil

    shutil.rmtree(c4)
    with pytest.raises(UserError, match=r"was at step 4, whose checkpoint was not kept .* available: 2, 6"):
        rundir.resolve_checkpoint(run, "best")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 6, "loss": 1.0}) + "\n")
    with pytest.raises(UserError, match="logged no validation loss, so it has no best step"):
        rundir.resolve_checkpoint(run, "best")
