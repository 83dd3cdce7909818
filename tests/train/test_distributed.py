"""torchrun with 2 CPU processes (gloo): DDP and FSDP2 give the 1-process losses; resume works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from contextlab.config import from_dict, save_toml
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.train.config import RunConfig
from tests.conftest import REPO, shakespeare
from tests.train.test_trainer import TINY


@pytest.fixture(scope="module")
def cfg_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    src = root / "shakes.txt"
    src.write_text(shakespeare(100_000))
    store = ingest(src, root / "store", IngestConfig(), progress=False).store
    data = json.loads(json.dumps(TINY))
    data["data"]["store"] = str(store.path)
    data["train"].update(max_steps=10, tokens_per_step=512, keep_last=5, out_dir=str(root / "unused"))
    save_toml(from_dict(RunConfig, data), root / "tiny.toml")
    return root / "tiny.toml"


def run(cfg_file, out_dir, nproc: int, *extra: str) -> dict[int, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    if nproc == 1:
        cmd = [sys.executable, "-m", "contextlab", "train"]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(nproc),
            "-m",
            "contextlab",
            "train",
        ]
    res = subprocess.run(
        cmd + [str(cfg_file), f"--set=train.out_dir={out_dir}", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows}


def test_ddp_and_fsdp_match_one_process_and_resume(cfg_file, tmp_path):
    single = run(cfg_file, tmp_path / "one", 1)
    ddp = run(cfg_file, tmp_path / "ddp", 2)
    fsdp = run(cfg_file, tmp_path / "fsdp", 2, "--set=train.parallel=fsdp")
    assert sorted(single) == sorted(ddp) == sorted(fsdp) == list(range(1, 11))
    for s in single:
        assert ddp[s] == pytest.approx(single[s], abs=2e-5)
        assert fsdp[s] == pytest.approx(single[s], abs=2e-5)
    # resume distributed: drop the last checkpoint, run again, it continues from step 8
    shutil.rmtree(tmp_path / "fsdp" / "checkpoints" / "step_000010")
    resumed = run(cfg_file, tmp_path / "fsdp", 2, "--set=train.parallel=fsdp")
    assert sorted(resumed) == list(range(1, 11))
    for s in (9, 10):
        assert resumed[s] == pytest.approx(single[s], abs=2e-5)


def test_a_random_objective_trains_alike_on_one_and_two_processes(cfg_file, tmp_path):
    """mlm draws its masks per row (seeded by the run, the step and the row), so 2 processes train on
    the masks 1 process draws (one global RNG per process drew the same masks on both ranks), and a
    resumed 2-process run goes on exactly."""
    mlm = ["--set=objective.name=mlm", "--set=train.val_every=0"]
    single = run(cfg_file, tmp_path / "one", 1, *mlm)
    ddp = run(cfg_file, tmp_path / "ddp", 2, *mlm)
    assert sorted(single) == sorted(ddp) == list(range(1, 11))
    for s in single:
        assert ddp[s] == pytest.approx(single[s], abs=2e-5), s
    shutil.rmtree(tmp_path / "ddp" / "checkpoints" / "step_000010")
    resumed = run(cfg_file, tmp_path / "ddp", 2, *mlm)
    for s in (9, 10):
        assert resumed[s] == pytest.approx(single[s], abs=2e-5)


def test_every_process_saves_and_resumes_its_own_rng(cfg_file, tmp_path):
    """Dropout draws of its own on each process: rank 1 is seeded apart from rank 0, a checkpoint keeps
    both states, and a resumed run goes on with the losses of the uninterrupted one."""
    import torch

    drop = ["--set=model.dropout=0.1", "--set=train.val_every=0"]
    whole = run(cfg_file, tmp_path / "whole", 2, *drop)
    rng = torch.load(tmp_path / "whole" / "checkpoints" / "step_000010" / "rng.pt", weights_only=True)
    assert len(rng["ranks"]) == 2 and not torch.equal(rng["ranks"][0]["torch"], rng["ranks"][1]["torch"])
    assert torch.equal(rng["ranks"][0]["torch"], rng["torch"])
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step_000010")
    resumed = run(cfg_file, tmp_path / "cut", 2, *drop)
    for s in (9, 10):
        assert resumed[s] == pytest.approx(whole[s], abs=1e-6)


def test_a_torchrun_on_a_locked_run_ends_every_rank_with_one_line(cfg_file, tmp_path):
    from contextlab.io import exclusive_lock
    from contextlab.rundir import LOCK

    run_dir = tmp_path / "busy"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "contextlab", "train", str(cfg_file), f"--set=train.out_dir={run_dir}"]
    with exclusive_lock(run_dir / LOCK, "a run being written"):  # another train holds the run
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "src/contextlab" not in res.stderr  # torchrun's own traceback only
    assert f"error: run directory {run_dir} is being written by pid {os.getpid()}" in res.stderr
    assert "rank 0 refused to start the run" in res.stderr  # rank 1 learnt it and ended too
    assert not (run_dir / "metrics.jsonl").exists()


def test_workers_ask_for_sigterm_when_the_launcher_dies(monkeypatch):
    """Only under torchrun (TORCHELASTIC_RUN_ID) and on Linux is prctl(PR_SET_PDEATHSIG, SIGTERM) called."""
    import signal

    from contextlab.train import distributed as D

    calls = []

    class Libc:
        def prctl(self, *args):
            calls.append(args)
            return 0

    monkeypatch.setattr(D.ctypes, "CDLL", lambda *a, **k: Libc())
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert not D.die_with_launcher() and calls == []  # not launched by torchrun: nothing asked
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setattr(D.sys, "platform", "darwin")
    assert not D.die_with_launcher() and calls == []  # no prctl there: harmless
    monkeypatch.setattr(D.sys, "platform", "linux")
    assert D.die_with_launcher() and calls == [(D.PR_SET_PDEATHSIG, signal.SIGTERM)]


CHILD = """
import os, signal, sys, time
os.environ["TORCHELASTIC_RUN_ID"] = "test"
from contextlab.train.distributed import die_with_launcher
def stop(signum, frame):
    # written whole, then renamed: the test polls for the marker and must never read it half-made
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write("SIGTERM")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
assert die_with_launcher()
open(sys.argv[1] + ".ready", "w").close()
time.sleep(60)
"""
LAUNCHER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_gets_sigterm_when_its_launcher_is_killed(tmp_path):
    """A launcher killed with SIGKILL (as a torchrun parent can be) takes its worker down through
    the worker's SIGTERM path instead of leaving it running, re-parented."""
    import signal
    import time

    marker = tmp_path / "stopped"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, CHILD, str(marker)], env=env)
    try:
        deadline = time.time() + 60
        while not (tmp_path / "stopped.ready").exists() and time.time() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "stopped.ready").exists(), "the worker did not start"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert marker.read_text() == "SIGTERM"
    finally:
        launcher.kill()


def _workers(launcher: int) -> dict[int, int]:
    """The torchrun workers of ``launcher``: rank -> pid, from /proc (Linux)."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher:
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except (OSError, ValueError, IndexError):
            continue
        if b"RANK" in env:
            found[int(env[b"RANK"])] = int(d)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the workers from /proc")
def test_sigterm_to_one_worker_stops_every_rank_after_one_checkpointed_step(cfg_file, tmp_path):
    """A scheduler's SIGTERM that reaches one process (or all at slightly different moments): every
    rank stops after the same step, that step's checkpoint is whole (both ranks' RNG), and the rerun
    goes on from it to the losses of an uninterrupted run."""
    import signal
    import time

    import torch

    steps = ["--set=train.max_steps=60", "--set=train.ckpt_every=1000", "--set=train.val_every=0"]
    single = run(cfg_file, tmp_path / "one", 1, *steps)
    out = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "contextlab", "train", str(cfg_file), f"--set=train.out_dir={out}", *steps]
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics, deadline = out / "metrics.jsonl", time.time() + 120
    while time.time() < deadline and launcher.poll() is None:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.01)
    os.kill(_workers(launcher.pid)[1], signal.SIGTERM)  # rank 1 only
    _, err = launcher.communicate(timeout=120)
    assert launcher.returncode != 0, err[-2000:]
    (stopped,) = [int(d.name.split("_")[1]) for d in (out / "checkpoints").glob("step_*")]
    assert 3 <= stopped < 60 and json.loads(metrics.read_text().splitlines()[-1])["step"] == stopped
    rng = torch.load(out / "checkpoints" / f"step_{stopped:06d}" / "rng.pt", weights_only=True)
    assert len(rng["ranks"]) == 2, stopped
    resumed = run(cfg_file, out, 2, *steps)
    assert sorted(resumed) == list(range(1, 61))
    for s in (stopped + 1, 60):
        assert resumed[s] == pytest.approx(single[s], abs=2e-5)
