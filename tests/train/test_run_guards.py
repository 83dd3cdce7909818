"""What a run refuses or survives: stale metrics, non-finite weights, a full disk, a second writer,
an out_dir that is not a run, corrupt checkpoint files, a torn metrics line, bad budgets and shapes."""

from __future__ import annotations

import errno
import json
import math

import pytest
import torch

from contextlab import rundir
from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.train import checkpoint as ckpt
from contextlab.train.config import RunConfig
from contextlab.train.metrics import MetricsWriter
from contextlab.train.trainer import Trainer, train
from tests.conftest import shakespeare

SMALL = {
    "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
    "optim": {"lr": 3e-3, "warmup_steps": 2},
    "train": {
        "context": 16,
        "tokens_per_step": 64,
        "log_every": 1,
        "val_every": 4,
        "val_tokens": 256,
        "ckpt_every": 4,
        "keep_last": 3,
        "threads": 1,
        "peak_flops": 1e12,
        "progress": False,
        "dtype": "fp32",
    },
    "data": {"val_split": "tail", "val_fraction": 0.1},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    src = tmp_path_factory.mktemp("src") / "shakes.txt"
    src.write_text(shakespeare(40_000))
    return ingest(src, tmp_path_factory.mktemp("store") / "s", IngestConfig(), progress=False).store


def config(store, out_dir, **train) -> RunConfig:
    data = json.loads(json.dumps(SMALL))
    data["data"]["store"] = str(store.path)
    data["train"].update(out_dir=str(out_dir), **train)
    return from_dict(RunConfig, data)


def steps(run) -> list[int]:
    return [r["step"] for r in rundir.read_metrics(run)]


def kept(run) -> list[int]:
    return [s for s, _ in ckpt.list_checkpoints(run)]


# ---------------------------------------------------------------------------- 1. stale metrics


def test_a_start_without_a_checkpoint_begins_a_clean_metrics_file(store, tmp_path):
    run = tmp_path / "run"
    train(config(store, run, max_steps=3))
    for _, d in ckpt.list_checkpoints(run):  # as if killed before its first checkpoint
        __import__("shutil").rmtree(d)
    train(config(store, run, max_steps=6))
    assert steps(run) == [1, 2, 3, 4, 5, 6]


def test_a_start_over_from_step_0_is_noted_with_why(store, tmp_path, capsys):
    run = tmp_path / "run"
    train(config(store, run, max_steps=3))
    __import__("shutil").rmtree(run / "checkpoints")  # as if killed before its first checkpoint
    capsys.readouterr()
    train(config(store, run, max_steps=3))
    out = capsys.readouterr().out
    said = (  # its end, step 3, writes a checkpoint: it was removed
        f"note: {run} has metrics up to step 3 but no finished checkpoint (a checkpoint write was cut "
        "off by a kill, or its checkpoints were removed); it starts over from step 0"
    )
    assert said in out
    train(config(store, run, max_steps=3))  # a finished run: nothing to note
    assert "starts over" not in capsys.readouterr().out


def test_a_start_over_names_the_first_checkpoint_a_short_run_writes_at_its_end(store, tmp_path, capsys):
    """max_steps 300 with ckpt_every 1000: the note said the first checkpoint was "due at step 1000"."""
    run = tmp_path / "run"
    train(config(store, run, max_steps=6, ckpt_every=100))
    __import__("shutil").rmtree(run / "checkpoints")  # as if killed at step 3, before its only checkpoint
    metrics = run / "metrics.jsonl"
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:3]))
    capsys.readouterr()
    train(config(store, run, max_steps=6, ckpt_every=100))
    assert "(it stopped before its first checkpoint, due at step 6, its end); it starts over" in (
        capsys.readouterr().out
    )


def test_ctrl_c_during_a_checkpoint_write_keeps_that_checkpoint(
    store, tmp_path, monkeypatch, capsys, request
):
    """SIGINT (and SIGTERM) arriving while a checkpoint is written take effect once it is in place: the
    run stops, and the rerun resumes from it."""
    import os
    import signal

    run = tmp_path / "run"
    real = ckpt._write_files

    def interrupted(tmp, *args):
        if tmp.name == ".step_000004.tmp":
            os.kill(os.getpid(), signal.SIGINT)  # delivered while the files are being written
        real(tmp, *args)

    monkeypatch.setattr(ckpt, "_write_files", interrupted)
    # as in a terminal: a suite started in the background (nohup, `&`) inherits SIGINT ignored
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, inherited))
    with pytest.raises(KeyboardInterrupt):
        train(config(store, run, max_steps=8))
    assert kept(run) == [4] and not list((run / "checkpoints").glob(".*.tmp"))
    assert "SIGINT received: finishing checkpoint step_000004 first, then stopping" in capsys.readouterr().err
    monkeypatch.setattr(ckpt, "_write_files", real)
    train(config(store, run, max_steps=8))
    assert f"resuming {run} from step_000004" in capsys.readouterr().out

    def terminated(signum, frame):
        raise SystemExit(143)

    previous = signal.signal(signal.SIGTERM, terminated)  # as the command line installs it
    try:
        with pytest.raises(SystemExit), ckpt.signals_deferred("writing"):
            os.kill(os.getpid(), signal.SIGTERM)
            written = True
        assert written and signal.getsignal(signal.SIGTERM) is terminated
    finally:
        signal.signal(signal.SIGTERM, previous)
    capsys.readouterr()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's SIGINT: ignored
    try:
        with ckpt.signals_deferred("writing"):
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert "SIGINT received" not in capsys.readouterr().err  # it stops nothing, so nothing says it does
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_changed_config_is_refused_where_only_metrics_exist(store, tmp_path):
    run = tmp_path / "run"
    train(config(store, run, max_steps=3, ckpt_every=0))
    __import__("shutil").rmtree(run / "checkpoints")
    before = (run / "metrics.jsonl").read_bytes()
    with pytest.raises(UserError, match="different config"):
        train(config(store, run, max_steps=6, seed=1))
    assert (run / "metrics.jsonl").read_bytes() == before


# ---------------------------------------------------------------------------- 2. non-finite weights


def _poison_after(monkeypatch, at_step: int) -> None:
    """The update of step ``at_step`` makes a weight NaN (its loss, computed before, stays finite)."""
    real = Trainer.train_step

    def step(self):
        out = real(self)
        if self.state["step"] + 1 == at_step:
            with torch.no_grad():
                next(self.model.parameters()).view(-1)[0] = math.nan
        return out

    monkeypatch.setattr(Trainer, "train_step", step)


@pytest.mark.parametrize("max_steps", [6, 12])  # the poisoned step 8 is a checkpoint step / ... the last
def test_non_finite_weights_are_never_saved(store, tmp_path, monkeypatch, max_steps):
    run = tmp_path / "run"
    at = 8 if max_steps == 12 else 6
    _poison_after(monkeypatch, at)
    monkeypatch.setattr(Trainer, "validate", lambda self: 4.0)  # the weights check alone (not validation)
    with pytest.raises(UserError, match=f"non-finite.*step {at}.*last good checkpoint is .*step_000004"):
        train(config(store, run, max_steps=max_steps))
    assert kept(run) == [4]
    monkeypatch.undo()
    assert train(config(store, run, max_steps=max_steps)).steps == max_steps  # resumes from step 4


def test_the_divergence_message_suggests_fp32_only_to_a_bf16_run(store, tmp_path, monkeypatch):
    monkeypatch.setattr(Trainer, "train_step", lambda self: {"loss": math.nan})
    with pytest.raises(UserError) as fp32:
        train(config(store, tmp_path / "a", max_steps=3))
    assert "loss became nan at step 1" in str(fp32.value) and "dtype=fp32" not in str(fp32.value)
    with pytest.raises(UserError, match="train.dtype=fp32"):
        train(config(store, tmp_path / "b", max_steps=3, dtype="bf16"))


def test_a_non_finite_validation_loss_is_never_logged(store, tmp_path, monkeypatch):
    monkeypatch.setattr(Trainer, "validate", lambda self: math.inf)
    with pytest.raises(UserError, match="validation loss became inf at step 4; the run has no checkpoint"):
        train(config(store, tmp_path / "run", max_steps=6))
    assert steps(tmp_path / "run") == [1, 2, 3]  # rows without a validation are logged as before


def test_an_eval_result_never_holds_nan(tmp_path):
    import numpy as np

    from contextlab.eval.results import write_result

    results = {"summary": {"loss": math.nan, "ok": 1.0}, "curve": np.array([1.0, np.inf])}
    path = write_result(tmp_path, "ppl", results=results, options={}, model={}, data={}, seconds=1.0)
    doc = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in a result file"))
    assert doc["results"]["summary"] == {"loss": None, "ok": 1.0} and doc["results"]["curve"] == [1.0, None]
    assert doc["non_finite"]["fields"] == ["results.summary.loss", "results.curve[1]"]
    assert "null" in doc["non_finite"]["note"]


# ---------------------------------------------------------------------------- 3. a full disk


def test_a_full_disk_inside_torch_save_is_one_line(store, tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(config(store, run, max_steps=4))

    def torch_save_full(*a, **k):  # what torch.save raises when the disk is full
        raise RuntimeError(
            "[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/0: "
            "file write failed"
        )

    monkeypatch.setattr(ckpt.torch, "save", torch_save_full)
    with pytest.raises(
        UserError, match="could not write checkpoint.*step_000008.*step_000004 is intact"
    ) as e:
        train(config(store, run, max_steps=8))
    assert "\n" not in str(e.value)
    assert kept(run) == [4] and not list((run / "checkpoints").glob(".*"))


def test_torchs_zip_writer_cut_off_by_a_full_disk_is_named_as_one(store, tmp_path, monkeypatch):
    """On an 8 MB tmpfs the line read "(RuntimeError: [enforce fail at inline_container.cc:672] .
    unexpected pos 857344 vs 857236)", naming no full disk."""
    run = tmp_path / "run"
    train(config(store, run, max_steps=4))

    def torch_save_cut(*a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 857344 vs 857236")

    monkeypatch.setattr(ckpt.torch, "save", torch_save_cut)
    with pytest.raises(UserError, match=r"unexpected pos\), almost always a full disk\); the previous"):
        train(config(store, run, max_steps=8))


def fail_logging_at(monkeypatch, step: int, exc: BaseException) -> None:
    """Make the metrics write of ``step`` raise ``exc`` (a full disk, Ctrl-C) inside a training run."""
    real = MetricsWriter.write

    def write(self, row, bar):
        if row["step"] == step:
            raise exc
        real(self, row, bar)

    monkeypatch.setattr(MetricsWriter, "write", write)


def test_a_full_disk_while_logging_names_the_last_checkpoint(store, tmp_path, monkeypatch):
    run = tmp_path / "run"
    fail_logging_at(monkeypatch, 6, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(UserError, match="disk is full.*resumes from the last good checkpoint.*step_000004"):
        train(config(store, run, max_steps=8))


def test_a_disk_made_read_only_under_a_run_says_where_the_rerun_goes_on(store, tmp_path, monkeypatch):
    """A run folder remounted read-only mid-run ended on "runs/rob/.lock is on a read-only file system;
    write the output to a folder on a disk you can write": nothing of the checkpoint it resumes from."""
    run = tmp_path / "run"
    fail_logging_at(monkeypatch, 6, OSError(errno.EROFS, "Read-only file system", str(run / "metrics.jsonl")))
    with pytest.raises(UserError) as e:
        train(config(store, run, max_steps=8))
    assert str(e.value) == (
        f"{run / 'metrics.jsonl'} is on a read-only file system; make it writable again and run the same "
        f"command again: it resumes from the last good checkpoint, {run / 'checkpoints' / 'step_000004'}"
    )


def test_a_full_disk_before_any_checkpoint_says_the_rerun_starts_over(store, tmp_path, monkeypatch):
    """Not "to resume": with no checkpoint written the same command starts over from step 0 (it
    used to promise a resume it could not give), for the disk filling in a log write and in the
    first checkpoint write alike."""
    run = tmp_path / "run"
    with monkeypatch.context() as m:
        fail_logging_at(m, 2, OSError(errno.ENOSPC, "No space left on device"))
        with pytest.raises(UserError, match="disk is full") as e:
            train(config(store, run, max_steps=8))
    assert "no checkpoint yet, so it starts over from step 0" in str(e.value)
    assert "resume" not in str(e.value)

    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "save_file", disk_full)
    with pytest.raises(UserError, match="could not write checkpoint") as e:
        train(config(store, run, max_steps=4))
    assert "no earlier checkpoint exists" in str(e.value) and "starts over from step 0" in str(e.value)
    assert "resume" not in str(e.value)


@pytest.mark.parametrize("at", [2, 6])
def test_ctrl_c_says_whether_the_rerun_resumes_or_starts_over(store, tmp_path, monkeypatch, capsys, at):
    from contextlab.cli import _run

    run = tmp_path / "run"
    fail_logging_at(monkeypatch, at, KeyboardInterrupt())
    assert _run(lambda argv: train(config(store, run, max_steps=8)), "train", []) == 130
    err = capsys.readouterr().err.strip()
    if at == 2:  # before the first checkpoint (step 4)
        assert err == (
            "contextlab train: interrupted; run the same command again: the run has no checkpoint yet, "
            "so it starts over from step 0"
        )
    else:
        assert err.startswith("contextlab train: interrupted; run the same command again: it resumes from ")
        assert err.endswith("step_000004")


# ---------------------------------------------------------------------------- 4. two writers


def test_a_second_writer_on_one_run_is_refused(store, tmp_path, monkeypatch):
    run = tmp_path / "run"
    real, seen = Trainer._step, []

    def step(self, budget):
        if self.state["step"] == 2 and not seen:
            seen.append(1)
            with pytest.raises(UserError, match=f"run directory {run} is being written by pid"):
                train(config(store, run, max_steps=5))
        return real(self, budget)

    monkeypatch.setattr(Trainer, "_step", step)
    train(config(store, run, max_steps=5))
    assert seen and steps(run) == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------------------- 5. out_dir not a run


def test_an_out_dir_that_is_not_a_run_is_refused(store, tmp_path):
    before = {p.name: p.read_bytes() for p in store.path.iterdir() if p.is_file()}
    with pytest.raises(UserError, match="token store.*not a contextlab run.*train.out_dir"):
        train(config(store, store.path, max_steps=2))
    assert {p.name: p.read_bytes() for p in store.path.iterdir() if p.is_file()} == before
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    with pytest.raises(UserError, match="non-empty folder without a run, not a contextlab run"):
        train(config(store, other, max_steps=2))
    assert sorted(p.name for p in other.iterdir()) == ["todo.txt"]
    (tmp_path / "empty").mkdir()
    assert train(config(store, tmp_path / "empty", max_steps=1)).steps == 1


# ---------------------------------------------------------------------------- 6. corrupt files


@pytest.mark.parametrize("damage", ["truncated weights", "garbage optimizer", "flipped weights"])
def test_a_corrupt_checkpoint_is_one_line_naming_an_earlier_good_one(store, tmp_path, damage):
    run = tmp_path / "run"
    train(config(store, run, max_steps=8))
    newest = rundir.step_dir(run, 8)
    if damage == "truncated weights":
        f = newest / "model.safetensors"
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "flipped weights":  # a user's flipped bits loaded without an error, as other numbers
        f = newest / "model.safetensors"
        data = bytearray(f.read_bytes())
        data[-200:-100] = bytes(b ^ 0x40 for b in data[-200:-100])
        f.write_bytes(bytes(data))
    else:
        (newest / "optimizer.pt").write_bytes(b"\x80\x02garbage" * 50)
    with pytest.raises(UserError, match="step_000008 cannot be read.*step_000004") as e:
        train(config(store, run, max_steps=12))
    assert "\n" not in str(e.value)
    if damage == "flipped weights":
        assert "model.safetensors is not the file this checkpoint wrote" in str(e.value)
        from contextlab.cli import main

        with pytest.raises(UserError, match="model.safetensors is not the file this checkpoint wrote"):
            from contextlab.inference.checkpoint import read_checkpoint

            read_checkpoint(run)
        assert main(["generate", "--model", str(run), "--prompt", "a", "--max-new-tokens", "1"]) == 2


def test_weights_whose_state_json_is_gone_are_neither_replaced_nor_called_missing(store, tmp_path):
    """A user's checkpoint with its state.json deleted: train started over and replaced the folder, its
    intact weights with it, when it reached the step; eval said "no checkpoints; train first"."""
    from contextlab.inference.checkpoint import read_checkpoint

    run = tmp_path / "run"
    train(config(store, run, max_steps=4, ckpt_every=4))
    ckpt = rundir.step_dir(run, 4)
    (ckpt / "state.json").unlink()
    weights = (ckpt / "model.safetensors").read_bytes()
    with pytest.raises(UserError, match="step_000004 holds weights but no state.json, so the run cannot"):
        train(config(store, run, max_steps=4, ckpt_every=4))
    assert (ckpt / "model.safetensors").read_bytes() == weights
    with pytest.raises(
        UserError, match="step_000004 holds weights but no state.json, so it is no checkpoint"
    ):
        read_checkpoint(run)


def test_a_torn_metrics_line_is_dropped_on_resume_and_readers_skip_it(store, tmp_path):
    run = tmp_path / "run"
    train(config(store, run, max_steps=8))
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "loss": 3.1, "l')  # a kill inside the write of row 9
    assert [r["step"] for r in rundir.read_metrics(run)] == list(range(1, 9))
    assert rundir.summarize(rundir.read_metrics(run))["steps"] == 8
    from contextlab.report.html import run_section

    assert run_section(run)[1]["steps"] == 8  # the report reads it as well
    train(config(store, run, max_steps=10))
    assert steps(run) == list(range(1, 11))


# ---------------------------------------------------------------------------- 7. budgets and shapes


@pytest.mark.parametrize(
    "override, key",
    [
        ({"max_steps": -5}, "train.max_steps"),
        ({"max_steps": 3, "max_tokens": -64}, "train.max_tokens"),
        ({"max_minutes": -1.0}, "train.max_minutes"),
        ({"max_steps": 3, "max_tokens": 64}, "exactly one budget"),
        ({"max_steps": 3, "context": -128}, "train.context"),
        ({"max_steps": 3, "tokens_per_step": 0}, "train.tokens_per_step"),
        ({"max_steps": 3, "log_every": 0}, "train.log_every"),
        ({"max_steps": 3, "ckpt_every": -1}, "train.ckpt_every"),
        ({"max_steps": 3, "micro_batch_rows": -2}, "train.micro_batch_rows"),
    ],
)
def test_budgets_and_shapes_are_checked_before_a_run_exists(store, tmp_path, override, key):
    run = tmp_path / "run"
    with pytest.raises(UserError, match=key.replace(".", r"\.")) as e:
        train(config(store, run, **override))
    assert "\n" not in str(e.value) and not run.exists()


@pytest.mark.parametrize(
    "section, key, value",
    [("model", "n_layer", -1), ("model", "n_embd", -32), ("model", "n_head", 0), ("model", "dropout", 2.0)]
    + [("optim", "lr", -1.0), ("optim", "warmup_steps", -5), ("optim", "grad_clip", -1.0)],
)
def test_model_shapes_and_optimizer_values_are_checked_up_front(store, tmp_path, section, key, value):
    cfg = config(store, tmp_path / "run", max_steps=3)
    setattr(getattr(cfg, section), key, value)
    with pytest.raises(UserError, match=f"{section}.{key} is {value}; it must be"):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_a_run_says_how_often_its_budget_repeats_the_training_rows(tmp_path, capsys):
    """4,000 bytes at context 16 and 4 rows a step: 150 steps read the rows about 2.4 times, and the
    start says so; 8 steps read a fraction of them and say nothing."""
    (tmp_path / "small.txt").write_text(shakespeare(4_000))
    small = ingest(tmp_path / "small.txt", tmp_path / "st", IngestConfig(), progress=False).store
    train(config(small, tmp_path / "short", max_steps=8))
    assert "training rows" not in capsys.readouterr().out
    t = Trainer(config(small, tmp_path / "long", max_steps=150, val_every=0, ckpt_every=0))
    n_rows, rows = t.loader.n_rows, t.rows
    t.run()
    out = capsys.readouterr().out
    per_epoch = n_rows // rows * rows
    passes = 150 * rows / per_epoch
    assert passes >= 2 and f"note: 150 steps of {rows} rows read the {per_epoch:,} training rows " in out
    assert f"{passes:,.1f} times; repeated text is partly memorised" in out


def test_a_validation_of_few_documents_is_said_to_be_few(tmp_path, capsys):
    """2% of 10 documents is one: the start says the validation loss is one document's; with the
    held-out share raised to five documents it says nothing. The count is the documents the rows read."""
    from contextlab.data.training import build_training_data

    for i in range(10):
        (tmp_path / "src").mkdir(exist_ok=True)
        (tmp_path / "src" / f"d{i}.txt").write_text(shakespeare(3_000)[i * 200 :])
    store = ingest(tmp_path / "src", tmp_path / "st", IngestConfig(), progress=False).store
    cfg = config(store, tmp_path / "one", max_steps=1)
    cfg.data.val_split = "documents"  # SMALL holds out tails: 16 rows read the tails of 2 documents
    train(cfg)
    out = capsys.readouterr().out
    assert "note: the validation loss is read on 16 rows of 16 tokens from 1 document, so it says " in out
    cfg = config(store, tmp_path / "five", max_steps=1, val_tokens=16_384)  # more than the 5 hold
    cfg.data.val_split, cfg.data.val_fraction = "documents", 0.5
    data = build_training_data(cfg.data, context=16, rows=4, seed=0, val_tokens=4096)
    assert data.val_documents == 3 and data.val_rows_total == len(data.val_rows) == 256  # the rows read 3
    data = build_training_data(cfg.data, context=16, rows=4, seed=0, val_tokens=16_384)
    assert data.val_documents == 5 and data.val_rows_total == len(data.val_rows) < 1024  # all 5, whole
    train(cfg)
    assert "validation loss is read on" not in capsys.readouterr().out


def test_sigterm_during_training_says_where_the_rerun_goes_on(store, tmp_path, monkeypatch, capsys):
    """SIGTERM (a scheduler's stop) ended a run in silence where Ctrl-C said which checkpoint the rerun
    resumes from; both say it now."""
    import contextlab.cli as cli

    run = tmp_path / "run"
    real = ckpt._write_files

    def stopped(tmp, *args):
        if tmp.name == ".step_000008.tmp":
            raise SystemExit(143)  # what the command line's SIGTERM handler raises
        real(tmp, *args)

    monkeypatch.setattr(ckpt, "_write_files", stopped)
    monkeypatch.setattr(cli, "_TERMINATING", [15])
    with pytest.raises(SystemExit):
        cli._run(lambda argv: train(config(store, run, max_steps=12)), "train", [])
    err = capsys.readouterr().err
    assert "contextlab train: terminated (SIGTERM); run the same command again: " in err
    assert "step_000004" in err and kept(run) == [4]


def test_a_resume_whose_validation_rows_differ_from_the_recorded_ones_says_so(store, tmp_path, capsys):
    """Another version may build a run's validation rows otherwise (the order of a pack's held-out
    windows changed): the validation curve would jump at the resume with nothing said."""
    import json

    run = tmp_path / "run"
    train(config(store, run, max_steps=4))
    state_file = run / "checkpoints" / "step_000004" / "state.json"
    state = json.loads(state_file.read_text())
    state["data"]["validation_rows"] = "0" * 64  # as if recorded by a version that built other rows
    state_file.write_text(json.dumps(state))
    capsys.readouterr()
    train(config(store, run, max_steps=8))
    out = capsys.readouterr().out
    assert "validation rows differ from those its checkpoints recorded (00000000 then," in out
    assert "its validation losses from step_000004 on are of other rows" in out
    train(config(store, run, max_steps=12))  # recorded again at step 8: the same rows, nothing said
    assert "validation rows differ" not in capsys.readouterr().out


# ---------------------------------------------------------------------------- a stop signal mid-run


def signal_in_step(monkeypatch, step: int, *signums: int) -> None:
    """Make training send itself ``signums`` as step ``step`` (counted from 1) starts to compute."""
    import os

    real = Trainer.train_step

    def train_step(self):
        if self.state["step"] == step - 1:
            for signum in signums:
                os.kill(os.getpid(), signum)
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_stop_signal_mid_run_checkpoints_that_step_and_the_rerun_redoes_nothing(
    store, tmp_path, monkeypatch, capsys, request, signame
):
    """Ctrl-C or SIGTERM (a scheduler's preemption) between checkpoints ended the run where it stood,
    so the rerun went back to the newest periodic checkpoint and redid up to ckpt_every steps: the
    step in flight is finished and checkpointed, the command ends as the signal ends it, and the rerun
    goes on from that step with the numbers of an uninterrupted run."""
    import signal

    import contextlab.cli as cli

    whole = tmp_path / "whole"
    train(config(store, whole, max_steps=12, ckpt_every=100))
    signum = getattr(signal, signame)
    handler = signal.default_int_handler if signum == signal.SIGINT else cli._terminated
    inherited = signal.signal(signum, handler)  # as in a terminal, and as the command line installs it
    request.addfinalizer(lambda: signal.signal(signum, inherited))
    request.addfinalizer(cli._TERMINATING.clear)
    real_step = Trainer.train_step
    signal_in_step(monkeypatch, 7, signum)
    run = tmp_path / "run"
    capsys.readouterr()
    expected = KeyboardInterrupt if signum == signal.SIGINT else SystemExit
    with pytest.raises(expected) as stopped:
        train(config(store, run, max_steps=12, ckpt_every=100))
    if expected is SystemExit:
        assert stopped.value.code == 143 and [signum] == cli._TERMINATING
    assert kept(run) == [7] and steps(run)[-1] == 7  # step 7 finished and kept; nothing after it ran
    err = capsys.readouterr().err
    assert f"{signame} received: finishing this step and saving a checkpoint of it, then stopping" in err
    assert signal.getsignal(signum) is handler  # the handler of before is back
    monkeypatch.setattr(Trainer, "train_step", real_step)
    train(config(store, run, max_steps=12, ckpt_every=100))
    assert f"resuming {run} from step_000007" in capsys.readouterr().out
    numbers = ("step", "loss", "lr", "tokens", "val_loss")  # not the timings
    rows = [[r.get(k) for k in numbers] for r in rundir.read_metrics(run)]
    assert rows == [[r.get(k) for k in numbers] for r in rundir.read_metrics(whole)]  # bitwise
    from safetensors.torch import load_file

    a = load_file(whole / "checkpoints" / "step_000012" / rundir.WEIGHTS)
    b = load_file(run / "checkpoints" / "step_000012" / rundir.WEIGHTS)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_second_ctrl_c_stops_at_once(store, tmp_path, monkeypatch, capsys, request):
    """Ctrl-C twice: the second one does not wait for the step's checkpoint."""
    import signal

    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, inherited))
    signal_in_step(monkeypatch, 6, signal.SIGINT, signal.SIGINT)  # the second raises inside step 6
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train(config(store, run, max_steps=12, ckpt_every=4))
    assert kept(run) == [4] and steps(run)[-1] == 5  # step 6 was cut; the newest checkpoint is kept
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_ignored_is_left_ignored(store, tmp_path, monkeypatch, request):
    """A background job's SIGINT is ignored: training neither stops nor announces a stop for it."""
    import signal

    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, inherited))
    signal_in_step(monkeypatch, 3, signal.SIGINT)
    train(config(store, tmp_path / "run", max_steps=6, ckpt_every=100))
    assert kept(tmp_path / "run") == [6] and signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_a_resume_on_another_number_of_processes_is_said(store, tmp_path, capsys):
    """A 2-process run resumed on 1 process said only "resuming ... from step_000004"."""
    run = tmp_path / "run"
    train(config(store, run, max_steps=4))
    state_file = run / "checkpoints" / "step_000004" / "state.json"
    state = json.loads(state_file.read_text())
    state["world_size"] = 2  # as a torchrun of 2 processes records it
    state_file.write_text(json.dumps(state))
    capsys.readouterr()
    train(config(store, run, max_steps=8))
    assert (
        f"note: {run} trained on 2 process(es) up to step_000004 and goes on on 1: the same batches and "
        "schedule"
    ) in capsys.readouterr().out
