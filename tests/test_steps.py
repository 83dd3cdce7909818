"""The step runner: skip when done, rerun on a changed fingerprint or a missing output, a failed or
killed step is never trusted, the state file is written atomically."""

from __future__ import annotations

import json
import os

import pytest

from contextlab import io
from contextlab.errors import UserError
from contextlab.steps import UP_TO_DATE, Step, StepRunner, digest


def make_step(tmp_path, calls: list, key="a", fp=None, text="out"):
    """A step that writes ``text`` to tmp_path/key.txt and counts its calls."""
    out = tmp_path / f"{key}.txt"

    def run():
        calls.append(key)
        out.write_text(text)
        return text

    return Step(key, {"text": text} if fp is None else fp, [out], run, skip_note=f"{key} skipped")


def test_a_finished_step_is_skipped_and_its_time_recorded(tmp_path):
    calls, logged = [], []
    runner = StepRunner(tmp_path / "state.json", log=logged.append)
    first = runner.run(make_step(tmp_path, calls))
    assert first.ran and first.value == "out" and first.reason == "new" and calls == ["a"]
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["steps"] == {"a": digest({"text": "out"})} and set(state["seconds"]) == {"a"}
    assert "started" not in state and "failed" not in state
    again = StepRunner(tmp_path / "state.json", log=logged.append).run(make_step(tmp_path, calls))
    assert not again.ran and calls == ["a"] and logged == ["a skipped"]


def test_a_changed_fingerprint_reruns_and_says_why(tmp_path):
    calls, logged = [], []
    runner = StepRunner(tmp_path / "state.json", log=logged.append)
    runner.run(make_step(tmp_path, calls, text="one"))
    out = runner.run(make_step(tmp_path, calls, text="two"))
    assert out.ran and out.reason == "its inputs changed since it ran" and calls == ["a", "a"]
    assert logged == ["  a: its inputs changed since it ran; running it again"]
    assert (tmp_path / "a.txt").read_text() == "two" and runner.recorded("a") == digest({"text": "two"})


def test_on_change_may_refuse_a_changed_step(tmp_path):
    def refuse(step):
        raise UserError(f"{step.outputs[0]} was made with other settings")

    calls = []
    StepRunner(tmp_path / "state.json").run(make_step(tmp_path, calls, text="one"))
    runner = StepRunner(tmp_path / "state.json", on_change=refuse)
    with pytest.raises(UserError, match="a.txt was made with other settings"):
        runner.run(make_step(tmp_path, calls, text="two"))
    assert calls == ["a"] and runner.recorded("a") == digest({"text": "one"})


def test_a_missing_output_reruns_the_step(tmp_path):
    calls, logged = [], []
    runner = StepRunner(tmp_path / "state.json", log=logged.append)
    runner.run(make_step(tmp_path, calls))
    (tmp_path / "a.txt").unlink()
    out = runner.run(make_step(tmp_path, calls))
    assert out.ran and calls == ["a", "a"] and (tmp_path / "a.txt").exists()
    assert logged == [f"  a: its output {tmp_path / 'a.txt'} is missing; running it again"]


def test_a_step_that_fails_half_way_is_not_trusted_and_runs_again(tmp_path, capsys):
    calls = []
    runner = StepRunner(tmp_path / "state.json")
    runner.run(make_step(tmp_path, calls, key="first"))

    def killed():  # leaves a partial output, then dies
        (tmp_path / "b.txt").write_text("half")
        raise KeyboardInterrupt

    step = Step("b", {"v": 1}, [tmp_path / "b.txt"], killed)
    with pytest.raises(KeyboardInterrupt):
        runner.run(step)
    err = capsys.readouterr().err
    assert "step 'b' was interrupted" in err and "run the same command again" in err
    state = json.loads((tmp_path / "state.json").read_text())
    assert "b" not in state["steps"] and state["started"] == {"b": digest({"v": 1})}
    assert state["steps"] == {"first": digest({"text": "out"})}  # the other record is intact
    fresh = StepRunner(tmp_path / "state.json")
    assert fresh.check(step) == (digest({"v": 1}), "it failed in an earlier run (KeyboardInterrupt)")
    done = fresh.run(Step("b", {"v": 1}, [tmp_path / "b.txt"], lambda: calls.append("b")))
    assert done.ran and calls == ["first", "b"] and fresh.recorded("b") == digest({"v": 1})
    assert "started" not in json.loads((tmp_path / "state.json").read_text())


def test_a_rerun_drops_the_old_record_before_it_starts(tmp_path):
    calls = []
    runner = StepRunner(tmp_path / "state.json")
    runner.run(make_step(tmp_path, calls, text="one"))

    def boom():
        raise RuntimeError("disk full\nat the end")

    with pytest.raises(RuntimeError):
        runner.run(Step("a", {"text": "two"}, [tmp_path / "a.txt"], boom))
    # the finished record of "one" is gone: a.txt may have been half rewritten by the failed run
    fresh = StepRunner(tmp_path / "state.json")
    assert fresh.recorded("a") is None and fresh.failure("a") == "at the end"
    assert (
        fresh.check(make_step(tmp_path, calls, text="one"))[1] == "it failed in an earlier run (at the end)"
    )


def test_a_killed_process_leaves_the_step_started(tmp_path):
    runner = StepRunner(tmp_path / "state.json")
    step = Step("t", {"v": 1}, [tmp_path / "t.txt"], lambda: None)
    runner.begin(step, step.digest())  # the process dies here (SIGKILL): no fail(), no finish()
    assert StepRunner(tmp_path / "state.json").check(step)[1] == "it was interrupted in an earlier run"


def test_a_lazy_fingerprint_is_read_when_the_step_runs(tmp_path):
    calls, seen = [], {}
    runner = StepRunner(tmp_path / "state.json")
    runner.run(Step("up", {"v": 1}, [], lambda: seen.update(v=7)))
    down = Step("down", lambda: {"upstream": seen["v"]}, [], lambda: calls.append("down"))
    assert runner.run(down).ran and runner.recorded("down") == digest({"upstream": 7})


def test_a_self_checking_step_always_runs_and_is_recorded_only_when_it_worked(tmp_path):
    runner = StepRunner(tmp_path / "state.json")
    out = runner.run(Step("ingest", None, [], lambda: "made"))
    assert out.ran and "ingest" in runner.seconds
    before = runner.seconds["ingest"]
    skipped = runner.run(Step("ingest", None, [], lambda: UP_TO_DATE))
    assert not skipped.ran and runner.seconds["ingest"] == before  # the time of the real work is kept
    assert "started" not in json.loads((tmp_path / "state.json").read_text())


def test_the_state_file_is_replaced_atomically(tmp_path, monkeypatch):
    calls = []
    path = tmp_path / "state.json"
    runner = StepRunner(path)
    runner.run(make_step(tmp_path, calls, key="a"))
    before = path.read_text()

    def crash(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr(io.os, "replace", crash)
    with pytest.raises(OSError):
        runner.run(make_step(tmp_path, calls, key="b"))  # begin() cannot write its state
    monkeypatch.undo()
    assert path.read_text() == before  # the old state, whole
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert calls == ["a"]  # the step did not run without its "started" record


def test_two_runners_on_one_state_file_keep_each_others_records(tmp_path):
    one, two = StepRunner(tmp_path / "state.json"), StepRunner(tmp_path / "state.json")
    one.run(Step("x", {"v": 1}, [], lambda: None))
    two.run(Step("y", {"v": 2}, [], lambda: None))  # two read the file before x was recorded
    assert set(json.loads((tmp_path / "state.json").read_text())["steps"]) == {"x", "y"}


def _record_many(path: str, who: int, n: int) -> None:
    runner = StepRunner(path)
    for i in range(n):
        runner.run(Step(f"{who}-{i}", {"v": i}, [], lambda: None))


def test_processes_sharing_a_state_file_lose_no_record_and_leave_no_lock_file(tmp_path):
    import multiprocessing

    path = tmp_path / "state.json"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_record_many, args=(str(path), w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    state = json.loads(path.read_text())
    assert set(state["steps"]) == {f"{w}-{i}" for w in range(4) for i in range(25)}
    assert state.get("started", {}) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no .state.json.lock beside it


def test_an_unreadable_state_file_names_the_fix(tmp_path):
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(UserError, match="state.json is not a readable step state .*delete it"):
        StepRunner(tmp_path / "state.json")


def test_an_old_state_without_started_or_failed_is_read(tmp_path):
    old = {"steps": {"train gpt": "0123456789abcdef"}, "seconds": {"train gpt": 12.5, "ingest books": 3.0}}
    (tmp_path / "state.json").write_text(json.dumps(old))
    runner = StepRunner(tmp_path / "state.json")
    assert runner.recorded("train gpt") == "0123456789abcdef" and runner.seconds == old["seconds"]
    assert os.path.exists(tmp_path / "state.json")
