"""Ingest and pack on a local Ray instance (2 CPUs, ``cluster`` in conftest.py): the same
files, byte for byte, as the local path; a worker killed mid-shard is run again by Ray; a
killed driver is resumed by the same command. meta.json is compared with its timings and
creation time taken out (they differ between any two runs, local ones too)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import contextlab.data.packing.shards as shards_mod
import contextlab.data.shards.on_ray as on_ray
from contextlab.cli import main
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.ingest_parts import in_parts
from contextlab.data.packing import PackConfig, pack
from contextlab.data.shards import RayExecutor
from contextlab.io import TIMINGS, tree_digest
from tests.conftest import REPO, shakespeare, write_tree

PACK = PackConfig(method="splice", retriever="bm25", context=63, shards=4)
PACK_FLAGS = ["--method", "splice", "--retriever", "bm25", "--context", "63", "--shards", "4"]

# a packed store records its token store's path relative to itself too, which depends on its --out:
# packs written to different folders from the same store compare equal without it
PLACED = (*TIMINGS, "relative_path")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A folder of 3 directories (domains), an empty file and a binary one (both skipped and named)."""
    text = shakespeare(60_000)
    files = {
        f"{d}/f{i:02d}.txt": text[(k := 7 * i + 3 * j) * 900 : k * 900 + 600 + 97 * i]
        for j, d in enumerate("abc")
        for i in range(6)
    }
    files.update({"a/empty.txt": "", "b/blob.bin": b"\x00\x01binary"})
    return write_tree(tmp_path_factory.mktemp("corpus"), files)


@pytest.fixture(scope="module")
def local(corpus, tmp_path_factory):
    """The local path's store and packed store."""
    root = tmp_path_factory.mktemp("local")
    store = ingest(corpus, root / "store", IngestConfig(), progress=False).store
    pack(store, root / "packed", PACK, progress=False)
    return root / "store", root / "packed"


def test_ingest_and_pack_on_ray_equal_the_local_path(cluster, corpus, local, tmp_path):
    parts = in_parts(RayExecutor(address=cluster), 4)
    store = ingest(corpus, tmp_path / "store", IngestConfig(), progress=False, store_documents=parts).store
    assert tree_digest(store.path) == tree_digest(local[0])
    assert len(store.meta["source_stats"]) and json.loads(
        (store.path / "skipped.jsonl").read_text().splitlines()[0]
    )["path"] in ("a/empty.txt", "b/blob.bin")
    assert not (tmp_path / "store.partial").exists()
    packed = pack(  # from the local store: meta.json names the store's path
        local[0], tmp_path / "packed", PACK, progress=False, executor=RayExecutor(address=cluster)
    )
    assert tree_digest(packed.packed.path, PLACED) == tree_digest(local[1], PLACED)
    assert packed.packed.meta["n_sequences"] > 4 and len(packed.packed.meta["shards"]) == 4


def test_a_worker_killed_mid_shard_is_run_again(cluster, local, tmp_path, monkeypatch):
    marker, original = tmp_path / "killed-once", shards_mod.run_shard

    def dies_once(*args):
        if args[2] == 1 and not marker.exists():  # shard 1, first attempt: its worker process dies
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args)

    monkeypatch.setattr(shards_mod, "run_shard", dies_once)
    report = pack(local[0], tmp_path / "packed", PACK, progress=False, executor=RayExecutor(address=cluster))
    assert marker.exists() and int(marker.read_text()) != os.getpid()
    assert report.shards_packed == 4 and tree_digest(report.packed.path, PLACED) == tree_digest(
        local[1], PLACED
    )


DRIVER = """
import os, signal, sys
import contextlab.data.shards.on_ray as ex
finished = ex.as_completed
def first_then_die(*args, **kwargs):  # the driver is killed once one shard has finished
    for item in finished(*args, **kwargs):
        yield item
        os.kill(os.getpid(), signal.SIGKILL)
ex.as_completed = first_then_die
from contextlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_driver_resumes_from_the_finished_shards(cluster, local, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["data", "pack", str(local[0]), *PACK_FLAGS, "--out", str(out), "--ray", cluster]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    cmd = [sys.executable, "-c", DRIVER, *args, "--no-progress"]
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not out.exists() and 1 <= len(list((tmp_path / "out.partial" / "shards").glob("*.npz"))) <= 4
    assert main(args) == 0  # the same command again
    assert "already packed" in capsys.readouterr().out  # it resumed from the finished shards
    assert tree_digest(out, PLACED) == tree_digest(local[1], PLACED)


def test_an_out_of_range_id_found_by_a_shard_on_ray_is_one_line(cluster, local, tmp_path):
    """Each shard checks its own ids; on Ray the task's error comes back as its one line."""
    import shutil

    import numpy as np

    from contextlab.data.packing.shards import store_shard_ranges
    from contextlab.data.store import TokenStore
    from contextlab.errors import UserError

    store = shutil.copytree(local[0], tmp_path / "store")
    lo, _ = store_shard_ranges(TokenStore(store), PACK.shards)[2]
    tokens = np.memmap(store / "tokens.bin", dtype=TokenStore(store).dtype, mode="r+")
    tokens[int(TokenStore(store).offsets[lo]) + 1] = np.iinfo(tokens.dtype).max  # in shard 2
    tokens.flush()
    del tokens
    with pytest.raises(UserError) as err:  # unverified: the shard that holds it finds it, on Ray
        pack(
            store,
            tmp_path / "packed",
            PACK,
            progress=False,
            executor=RayExecutor(address=cluster),
            verify=False,
        )
    assert "\n" not in str(err.value) and "contextlab data verify" in str(err.value)
    assert f"in documents {lo:,}.." in str(err.value) and not (tmp_path / "packed").exists()


def test_an_interrupted_ingest_resumes_from_its_finished_parts(cluster, corpus, local, tmp_path, monkeypatch):
    finished = on_ray.as_completed

    def first_then_interrupt(*args, **kwargs):
        for item in finished(*args, **kwargs):
            yield item
            raise KeyboardInterrupt

    parts, out = in_parts(RayExecutor(address=cluster), 4), tmp_path / "store"
    monkeypatch.setattr(on_ray, "as_completed", first_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        ingest(corpus, out, IngestConfig(), progress=False, store_documents=parts)
    records = tmp_path / "store.partial" / "parts"
    done = {int(p.stem[5:]) for p in records.glob("part_*.json")}
    assert 1 <= len(done) < 4 and not out.exists()
    monkeypatch.setattr(on_ray, "as_completed", finished)
    seen = []
    monkeypatch.setattr(RayExecutor, "run", _spy(RayExecutor.run, seen))
    ingest(corpus, out, IngestConfig(), progress=False, store_documents=parts)
    rerun = {job[3] for job in seen}
    # The finished parts are not run again. A part whose task was finishing as it was cancelled
    # may record itself after the interrupt (the record is atomic, so it is whole): the resume
    # takes it as done, so the parts run again are at most the unfinished ones.
    assert not rerun & done and rerun | done <= set(range(4))
    assert tree_digest(out) == tree_digest(local[0])


def _spy(run, seen: list):
    """``RayExecutor.run`` that notes the jobs it is given."""

    def spied(self, fn, jobs, *args, **kwargs):
        seen.extend(jobs)
        return run(self, fn, jobs, *args, **kwargs)

    return spied


@pytest.mark.parametrize(
    "args, message",
    [
        (["data", "pack", "S", "--out", "O", "--workers", "2", "--ray"], "--workers is for local processes"),
        (["data", "pack", "S", "--out", "O", "--ray-cpus", "2"], "only apply with --ray"),
        (["data", "ingest", "S", "--out", "O", "--ray-parts", "3"], "only apply with --ray"),
        (["sweep", "S.toml", "--gpus-per-run", "1"], "need --ray"),
        (["sweep", "S.toml", "--procs-per-run", "2", "--dry-run"], "need --ray"),  # a dry run too
    ],
)
def test_ray_options_that_cannot_apply_are_one_line(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_only_as_many_shards_as_the_cluster_runs_are_submitted(cluster, tmp_path, monkeypatch):
    """Shards are not left in Ray's own queue: cancelling a queued task as Ray handed it to a worker
    ended the whole driver process inside Ray (exit 1, no message, no cleanup; seen after an
    interrupt). With a window of one, the shards run one after another, and after an interrupt at
    the first result no other shard was ever started."""

    def _timed_job(i, log, _):  # defined here: Ray pickles it whole (the test module is not importable)
        import time

        (Path(log) / f"{i}.start").write_text(repr(time.time()))
        time.sleep(0.3)
        (Path(log) / f"{i}.end").write_text(repr(time.time()))
        return {"n_docs": 1}

    monkeypatch.setattr(on_ray, "submit_window", lambda ray, cpus: 1)
    log = tmp_path / "log"
    log.mkdir()
    jobs = [(i, str(log)) for i in range(4)]
    RayExecutor(address=cluster).run(_timed_job, jobs, 4, lambda stats, bar: None, progress=False)
    spans = sorted(
        (float((log / f"{i}.start").read_text()), float((log / f"{i}.end").read_text())) for i in range(4)
    )
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))

    finished = on_ray.as_completed

    def first_then_interrupt(*args, **kwargs):
        for item in finished(*args, **kwargs):
            yield item
            raise KeyboardInterrupt

    again = tmp_path / "again"
    again.mkdir()
    monkeypatch.setattr(on_ray, "as_completed", first_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        RayExecutor(address=cluster).run(
            _timed_job, [(i, str(again)) for i in range(4)], 4, lambda s, b: None, progress=False
        )
    assert sorted(p.name for p in again.iterdir()) == ["0.end", "0.start"]


def test_files_cut_with_doc_start_give_the_same_store_on_ray(cluster, corpus, tmp_path):
    from contextlab.data.sources import SourceOptions

    config = IngestConfig(source=SourceOptions(doc_start=r"[A-Z][A-Za-z ]+:$"))  # a speaker opens a document
    local = ingest(corpus, tmp_path / "local", config, progress=False).store
    parts = in_parts(RayExecutor(address=cluster), 4)
    on_ray = ingest(corpus, tmp_path / "ray", config, progress=False, store_documents=parts).store
    assert tree_digest(on_ray.path) == tree_digest(local.path)
    stats = on_ray.meta["source_stats"]
    assert on_ray.n_docs > 18 and stats["doc_start_cut"] + stats["doc_start_uncut"] == 19  # and empty.txt
    assert stats == local.meta["source_stats"]
