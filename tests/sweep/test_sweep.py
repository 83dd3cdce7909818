"""Sweeps: grid expansion, validation up front, failures recorded, resume skips finished runs,
the compute-optimal analysis on known numbers."""

from __future__ import annotations

import csv
import json

import pytest

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.sweep import runner, spec
from contextlab.sweep.compute_optimal import analyze
from contextlab.sweep.results import status
from contextlab.sweep.runner import run_sweep
from contextlab.sweep.spec import load_sweep
from tests.conftest import shakespeare
from tests.sweep.conftest import TINY_MODEL_AND_DATA

SWEEP = (
    """
[sweep]
name = "tiny"
out_dir = "{out}"
parallel = 2
"""
    + TINY_MODEL_AND_DATA
    + """
[base.optim]
warmup_steps = 2

[base.train]
tokens_per_step = 256
max_steps = 3
val_tokens = 256
peak_flops = 1e12
dtype = "fp32"
log_every = 1

[grid]
"train.context" = [16, 32, {bad}]
"""
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    src = tmp_path_factory.mktemp("src") / "s.txt"
    src.write_text(shakespeare(20_000))
    return ingest(src, tmp_path_factory.mktemp("st") / "s", IngestConfig(), progress=False).store


def test_grid_is_validated_before_running(tmp_path, store):
    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad='"long"'))
    with pytest.raises(UserError, match="grid point context-long: config key 'train.context' must be int"):
        load_sweep(f)
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=64) + "\n[extra]\nx = 1\n")
    with pytest.raises(UserError, match="unknown table"):
        load_sweep(f)


def test_a_grid_over_the_old_name_train_seq_len_keeps_its_run_names(tmp_path, store):
    old = SWEEP.replace('"train.context"', '"train.seq_len"').replace(
        "[sweep]", "[sweep]\nevals = ['contextwise']\n"
    )
    old = old.replace(
        "parallel = 2", 'parallel = 2\neval_args = {{ contextwise = ["--length", "{{train.context}}"] }}'
    )
    f = tmp_path / "s.toml"
    f.write_text(old.format(out=tmp_path / "out", store=store.path, bad=64))
    _section, runs = load_sweep(f)
    assert [r.name for r in runs] == ["seq_len-16", "seq_len-32", "seq_len-64"]  # as the old sweep named them
    assert [r.params for r in runs] == [{"train.context": c} for c in (16, 32, 64)]
    assert spec.format_arg("{train.context}", runs[0]) == "16"


def test_run_names_keep_the_sign_of_negative_values():
    """-0.5 and 0.5 were both named "...-0.5" (the minus was stripped as a separator)."""
    assert [spec._fmt(v) for v in (-0.5, 0.5, -8, 1e-4, True, "a b/c")] == [
        "-0.5",
        "0.5",
        "-8",
        "0.0001",
        "True",
        "a-b-c",
    ]


def test_unknown_evaluations_and_impossible_values_are_refused_before_any_run(tmp_path, store):
    """Robustness II item 16: both passed --dry-run and then failed every run."""
    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=-8))
    with pytest.raises(UserError, match="grid point context--8: train.context is -8"):
        load_sweep(f)
    f.write_text(
        SWEEP.format(out=tmp_path / "out", store=store.path, bad=64).replace(
            "[sweep]", "[sweep]\nevals = ['nosuch']"
        )
    )
    with pytest.raises(
        UserError, match="unknown evaluation.s. nosuch in .sweep. evals/eval_args; choose from"
    ):
        load_sweep(f)
    assert not (tmp_path / "out").exists()


def test_a_sweep_with_a_failed_run_exits_non_zero_naming_it(tmp_path, store, capsys):
    from contextlab.cli import main

    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=48))  # context 48 fails at start
    capsys.readouterr()
    assert main(["sweep", str(f), "--only", "context-(16|48)", "--no-analysis"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "1 run(s) failed: context-48" in err[-1] and "run the same command again" in err[-1]
    assert main(["sweep", str(f), "--only", "context-16", "--no-analysis"]) == 0  # that slice is fine


def test_a_runs_notes_are_said_under_its_done_line_once_per_sweep(tmp_path, store, capsys):
    """A warm-up as long as the run was written into RUN/sweep.log only; the sweep says it under the
    run's line, and a later sweep of the same folder says only what its own commands printed."""
    from contextlab.cli import main

    f = tmp_path / "s.toml"
    f.write_text(
        SWEEP.format(out=tmp_path / "out", store=store.path, bad=64).replace(
            "warmup_steps = 2", "warmup_steps = 3"
        )
    )
    capsys.readouterr()
    assert main(["sweep", str(f), "--only", "context-16", "--no-analysis"]) == 0
    out = capsys.readouterr().out.splitlines()
    done = next(i for i, line in enumerate(out) if line.startswith("done   context-16"))
    notes = [line for line in out[done + 1 :] if line.startswith("  note: ")]
    assert out[done + 1] == notes[0]  # under the run's line
    assert any(n.startswith("  note: optim.warmup_steps = 3 is not below this run's 3 steps") for n in notes)
    log = (tmp_path / "out" / "runs" / "context-16" / "sweep.log").read_text()
    assert log.count("note: optim.warmup_steps = 3") == 1
    assert main(["sweep", str(f), "--only", "context-32", "--no-analysis"]) == 0
    out = capsys.readouterr().out
    assert out.count("note: optim.warmup_steps") == 1 and "context-16" not in out


def test_a_warm_up_as_long_as_the_runs_is_said_before_any_run_trains(tmp_path, store, capsys):
    from contextlab.cli import main

    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=64))
    assert spec.budget_notes(load_sweep(f)[1]) == []  # warm-up 2 of 3 steps
    f.write_text(
        SWEEP.format(out=tmp_path / "out", store=store.path, bad=64).replace(
            "warmup_steps = 2", "warmup_steps = 3"
        )
    )
    want = (
        "optim.warmup_steps is not below the step budget of 3 run(s): context-16 (3 steps), context-32 "
        "(3 steps), context-64 (3 steps); their learning rate rises the whole run and never decays (a "
        "warm-up of a tenth of the shortest is base.optim.warmup_steps = 1)"
    )
    assert spec.budget_notes(load_sweep(f)[1]) == [want]
    tokens = f.read_text().replace("max_steps = 3", "max_tokens = 2560")  # 10 steps of 256 tokens
    f.write_text(tokens)
    assert spec.budget_notes(load_sweep(f)[1]) == []
    f.write_text(tokens.replace("warmup_steps = 3", "warmup_steps = 10"))
    capsys.readouterr()
    assert main(["sweep", str(f), "--dry-run"]) == 0
    assert "note: optim.warmup_steps is not below the step budget of 3 run(s): context-16 (10 steps)" in (
        capsys.readouterr().out
    )
    assert not (tmp_path / "out" / "runs").exists()  # said before anything ran


def test_the_notes_said_are_those_of_this_sweeps_part_of_the_log(tmp_path):
    run = spec.Run("r", {}, {}, tmp_path)
    (tmp_path / "sweep.log").write_text("note: an old one\nstep 1\n")
    start = runner._log_size(run)
    with open(tmp_path / "sweep.log", "a") as fh:
        fh.write("GPT ...\nnote: a new one\nstep 2\nnote: a new one\n  note: indented, not a note line\n")
    assert runner._notes(run, start) == ["note: a new one"]
    assert runner._notes(run) == ["note: an old one", "note: a new one"]
    assert runner._notes(spec.Run("gone", {}, {}, tmp_path / "nothing")) == []


def test_a_second_sweep_into_one_folder_is_refused_naming_the_first(tmp_path, store):
    from contextlab.data.store import output_lock

    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=64))
    with (
        output_lock(tmp_path / "out", "test holder"),
        pytest.raises(UserError, match="is being written by pid"),
    ):
        run_sweep(f, progress=False)
    assert not (tmp_path / "out" / "runs").exists()


def test_a_run_whose_sweep_was_killed_is_listed_as_stopped(tmp_path, store, capsys):
    import socket
    import subprocess
    import sys

    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=64))
    _section, runs = load_sweep(f)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    runs[0].dir.mkdir(parents=True)
    record = {"status": "running", "pid": int(gone.stdout), "host": socket.gethostname()}
    (runs[0].dir / "sweep_status.json").write_text(json.dumps(record))
    assert status(runs[0])["status"] == "stopped"  # its sweep process is gone: not running
    record["pid"] = __import__("os").getpid()
    (runs[0].dir / "sweep_status.json").write_text(json.dumps(record))
    assert status(runs[0])["status"] == "running"


def test_the_report_says_stopped_for_a_run_whose_sweep_was_killed_while_results_csv_says_running(
    tmp_path, store
):
    """After `kill -9` of a sweep driver nothing records its runs stopped: results.csv kept "running"
    and the report showed it so until the sweep ran again."""
    import socket
    import subprocess
    import sys

    from contextlab.report.html import build_report
    from contextlab.sweep.results import write_results

    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=64))
    section, runs = load_sweep(f)
    runs[1].dir.mkdir(parents=True)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    alive = {"status": "running", "pid": __import__("os").getpid(), "host": socket.gethostname()}
    (runs[1].dir / "sweep_status.json").write_text(json.dumps(alive))
    write_results(section, runs)  # written while the run was running (another run had just ended)
    (runs[1].dir / "sweep_status.json").write_text(json.dumps({**alive, "pid": int(gone.stdout)}))
    page = build_report(section.out_dir).read_text()
    assert "stopped, not running: context-32 (results.csv says running, but the sweep that ran them" in page
    assert "<td>running</td>" not in page and "<td>stopped</td>" in page


def test_an_interrupted_sweep_records_its_runs_stopped_in_their_files(tmp_path, store, monkeypatch):
    """After Ctrl-C, every RUN/sweep_status.json still said "running" with the dead driver's pid and
    results.csv listed the runs pending; they say stopped now, with what each had on disk."""
    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=64))
    _section, runs = load_sweep(f)

    def start_then_interrupt(sweep, todo):
        sweep.start(todo[0])
        (todo[0].dir / "eval").mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_run_local", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(f, progress=False)
    record = json.loads((runs[0].dir / "sweep_status.json").read_text())
    assert record["status"] == "stopped" and record["error"] == "interrupted"
    assert record["trained_to_step"] is None and record["evaluated"] == []
    rows = {r["run"]: r["status"] for r in csv.DictReader(open(tmp_path / "out" / "results.csv"))}
    assert rows == {"context-16": "stopped", "context-32": "pending", "context-64": "pending"}


def test_sweep_runs_records_failure_and_resumes(tmp_path, store):
    f = tmp_path / "s.toml"
    # context 256 needs 257-token rows but tokens_per_step 256 is not a multiple: that run fails at start
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=48))
    _section, runs = load_sweep(f)
    assert [r.name for r in runs] == ["context-16", "context-32", "context-48"]
    results = run_sweep(f, progress=False)
    rows = {r["run"]: r for r in csv.DictReader(open(results))}
    assert rows["context-16"]["status"] == "done" and rows["context-32"]["status"] == "done"
    assert (
        rows["context-48"]["status"] == "failed"
        and "multiple of train.context" in rows["context-48"]["error"]
    )
    assert int(rows["context-16"]["steps"]) == 3 and float(rows["context-16"]["val_loss"]) > 0
    done_mtime = (runs[0].dir / "metrics.jsonl").stat().st_mtime
    run_sweep(f, progress=False)  # resume: finished runs are not run again, the failed one is retried
    assert (runs[0].dir / "metrics.jsonl").stat().st_mtime == done_mtime
    assert status(runs[2])["status"] == "failed"


def test_slices_of_a_grid_add_up_even_when_the_runs_travel_without_checkpoints(tmp_path, store):
    """--only runs a slice; results.csv always lists the whole grid (pending runs as pending), so slices run
    one after another (the GPU scripts: one per 10-minute command, on fresh machines that receive the
    finished runs without their checkpoints) end with every run in it, none trained twice."""
    import shutil

    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path, bad=64))
    _section, runs = load_sweep(f)
    results = run_sweep(f, only="context-(16|32)$", progress=False)
    rows = {r["run"]: r["status"] for r in csv.DictReader(open(results))}
    assert rows == {"context-16": "done", "context-32": "done", "context-64": "pending"}
    for run in runs[:2]:
        shutil.rmtree(run.dir / "checkpoints")
    trained = {r.name: (r.dir / "metrics.jsonl").read_text() for r in runs[:2]}
    mtimes = {r.name: (r.dir / "metrics.jsonl").stat().st_mtime_ns for r in runs[:2]}
    results = run_sweep(f, only="context-64", progress=False)
    rows = {r["run"]: r for r in csv.DictReader(open(results))}
    assert {k: r["status"] for k, r in rows.items()} == dict.fromkeys(
        ("context-16", "context-32", "context-64"), "done"
    )
    assert all(float(r["val_loss"]) > 0 for r in rows.values())
    for r in runs[:2]:  # not trained again
        assert (r.dir / "metrics.jsonl").stat().st_mtime_ns == mtimes[r.name]
        assert (r.dir / "metrics.jsonl").read_text() == trained[r.name]


def test_compute_optimal_on_known_numbers():
    rows = []
    losses = {
        (1e12, "s"): {64: 3.0, 128: 2.9, 256: 3.1},
        (1e12, "m"): {64: 3.2, 128: 3.0, 256: 3.3},
        (4e12, "s"): {64: 2.9, 128: 2.7, 256: 2.6},
        (4e12, "m"): {64: 2.8, 128: 2.5, 256: 2.4},
    }
    for (budget, size), curve in losses.items():
        for ctx, loss in curve.items():
            rows.append(
                {
                    "status": "done",
                    "train.context": str(ctx),
                    "model.size": size,
                    "train.max_flops": str(budget),
                    "val_loss": str(loss),
                }
            )
    rows.append(
        {
            "status": "failed",
            "train.context": "512",
            "model.size": "s",
            "train.max_flops": "1e12",
            "val_loss": "",
        }
    )
    with pytest.raises(UserError, match="will not rank training contexts by val_loss: it ranks them wrongly"):
        analyze(rows, window=1)  # no contextwise column: the fallback to val_loss must be asked for
    res = analyze(rows, window=1, rank_by_mean_loss=True)
    assert res["metric"] == "val_loss" and res["budget_key"] == "train.max_flops"
    assert res["warning"].startswith("warning: val_loss averages the loss over positions 1..")
    assert "ranks training contexts wrongly" in res["warning"]
    assert res["optimal"]["1000000000000.0"]["per_size"] == {"s": 128, "m": 128}
    assert res["optimal"]["4000000000000.0"]["best"] == {"size": "m", "context": 256, "loss": 2.4}
    assert res["optimal_context_smoothed"]["s"] == [[1e12, 128], [4e12, 256]]
    json.dumps(res)  # serialisable


def test_results_rows_carry_each_evaluations_headline(tmp_path):
    from contextlab.sweep.results import run_summary

    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "contextwise.json").write_text(
        json.dumps(
            {
                "format": "contextlab-eval-result",
                "seconds": 1.5,
                "model": {"n_params": 10},
                "results": {
                    "summary": {
                        "best_context_loss": 3.25,
                        "falls_with_position": True,
                        "last_full_bucket": [32, 63],
                    },
                    "length": 64,
                },
            }
        )
    )
    row = run_summary(tmp_path)
    assert row == {"contextwise.best_context_loss": 3.25, "contextwise.seconds": 1.5}
    assert (
        analyze(
            [
                {
                    "status": "done",
                    "train.context": "64",
                    "model.size": "s",
                    **{k: str(v) for k, v in row.items()},
                }
            ]
        )["metric"]
        == "contextwise.best_context_loss"
    )


def test_data_size_axis_and_best_val_loss(tmp_path):
    from contextlab.sweep.results import run_summary

    # best_val_loss of a run is its minimum validation loss (early stopping ends past it)
    (tmp_path / "metrics.jsonl").write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"step": 10, "loss": 4.0, "val_loss": 3.5},
                {"step": 20, "loss": 3.0, "val_loss": 3.1},
                {"step": 30, "loss": 2.0, "val_loss": 3.3},
            ]
        )
    )
    summary = run_summary(tmp_path)
    assert (summary["val_loss"], summary["best_val_loss"], summary["best_step"]) == (3.3, 3.1, 20)
    # one curve per training-set size; the optimum moves to longer contexts with more data
    rows = []
    for size, curve in {1e5: {32: 5.0, 64: 4.9, 128: 5.2}, 4e5: {32: 4.6, 64: 4.4, 128: 4.3}}.items():
        for ctx, loss in curve.items():
            rows.append(
                {
                    "status": "done",
                    "train.context": str(ctx),
                    "model.size": "m",
                    "train.max_steps": "900",
                    "data.train_tokens": str(size),
                    "val_loss": "9",
                    "best_val_loss": str(loss),
                }
            )
    # a second seed of one cell: replicates are averaged, their range kept
    rows.append({**rows[-2], "train.seed": "1", "best_val_loss": "4.3"})  # 4e5, context 64: (4.4 + 4.3) / 2
    with pytest.raises(UserError, match="sweep.analysis_rank_by_mean_loss = true"):
        analyze(rows, budget_key="data.train_tokens", metric="best_val_loss", window=1)
    res = analyze(
        rows, budget_key="data.train_tokens", metric="best_val_loss", window=1, rank_by_mean_loss=True
    )
    assert res["curves"]["400000.0"]["m"][64] == pytest.approx(4.35) and res["replicates"] == 2
    assert res["replicate_spread"] == {"400000.0": {"m": {64: pytest.approx(0.1)}}}
    assert {b: o["best"]["context"] for b, o in res["optimal"].items()} == {"100000.0": 64, "400000.0": 128}
    assert res["optimal_context_smoothed"]["m"] == [[1e5, 64], [4e5, 128]] and res["window"] == 1
    with pytest.raises(UserError, match="analysis axis 'data.size'"):
        analyze(rows, budget_key="data.size", metric="best_val_loss")
    with pytest.raises(UserError, match="analysis_metric"):
        analyze(rows, budget_key="data.train_tokens", metric="contextwise.best_context_loss")


def test_compute_optimal_writes_the_analysis_and_three_plots(tmp_path):
    from contextlab.sweep.compute_optimal import compute_optimal

    # a results.csv from before the rename of train.seq_len to train.context
    header = ["run", "status", "data.train_tokens", "train.seq_len", "model.size", "best_val_loss"]
    lines = [",".join(header)]
    for size, curve in {25000: {16: 6.0, 64: 6.1}, 100000: {16: 5.5, 64: 5.4}}.items():
        lines += [f"r{size}_{c},done,{size},{c},m,{v}" for c, v in curve.items()]
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    res = compute_optimal(
        tmp_path, budget_key="data.train_tokens", metric="best_val_loss", window=1, rank_by_mean_loss=True
    )
    assert [p.rsplit("/", 1)[-1] for p in res["plots"]] == [
        "u_curves.png",
        "optimal_context.png",
        "gap_curves.png",
    ]
    for p in res["plots"]:
        assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "compute_optimal.json").read_text())
    assert {b: o["best"]["context"] for b, o in saved["optimal"].items()} == {"25000.0": 16, "100000.0": 64}


@pytest.mark.parametrize(
    "raw, smoothed",
    [
        ([32, 64], [32, 64]),  # two budgets: each window holds both; ties went to the smaller (32, 32)
        ([32, 64, 128], [32, 64, 128]),  # a growing optimum is kept (it read 32, 32, 64)
        ([32, 256, 32, 64, 64], [32, 32, 32, 64, 64]),  # a majority in the window still wins
    ],
)
def test_a_smoothed_optimum_keeps_the_budgets_own_where_its_window_has_no_single_mode(raw, smoothed):
    from contextlab.sweep.compute_optimal import _smoothed_optimum

    budgets = [float(10 ** (12 + i)) for i in range(len(raw))]
    optimal = {b: {"per_size": {"s": c}} for b, c in zip(budgets, raw)}
    assert [c for _, c in _smoothed_optimum(optimal, budgets, "s", 3)] == smoothed


def test_the_optimum_figure_shows_each_budgets_own_optimum_where_smoothing_moved_it(monkeypatch, tmp_path):
    """The figure drew only the smoothed optimum, so a budget whose own optimum the mode overruled was not
    on it while the printed line named that budget's own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contextlab.sweep import compute_optimal as co

    figs = []
    monkeypatch.setattr(co, "save_png", lambda fig, path: figs.append(fig) or path)
    budgets = [1e12, 1e13, 1e14, 1e15, 1e16]
    raw = [32, 256, 32, 64, 64]
    optimal = {str(b): {"per_size": {"s": c}} for b, c in zip(budgets, raw)}
    smoothed = co._smoothed_optimum({b: optimal[str(b)] for b in budgets}, budgets, "s", 3)
    result = {
        "optimal_context_smoothed": {"s": [[b, c] for b, c in smoothed]},
        "optimal": optimal,
        "window": 3,
        "size_key": "model.size",
        "budget_key": "train.max_flops",
    }
    co._plot_optimal_context(plt, result, tmp_path / "o.png")
    lines = {ln.get_label(): ln for ln in figs[0].axes[0].get_lines()}
    own = lines["s: each budget's own"]
    assert list(own.get_ydata()) == raw and list(lines["s"].get_ydata()) == [32, 32, 32, 64, 64]
    assert figs[0].axes[0].get_ylabel() == "optimal training context (mode of 3 budgets)"


def test_the_optimum_figure_of_two_budgets_and_one_model_says_so(monkeypatch, tmp_path):
    """A sweep of 2 budgets and no model axis: the y label read "mode of 3 budgets" and the U-curves'
    legend "model.size: model"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contextlab.sweep import compute_optimal as co

    figs = []
    monkeypatch.setattr(co, "save_png", lambda fig, path: figs.append(fig) or path)
    optimal = {str(b): {"per_size": {"model": 32}} for b in (2e11, 6e11)}
    result = {
        "optimal_context_smoothed": {"model": [[2e11, 32], [6e11, 32]]},
        "optimal": optimal,
        "window": 3,
        "size_key": "model.size",
        "budget_key": "train.max_flops",
        "curves": {b: {"model": {"32": 6.4, "64": 6.47}} for b in optimal},
        "metric": "contextwise.best_context_loss",
    }
    co._plot_optimal_context(plt, result, tmp_path / "o.png")
    assert figs[0].axes[0].get_ylabel() == "optimal training context (mode of 2 budgets)"
    assert [t.get_text() for t in figs[0].axes[0].get_legend().get_texts()] == ["the sweep's model"]
    co._plot_u_curves(plt, result, list(optimal), tmp_path / "u.png")
    legend = figs[1].axes[-1].get_legend()
    assert legend.get_title().get_text() == "" and legend.get_texts()[0].get_text() == "the sweep's model"
