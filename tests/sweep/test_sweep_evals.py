"""A sweep's evaluations: what each run gets is decided when the file is read. A store-reading
evaluation given no --data scores each run on what it held out (--split run), a run of an
objective that does not run left to right gets none (it used to train and then fail), and an
evaluation whose data the sweep cannot choose is refused before the first run."""

from __future__ import annotations

import csv
import json
import re

import pytest

from contextlab.errors import UserError
from contextlab.sweep import runner, spec
from contextlab.sweep.runner import run_sweep
from contextlab.sweep.spec import eval_notes, load_sweep
from tests.sweep.conftest import store, tiny_sweep  # noqa: F401  (the module's store fixture)


def _objectives(tmp_path, store, evals: str, eval_args: str = "") -> object:  # noqa: F811
    f = tiny_sweep(tmp_path, store, "obj")
    text = f.read_text().replace('"train.context" = [16]', '"objective.name" = ["clm", "span"]')
    text = text.replace("[base.train]", "[base.train]\ncontext = 16")
    text = text.replace("threads_per_run = 1", f"threads_per_run = 1\nevals = {evals}\n{eval_args}")
    f.write_text(text)
    return f


def test_each_run_gets_its_evaluations_with_the_data_they_read(tmp_path, store):  # noqa: F811
    f = _objectives(
        tmp_path, store, '["ppl", "contextwise"]', 'eval_args = { contextwise = ["--length", "8"] }'
    )
    section, runs = load_sweep(f)
    clm, span = runs
    assert clm.evals == [("ppl", ["--split", "run"]), ("contextwise", ["--length", "8", "--split", "run"])]
    assert span.evals == []
    assert [name for name, _ in runner._commands(section, span)] == ["train"]
    assert [name for name, _ in runner._commands(section, clm)] == ["train", "eval ppl", "eval contextwise"]
    notes = eval_notes(section, runs)
    assert len(notes) == 2
    assert (
        notes[0].startswith("eval ppl, contextwise: no --data in [sweep] eval_args")
        and "--split run" in notes[0]
    )
    assert "1 run(s) get no evaluation: name-span (objective span does not run left to right" in notes[1]


def test_data_or_a_split_given_is_kept(tmp_path, store):  # noqa: F811
    args = 'eval_args = { ppl = ["--data", "{data.store}"], contextwise = ["--split", "all", "--data=x"] }'
    f = _objectives(tmp_path, store, '["ppl", "contextwise", "niah", "kv"]', args)
    section, runs = load_sweep(f)
    assert runs[0].evals == [
        ("ppl", ["--data", "{data.store}"]),
        ("contextwise", ["--split", "all", "--data=x"]),
        ("niah", []),  # its haystack has a default, kv makes its own
        ("kv", []),
    ]
    assert spec.format_arg(runs[0].evals[0][1][1], runs[0]) == str(store.path)
    assert eval_notes(section, runs) == [
        "1 run(s) get no evaluation: name-span (objective span does not run left to right, and every "
        "evaluation scores next-token predictions)"
    ]


@pytest.mark.parametrize("name", ["mqar", "icl"])
def test_an_evaluation_without_data_it_could_read_is_refused_before_any_run(tmp_path, store, name):  # noqa: F811
    f = _objectives(tmp_path, store, f'["{name}"]')
    with pytest.raises(
        UserError, match=rf"eval {name} in \[sweep\] evals reads .* add eval_args = \{{ {name} ="
    ):
        load_sweep(f)
    assert not (tmp_path / "out").exists()


def test_a_sweep_over_objectives_evaluates_the_causal_runs_on_what_they_held_out(tmp_path, store, capsys):  # noqa: F811
    f = _objectives(tmp_path, store, '["ppl"]')
    results = run_sweep(f, progress=False)
    rows = {r["run"]: r for r in csv.DictReader(open(results))}
    assert {k: r["status"] for k, r in rows.items()} == {"name-clm": "done", "name-span": "done"}
    _section, (clm, span) = load_sweep(f)
    record = json.loads((clm.dir / "eval" / "ppl.json").read_text())
    assert record["options"]["split"] == "run"
    assert record["results"]["n_tokens_scored"] == 1_999  # the held-out tail: the last 10% of 20,000 tokens
    assert float(rows["name-clm"]["ppl.loss"]) == pytest.approx(record["results"]["summary"]["loss"])
    assert not (span.dir / "eval").exists() and rows["name-span"]["ppl.loss"] == ""
    assert "1 run(s) get no evaluation: name-span" in capsys.readouterr().err
    # a result rewritten by another command (other options) or deleted is evaluated again, said, and a
    # dry run says what the sweep will do (it said "done" and the analysis read the other result)
    from contextlab.cli import main

    result = clm.dir / "eval" / "ppl.json"
    assert (
        main(["eval", "ppl", "--model", str(clm.dir), "--split", "run", "--stride", "8", "--overwrite"]) == 0
    )
    assert json.loads(result.read_text())["options"]["stride"] == 8
    # the report says so beside the sweep's table (which still holds the sweep's own numbers)
    from contextlab.report.html import build_report
    from contextlab.sweep.results import rewritten_evals

    assert rewritten_evals(_section.out_dir) == {"name-clm": ["ppl"]}
    page = build_report(_section.out_dir).read_text()
    assert "evaluations rewritten since the sweep made this table: name-clm (ppl)" in page
    assert "name-clm (evaluations rewritten since the sweep&#x27;s table)" in page
    capsys.readouterr()
    assert main(["sweep", str(f), "--dry-run"]) == 0
    assert (
        f"rerun    name-clm  (its result {result} was rewritten since the sweep made it"
        in capsys.readouterr().out
    )
    run_sweep(f, progress=False)
    assert f"name-clm: its result {result} was rewritten since the sweep made it" in capsys.readouterr().err
    assert json.loads(result.read_text())["options"]["stride"] != 8  # the sweep's own options again
    run_sweep(f, progress=False)
    assert "running it again" not in capsys.readouterr().err  # done: skipped
    assert rewritten_evals(_section.out_dir) == {}
    assert "rewritten since" not in build_report(_section.out_dir).read_text()
    result.unlink()
    assert main(["sweep", str(f), "--dry-run"]) == 0
    assert f"rerun    name-clm  (its output {result} is missing)" in capsys.readouterr().out
    run_sweep(f, progress=False)
    assert result.is_file() and f"its output {result} is missing; running it again" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("only", "said"),
    [
        ("context-99", "matches no run of the grid (2 runs: name-clm, name-span)"),
        ("[", "is not a regular expression"),
    ],
)
def test_an_only_that_selects_nothing_is_refused_before_anything_is_written(tmp_path, store, only, said):  # noqa: F811
    f = _objectives(tmp_path, store, "[]")
    with pytest.raises(UserError, match=re.escape(said)):
        run_sweep(f, only=only, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_dry_run_lists_the_slice_only_selects(tmp_path, store, capsys):  # noqa: F811
    from contextlab.cli import main

    f = _objectives(tmp_path, store, "[]")
    assert main(["sweep", str(f), "--dry-run", "--only", "span"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "pending  name-span" and out[1].endswith(
        "runs in " + str(tmp_path / "out") + " (--only 'span' of the grid's 2)"
    )
    assert main(["sweep", str(f), "--dry-run", "--only", "nothing"]) == 2
    assert not (tmp_path / "out").exists()


CHANGES = {  # a sweep file's mistake: a text replaced in the file, or a --set
    "eval_args typo": (
        "threads_per_run = 1",
        'threads_per_run = 1\neval_args = { ppl = ["--max-dcos", "8"] }',
    ),
    "eval_args value": (
        "threads_per_run = 1",
        'threads_per_run = 1\neval_args = { ppl = ["--stride", "x"] }',
    ),
    "placeholder": (
        "threads_per_run = 1",
        'threads_per_run = 1\neval_args = { ppl = ["--data", "{data.stor}"] }',
    ),
    "parallel": ("threads_per_run = 1", "threads_per_run = 1\nparallel = 0"),
    "model size": ("--set", "base.model.size=tiny-2x12"),
    "data path": ("--set", "base.data.val_store=nope/store"),
}
SAID = {
    "eval_args typo": "[sweep] eval_args of ppl: unrecognized arguments: --max-dcos 8; `contextlab eval ppl",
    "eval_args value": "[sweep] eval_args of ppl: config key 'stride' must be int, got 'x'",
    "placeholder": "grid point name-clm: eval argument '{data.stor}': the run config has no key 'data.stor'",
    "parallel": "parallel must be 1 or more",
    "model size": "unknown model size 'tiny-2x12'",
    "data path": "grid point name-clm: data.val_store 'nope/store' not found (from ",
}


@pytest.mark.parametrize("mistake", list(CHANGES))
def test_a_mistake_in_the_sweep_file_is_refused_before_any_run_trains(tmp_path, store, capsys, mistake):  # noqa: F811
    """Each of these passed --dry-run and failed every run after it trained (or ran one at a time)."""
    from contextlab.cli import main

    f = _objectives(tmp_path, store, '["ppl"]')
    change = CHANGES[mistake]
    given = list(change) if change[0] == "--set" else []
    if not given:
        f.write_text(f.read_text().replace(*change, 1))
    for extra in (["--dry-run"], []):
        assert main(["sweep", str(f), *given, *extra]) == 2
        assert SAID[mistake] in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_set_names_a_table_and_sets_grid_axes(tmp_path, store, capsys):  # noqa: F811
    """--set train.context=64 blamed the sweep file; --set base.KEY of a grid axis was ignored in
    silence; a grid axis could not be --set at all."""
    from contextlab.cli import main

    f = _objectives(tmp_path, store, '["ppl"]')
    assert main(["sweep", str(f), "--dry-run", "--set", "train.context=8"]) == 2
    assert "--set train.context=8: a sweep's --set keys start with sweep., base. or grid." in (
        capsys.readouterr().err
    )
    assert main(["sweep", str(f), "--dry-run", "--set", "base.objective.name=clm"]) == 2
    assert "objective.name is a grid axis of" in capsys.readouterr().err
    _, runs = load_sweep(f, ['grid.objective.name=["clm"]'])
    assert [r.name for r in runs] == ["name-clm"]
    _, runs = load_sweep(f, ["grid.train.seed=[0, 1]"])  # a new axis beside the file's
    assert [r.name for r in runs] == [
        "name-clm__seed-0",
        "name-clm__seed-1",
        "name-span__seed-0",
        "name-span__seed-1",
    ]


def test_an_evaluation_written_elsewhere_is_found_there(tmp_path, store):  # noqa: F811
    """With --out in eval_args the result is not in RUN/eval: the sweep looked for it there and ran the
    evaluation again at every call."""
    args = 'eval_args = { ppl = ["--out", "{run}/mine"] }'
    f = _objectives(tmp_path, store, '["ppl"]', args)
    _, runs = load_sweep(f)
    assert runner._eval_files(runs[0]) == {"ppl": runs[0].dir / "mine" / "ppl.json"}


def test_a_failed_runs_error_is_contextlabs_line_not_torchruns(tmp_path):
    """Under torchrun the last line with 'error' was torchrun's link to its docs; the cause was above."""
    from types import SimpleNamespace

    (tmp_path / "sweep.log").write_text(
        "contextlab train: error: rows per step (3) must split evenly over the 2 processes; set ...\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
    )
    assert runner._last_error(SimpleNamespace(dir=tmp_path)).startswith(
        "contextlab train: error: rows per step (3) must split evenly"
    )


def test_the_evaluations_of_an_early_stopping_run_read_its_best_checkpoint(tmp_path, store):  # noqa: F811
    """With train.patience a run's newest checkpoint is where it stopped, past its best: the sweep's
    evaluations read the best (``--step best``) unless eval_args name a step, and results.csv says
    which step each evaluation read."""
    f = _objectives(tmp_path, store, '["ppl", "contextwise"]', 'eval_args = { ppl = ["--step", "2"] }')
    f.write_text(f.read_text().replace("[base.train]", "[base.train]\npatience = 2\nval_every = 1"))
    section, runs = load_sweep(f)
    cmds = dict(runner._commands(section, runs[0]))
    assert cmds["eval contextwise"][-2:] == ["--step", "best"]
    assert cmds["eval ppl"].count("--step") == 1 and "best" not in cmds["eval ppl"]
    (tmp_path / "plain").mkdir()
    plain = _objectives(tmp_path / "plain", store, '["ppl"]')
    section, runs = load_sweep(plain)
    assert "--step" not in dict(runner._commands(section, runs[0]))["eval ppl"]


def test_results_say_which_step_each_evaluation_read(tmp_path):
    from contextlab.sweep.results import run_summary

    ev = tmp_path / "run" / "eval"
    ev.mkdir(parents=True)
    doc = {"results": {"summary": {"loss": 5.8}}, "model": {"step": 80}, "seconds": 1.0}
    (ev / "ppl.json").write_text(json.dumps(doc))
    row = run_summary(tmp_path / "run")
    assert row["ppl.loss"] == 5.8 and row["ppl.step"] == 80
