"""The optimal-context sweep: the MLP learns parity, cells resume, a changed config is refused."""

from __future__ import annotations

import json

import pytest

from contextlab.data import synthetic as syn
from contextlab.errors import UserError
from contextlab.sweep import optimal_context as oc


def _cfg(tmp_path, **kw) -> oc.OptimalContextConfig:
    base = dict(
        n_bits=12,
        n_tasks=4,
        min_far_bit=3,
        data_sizes=[512, 2048],
        contexts=[2, 12],
        val_samples=1000,
        hidden=64,
        lr=3e-3,
        batch_size=64,
        eval_every=20,
        patience=6,
        max_steps=400,
        out_dir=str(tmp_path / "sweep"),
    )
    return oc.OptimalContextConfig(**{**base, **kw})


def test_mlp_reaches_the_bayes_risk_when_it_sees_every_bit(tmp_path):
    cfg = _cfg(tmp_path)
    tasks = syn.make_tasks(cfg.parity())
    import numpy as np

    train = syn.sample(cfg.parity(), tasks, 2048, np.random.default_rng(0))
    val = syn.sample(cfg.parity(), tasks, 1000, np.random.default_rng(1))
    full = oc.fit_cell(cfg, train, val, 12, seed=0)
    assert full["best_val_loss"] < 0.1  # Bayes risk 0 with all 12 bits: the XORs are learned
    blind = oc.fit_cell(cfg, train, val, 2, seed=0)
    assert blind["best_val_loss"] > syn.bayes_risk(tasks, 2) - 0.05  # no model beats the Bayes risk


def test_sweep_writes_results_and_resumes(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, max_steps=40, contexts=[2, 7, 12])
    res = oc.run_optimal_context(cfg, progress=False)
    assert set(res["cells"]) == {f"{D}/{l}" for D in (512, 2048) for l in (2, 7, 12)}
    assert set(res["optimal_context"]) == {"512", "2048"}
    tasks = syn.make_tasks(cfg.parity())
    assert res["bayes_risk"]["2"] == pytest.approx(syn.bayes_risk(tasks, 2))
    for D, best in res["optimal_context"].items():
        row = [res["cells"][f"{D}/{l}"]["best_val_loss"] for l in cfg.contexts]
        assert best["val_loss"] == min(row)
    saved = json.loads((tmp_path / "sweep" / "results.json").read_text())
    assert saved["cells"] == json.loads(json.dumps(res["cells"]))
    assert set(res["feature_fits"]) == {"512", "2048"}
    cell = res["cells"]["2048/12"]["features"]
    assert set(cell["entropy"]) == {
        "10",
        "20",
        "50",
        "64",
    }  # hidden=64: all = 64 components and cell["dimension"]["0.002"] >= 1
    assert -1 <= res["feature_fits"]["2048"]["entropy@10"]["r"] <= 1
    monkeypatch.setattr(oc, "fit_cell", lambda *a, **k: pytest.fail("a finished cell was trained again"))
    assert oc.run_optimal_context(cfg, progress=False)["cells"] == res["cells"]
    with pytest.raises(UserError, match="different config"):
        oc.run_optimal_context(_cfg(tmp_path, max_steps=40, contexts=[2, 7, 12], lr=1e-3), progress=False)
    # a grid that grows keeps the cells fitted (a user's added data size was refused outright): only the
    # new context is fitted
    fitted = []
    monkeypatch.undo()
    real = oc.fit_cell
    monkeypatch.setattr(
        oc, "fit_cell", lambda cfg, train, val, l, seed: fitted.append(l) or real(cfg, train, val, l, seed)
    )
    grown = oc.run_optimal_context(_cfg(tmp_path, max_steps=40, contexts=[2, 5, 7, 12]), progress=False)
    assert fitted == [5, 5] and all(grown["cells"][k] == v for k, v in res["cells"].items())
    assert oc.optimal_context_png(res, tmp_path / "oc.png").stat().st_size > 10_000
    with pytest.raises(ValueError, match="contexts must lie"):
        _cfg(tmp_path, contexts=[13])


def test_a_cell_shorter_than_its_validation_period_is_validated_at_its_end_and_nothing_learned_is_said(
    tmp_path,
):
    """max_steps below eval_every wrote a best loss of Infinity and picked an 'optimum' among them; now the
    last step is validated, and a size whose every cell stays above log 2 (the loss of answering 1/2)
    is said to have learned nothing, its optimum no measurement."""
    cfg = _cfg(tmp_path, max_steps=15, eval_every=20, data_sizes=[512], contexts=[2, 7, 12], lr=1e-7)
    res = oc.run_optimal_context(cfg, progress=False)
    text = (tmp_path / "sweep" / "results.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    cells = res["cells"].values()
    assert all(c["best_step"] == 15 and 0 < c["best_val_loss"] < 5 for c in cells)
    assert all(c["best_val_loss_stderr"] > 0 for c in cells)
    best = res["optimal_context"]["512"]
    assert best["learned"] is False  # 15 steps at lr 1e-7: every cell is its initial guess, log 2 or above
    assert any(t.startswith("D=512: no context's best validation loss") for t in res["text"])
    tasks = syn.make_tasks(cfg.parity())
    assert set(res["bayes_on_validation"]) == {"2", "7", "12"} and res["bayes_on_validation"]["12"] == 0.0
    assert abs(res["bayes_on_validation"]["2"] - syn.bayes_risk(tasks, 2)) < 0.05  # 1,000 samples of it
    from contextlab.cli.optimal_context import format_table

    assert "(" + str(best["context"]) + ": nothing learned)" in format_table(res)


def test_an_interrupted_sweep_trains_only_the_cells_left(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, max_steps=40, measure_features=False)
    real, trained = oc.fit_cell, []

    def dies_on_the_third(cfg, train, val, l, seed):
        if len(trained) == 2:
            raise KeyboardInterrupt
        trained.append((len(train.task), l))
        return real(cfg, train, val, l, seed)

    monkeypatch.setattr(oc, "fit_cell", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        oc.run_optimal_context(cfg, progress=False)
    assert trained == [(512, 2), (512, 12)]
    partial = json.loads((tmp_path / "sweep" / "results.json").read_text())
    assert set(partial["cells"]) == {"512/2", "512/12"} and set(partial["optimal_context"]) == {"512"}
    assert partial["complete"] is False and partial["cells_done"] == "2 of 4"  # a killed study's file says so
    from contextlab.cli.optimal_context import format_table

    table = format_table(partial)  # its table too, the cells not run yet shown as '.'
    assert table.endswith("partial: 2 of 4 cells; run the same command again to finish the others")
    row = next(line for line in table.splitlines() if line.split()[:1] == ["2048"])
    assert row.split()[1:3] == [".", "."]
    monkeypatch.setattr(
        oc,
        "fit_cell",
        lambda cfg, train, val, l, seed: (
            trained.append((len(train.task), l)) or real(cfg, train, val, l, seed)
        ),
    )
    res = oc.run_optimal_context(cfg, progress=False)
    assert trained == [(512, 2), (512, 12), (2048, 2), (2048, 12)]  # the killed cell again, then the last
    assert res["complete"] is True and res["cells_done"] == "4 of 4"
    whole = oc.run_optimal_context(
        _cfg(tmp_path / "whole", max_steps=40, measure_features=False), progress=False
    )
    strip = lambda cells: {k: {n: v for n, v in c.items() if n != "seconds"} for k, c in cells.items()}
    assert strip(res["cells"]) == strip(whole["cells"])  # resumed = uninterrupted


def test_cells_of_a_sweep_run_before_cells_were_steps_are_kept(tmp_path, monkeypatch):
    import shutil

    cfg = _cfg(tmp_path, max_steps=40, measure_features=False)
    res = oc.run_optimal_context(cfg, progress=False)
    (tmp_path / "sweep" / "steps.json").unlink()  # what an older version left: results.json only
    shutil.rmtree(tmp_path / "sweep" / "cells")
    monkeypatch.setattr(oc, "fit_cell", lambda *a, **k: pytest.fail("a finished cell was trained again"))
    assert oc.run_optimal_context(cfg, progress=False)["cells"] == res["cells"]
    assert (tmp_path / "sweep" / "cells" / "2048_12.json").exists()


def test_the_command_documents_every_option_and_runs_the_sweep(tmp_path, capsys):
    import dataclasses

    from contextlab.cli import main

    with pytest.raises(SystemExit):
        main(["optimal-context", "--help"])
    text = capsys.readouterr().out
    for f in dataclasses.fields(oc.OptimalContextConfig):
        flag = "--" + f.name.replace("_", "-")
        assert flag in text, flag
    recipe = tmp_path / "oc.toml"
    recipe.write_text(
        "n_bits = 12\nn_tasks = 4\nmin_far_bit = 3\ndata_sizes = [512]\ncontexts = [2, 12]\n"
        "val_samples = 500\nhidden = 32\nbatch_size = 64\neval_every = 20\nmax_steps = 40\n"
        f'out_dir = "{tmp_path / "out"}"\n'
    )
    assert (
        main(
            [
                "optimal-context",
                str(recipe),
                "--set",
                "patience=2",
                "--measure-features",
                "false",
                "--no-progress",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "rows = training samples D" in printed and "optimal_context.png" in printed
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["config"]["patience"] == 2 and res["config"]["measure_features"] is False
    assert (tmp_path / "out" / "optimal_context.png").stat().st_size > 10_000
    assert main(["optimal-context", str(recipe), "--lr", "1e-2", "--no-progress"]) == 2
    assert (
        "different config (lr 0.003 -> 0.01; patience 2 -> 5); use another out_dir" in capsys.readouterr().err
    )


def test_a_cell_that_never_improves_is_recorded_without_a_loss_and_the_sweep_goes_on(tmp_path):
    """A cell whose validations never improve on the start (max_steps 0, a loss that diverged) ended the
    sweep in an UnboundLocalError; it is now a cell without a loss, left out of the optimum and said. A
    cell an earlier version wrote with Infinity is fitted again."""
    import math

    cfg = _cfg(tmp_path, max_steps=0, data_sizes=[512], contexts=[2, 7, 12], measure_features=False)
    res = oc.run_optimal_context(cfg, progress=False)
    assert all(c["best_val_loss"] is None for c in res["cells"].values())
    assert "512" not in res["optimal_context"] and res["text"][0].startswith(
        "3 cell(s) have no validation loss"
    )
    from contextlab.cli.optimal_context import format_table

    assert "(none: no cell has a loss)" in format_table(res)
    cfg = _cfg(tmp_path, max_steps=20, data_sizes=[512], contexts=[2, 7, 12], measure_features=False,
               out_dir=str(tmp_path / "s2"))  # fmt: skip
    oc.run_optimal_context(cfg, progress=False)
    cell = tmp_path / "s2" / "cells" / "512_7.json"
    old = json.loads(cell.read_text())
    cell.write_text(json.dumps({**old, "best_val_loss": math.inf}))  # as the former version wrote it
    again = oc.run_optimal_context(cfg, progress=False)
    assert math.isfinite(again["cells"]["512/7"]["best_val_loss"])


def test_an_mlp_narrower_than_50_measures_the_entropies_its_components_allow(tmp_path):
    """`--hidden 32` stopped the sweep: "needs at least 50 PCA components ...; lower --n-components or
    raise --samples", two options optimal-context does not have; entropy@50 is left out there."""
    res = oc.run_optimal_context(_cfg(tmp_path, hidden=32, max_steps=20, data_sizes=[512]), progress=False)
    assert set(res["cells"]["512/12"]["features"]["entropy"]) == {"10", "20", "32"}


def test_an_out_dir_that_is_a_file_is_one_line_and_kept(tmp_path):
    notes = tmp_path / "mynotes.txt"
    notes.write_text("mine")
    with pytest.raises(UserError) as err:
        oc.run_optimal_context(_cfg(tmp_path, out_dir=str(notes)), progress=False)
    assert (
        str(err.value)
        == f"--out-dir {notes} is a file, not a folder; choose another --out-dir (it is left as it is)"
    )
    assert notes.read_text() == "mine"


def test_a_second_sweep_on_the_folder_in_use_is_refused(tmp_path):
    """Two `optimal-context` runs on one --out-dir, started 4 s apart, both fitted every cell."""
    from contextlab.data.store_write import output_lock

    cfg = _cfg(tmp_path, max_steps=10, contexts=[2, 7])
    busy = pytest.raises(UserError, match="optimal-context folder .* is being written")
    with output_lock(tmp_path / "sweep", "optimal-context folder"), busy:
        oc.run_optimal_context(cfg, progress=False)
    assert not (tmp_path / "sweep" / "results.json").exists()


def test_the_optimum_names_the_contexts_its_noise_cannot_tell_from_it_and_the_plot_draws_the_errors(
    tmp_path, monkeypatch
):
    """ "optimal l" was one number with no interval (a user's 7 and 12 differed by 0.004 at a standard
    error of 0.01), the Pearson lines had no p-values and the figure no error bars."""
    cells = {
        "512/2": {
            "data_size": 512,
            "context": 2,
            "best_val_loss": 0.60,
            "best_val_loss_stderr": 0.01,
            "best_step": 200,
        },
        "512/7": {
            "data_size": 512,
            "context": 7,
            "best_val_loss": 0.300,
            "best_val_loss_stderr": 0.010,
            "best_step": 200,
        },
        "512/12": {
            "data_size": 512,
            "context": 12,
            "best_val_loss": 0.304,
            "best_val_loss_stderr": 0.012,
            "best_step": 200,
        },
    }
    best = cells["512/7"]
    assert oc.within_noise(best, list(cells.values())) == [12]  # 0.004 < 1.96 * hypot(0.010, 0.012)
    assert oc.within_noise({**best, "best_val_loss_stderr": None}, list(cells.values())) == []
    assert oc.optimum_words({"context": 7, "learned": True, "within_noise": [12]}) == "7 (12 within noise)"
    assert oc.optimum_words({"context": 7, "learned": False, "within_noise": [12]}) == "(7: nothing learned)"
    cfg = _cfg(tmp_path, data_sizes=[512], contexts=[2, 7, 12])
    tasks = syn.make_tasks(cfg.parity())
    res = oc._results(cfg, tasks, cells)
    assert res["optimal_context"]["512"]["within_noise"] == [12]
    from contextlab.cli.optimal_context import format_table

    res["feature_fits"] = {"512": {"mle": {"r": -0.9, "p_value": 0.287}}}
    table = format_table(res)
    assert "7 (12 within noise)" in table and "mle -0.900 (p 0.29)" in table
    from contextlab import figures

    figs = []
    monkeypatch.setattr(figures, "save_png", lambda fig, out: figs.append(fig) or out)
    oc.optimal_context_png(res, tmp_path / "oc.png")
    (bars,) = [c for c in figs[0].axes[0].containers if c.has_yerr]
    heights = [seg[1][1] - seg[0][1] for seg in bars.lines[2][0].get_segments()]
    assert heights == pytest.approx([2 * 1.96 * 0.01, 2 * 1.96 * 0.010, 2 * 1.96 * 0.012])
    figures.pyplot().close(figs[0])
