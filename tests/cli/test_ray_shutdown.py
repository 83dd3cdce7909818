"""A Ray instance a command started ends with the command, where an interrupt is one line."""

from __future__ import annotations

import sys
import types

from contextlab import ray_engine
from contextlab.cli import _run


class FakeRay(types.ModuleType):
    def __init__(self, on_shutdown=None):
        super().__init__("ray")
        self.up, self.on_shutdown = True, on_shutdown

    def is_initialized(self):
        return self.up

    def shutdown(self):
        self.up = False
        if self.on_shutdown:
            raise self.on_shutdown


def started(ray):
    def command(argv):
        ray_engine._STARTED.append(True)  # what connect records after ray.init
        return 0

    return command


def test_a_ray_the_command_started_is_shut_down_when_it_ends(monkeypatch):
    ray = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    assert _run(started(ray), "data pack", []) == 0
    assert not ray.up and ray_engine._STARTED == []


def test_ctrl_c_while_ray_shuts_down_is_one_line_and_exit_130(monkeypatch, capsys):
    """A user's Ctrl-C after `data pack --ray` had written its result printed Ray's atexit traceback
    and exited 0; the shutdown now runs inside the command, where an interrupt is handled."""
    monkeypatch.setitem(sys.modules, "ray", FakeRay(KeyboardInterrupt()))
    assert _run(started(None), "data pack", []) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["contextlab data pack: interrupted; run the same command again to resume"]


def test_a_ray_this_process_did_not_start_is_left_alone(monkeypatch):
    ray = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    assert _run(lambda argv: 0, "sweep", []) == 0
    assert ray.up  # a test's fixture or a notebook's Ray is not ours to stop


def test_an_interrupted_command_that_keeps_nothing_half_done_does_not_say_resume(capsys):
    """Ctrl-C during an evaluation said "run the same command again to resume": nothing resumes, the
    rerun starts over (its result is written whole at the end)."""

    def interrupted(argv):
        raise KeyboardInterrupt

    assert _run(interrupted, "eval", []) == 130
    said = capsys.readouterr().err.strip()
    assert said == (
        "contextlab eval: interrupted; run the same command again (it starts over; nothing half-done was "
        "kept)"
    )
    assert _run(interrupted, "train", []) == 130
    assert capsys.readouterr().err.strip().endswith("run the same command again to resume")


def test_only_the_first_process_of_a_torchrun_says_how_it_stopped(monkeypatch, capsys):
    """Under torchrun every rank printed the same "terminated ... resumes from" line."""

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setenv("RANK", "1")
    assert _run(interrupted, "train", []) == 130 and capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    assert _run(interrupted, "train", []) == 130 and "interrupted" in capsys.readouterr().err
