"""No command writes a user's output into a run's checkpoints folder, and pruning never deletes a user's file.

Training keeps only the newest ``train.keep_last`` checkpoints and deletes the others whole: a user's
trial wrote ``eval ppl --out RUN/checkpoints/step_000150`` (accepted), and the next resumed training
deleted ppl.json with that checkpoint, silently. Every command that writes a user-chosen output now
refuses such an ``--out`` in one line naming a place to write instead; and pruning keeps a checkpoint
folder that holds files training did not write there, saying so in one line.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from contextlab.cli import main
from contextlab.errors import UserError
from contextlab.rundir import list_checkpoints, step_dir
from tests.faults.projects import make_project
from tests.faults.test_overwrite_safety import tree_digest


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A corpus, its byte store, an EP packed store and a one-step run (checkpoint step_000001)."""
    return make_project(tmp_path_factory.mktemp("ckpt_outputs"), chars=20_000, parts=4)


def command(project: Path, run: Path, kind: str, out: Path) -> list[str]:
    store, packed = str(project / "store"), str(project / "packed")
    model = ["--model", str(run)]
    return {
        "eval": ["eval", "ppl", *model, "--data", store, "--no-progress", "--out", str(out)],
        "generate": ["generate", *model, "--prompt", "To be", "--out", str(out / "gen.jsonl")],
        "profile": ["profile", *model, "--data", store, "--no-progress", "--out", str(out)],
        "compare": ["compare", str(run), str(run), "--out", str(out)],
        "report": ["report", str(run), "--out", str(out / "report.html")],
        "analyze entropy": ["analyze", "entropy", *model, "--data", store, "--out", str(out)],
        "analyze attention": ["analyze", "attention", *model, "--data", store, "--out", str(out)],
        "export": ["export", str(run), "--out", str(out)],
        "data export": ["data", "export", packed, "--out", str(out), "--no-progress"],
        "data pack": ["data", "pack", store, "--method", "ep", "--context", "63", "--out", str(out)],
        "data ingest": ["data", "ingest", str(project / "corpus"), "--out", str(out), "--no-progress"],
    }[kind]


KINDS = [
    "eval",
    "generate",
    "profile",
    "compare",
    "report",
    "analyze entropy",
    "analyze attention",
    "export",
    "data export",
    "data pack",
    "data ingest",
]


@pytest.mark.parametrize("where", ["checkpoints/step_000001", "checkpoints/mine/deeper"])
@pytest.mark.parametrize("kind", KINDS)
def test_an_out_in_a_runs_checkpoints_is_refused_in_one_line(project, tmp_path, kind, where, capsys):
    run = tmp_path / "run"
    shutil.copytree(project / "run", run)
    out = run / where
    before = tree_digest(run / "checkpoints")
    assert main(command(project, run, kind, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    flag_out = out / {"generate": "gen.jsonl", "report": "report.html"}.get(kind, "")
    instead = run / "eval" / {"generate": "gen.jsonl", "report": "report.html"}.get(kind, "")
    assert (
        f"--out {str(flag_out).rstrip('/')} lies inside {run / 'checkpoints'}, a run's checkpoints" in err[0]
    )
    assert f"choose an --out outside it, e.g. {str(instead).rstrip('/')} (nothing was written)" in err[0]
    assert tree_digest(run / "checkpoints") == before
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000001"]


def test_which_paths_count_as_a_runs_checkpoints(tmp_path):
    from contextlab.outputs import refuse_in_checkpoints

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text("[train]\n")
    for out in (run / "checkpoints", run / "checkpoints" / "step_000300", run / "checkpoints" / "a" / "b"):
        with pytest.raises(UserError, match="a run's checkpoints folder"):
            refuse_in_checkpoints(out)
    os.symlink(run / "checkpoints", tmp_path / "link")  # followed
    with pytest.raises(UserError, match=r"--out .*link/x lies inside .*run/checkpoints, a run's"):
        refuse_in_checkpoints(tmp_path / "link" / "x")
    with pytest.raises(
        UserError, match=r"--plot .*/run/checkpoints/p.png lies inside .*e\.g\. .*/run/eval/p.png "
    ):
        refuse_in_checkpoints(run / "checkpoints" / "p.png", "--plot", file=True)
    # not a run's: a run's own folders beside checkpoints, any folder named checkpoints elsewhere, and a
    # checkpoint copied out of its run (nothing prunes it)
    (tmp_path / "mine" / "checkpoints").mkdir(parents=True)
    alone = tmp_path / "copied_step"
    alone.mkdir()
    (alone / "state.json").write_text("{}")
    (alone / "model.safetensors").write_bytes(b"")
    for out in (run / "eval", run, tmp_path / "mine" / "checkpoints" / "x", alone / "eval"):
        refuse_in_checkpoints(out)


def save(run: Path, step: int, keep_last: int = 2) -> Path:
    from contextlab.train.checkpoint import save_checkpoint

    weights = {"w": torch.zeros(2)}
    return save_checkpoint(
        run,
        step,
        model_state=weights,
        optim_state={},
        state={"step": step},
        config_toml="",
        keep_last=keep_last,
    )


def test_pruning_keeps_a_checkpoint_holding_a_users_file_and_says_so_once(tmp_path, capsys):
    run = tmp_path / "run"
    save(run, 1)
    (step_dir(run, 1) / "ppl.json").write_text('{"mine": 1}')
    capsys.readouterr()
    for step in (2, 3, 4):
        save(run, step)
    assert [s for s, _ in list_checkpoints(run)] == [1, 3, 4]  # 2 pruned; 1 kept for the user's file
    assert (step_dir(run, 1) / "ppl.json").read_text() == '{"mine": 1}'
    assert (step_dir(run, 1) / "model.safetensors").is_file()  # the checkpoint whole, not only the file
    assert capsys.readouterr().out.splitlines() == [
        f"note: kept {step_dir(run, 1)} past train.keep_last=2: it holds ppl.json, which training did not "
        "write; move that out and the next checkpoint prunes it"
    ]
    (step_dir(run, 1) / "ppl.json").rename(tmp_path / "ppl.json")
    save(run, 5)
    assert [s for s, _ in list_checkpoints(run)] == [4, 5]


def test_a_step_written_again_keeps_a_users_file_in_its_folder(tmp_path, capsys):
    """A step folder made before training reached it (a user's results there) is written into, not
    replaced: the user's files stay beside the new checkpoint's."""
    run = tmp_path / "run"
    save(run, 1)
    (step_dir(run, 2) / "notes").mkdir(parents=True)
    (step_dir(run, 2) / "notes" / "a.txt").write_text("keep")
    (step_dir(run, 2) / "ppl.json").write_text("{}")
    capsys.readouterr()
    save(run, 2)
    assert (step_dir(run, 2) / "notes" / "a.txt").read_text() == "keep"
    assert (step_dir(run, 2) / "ppl.json").read_text() == "{}"
    assert [s for s, _ in list_checkpoints(run)] == [1, 2]
    assert not (run / "checkpoints" / ".step_000002.tmp").exists()
    assert capsys.readouterr().out.splitlines() == [
        f"note: {step_dir(run, 2)} is written again; notes, ppl.json, not written by training, stay in it"
    ]


def test_a_report_of_a_checkpoint_without_out_is_refused_too(project, tmp_path, capsys):
    """``report RUN/checkpoints/step_N`` wrote its default page, report.html, inside the checkpoint."""
    run = tmp_path / "run"
    shutil.copytree(project / "run", run)
    ckpt = run / "checkpoints" / "step_000001"
    before = tree_digest(run / "checkpoints")
    assert main(["report", str(ckpt)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {ckpt / 'report.html'} lies inside {run / 'checkpoints'}" in err[0]
    assert tree_digest(run / "checkpoints") == before
