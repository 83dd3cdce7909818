"""The shard engine's contract (``contextlab.data.shards``): a shard whose done marker does not
check out is named and run again, finished shards are skipped, and where the shards run (this
process, a spawned pool) does not change a byte of the result: shown on a toy job, and on
ingest parts, which run on the same executors as pack shards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import contextlab.data.ingest_parts as ingest_parts
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.ingest_parts import in_parts
from contextlab.data.shards import LocalExecutor, ShardedJob, finished_stats, shards_to_run
from contextlab.data.shards.done_markers import (
    arrays_checksum,
    check_record,
    done_record,
    files_checksum,
    read_json_marker,
    write_json_marker,
)
from contextlab.errors import UserError
from contextlab.io import tree_digest
from tests.conftest import shakespeare, write_tree

FP = "fingerprint-of-the-toy-job"


def square_shard(folder: str, index: int, values: list[int], fingerprint: str, count=None) -> dict:
    """A toy shard function: its output is the squares of its values, then its done marker."""
    out = Path(folder) / f"out_{index}.txt"
    out.write_text(" ".join(str(v * v) for v in values))
    if count is not None:
        count(len(values))
    stats = {"shard": index, "n_docs": len(values)}
    write_json_marker(
        Path(folder) / f"out_{index}.json", done_record(fingerprint, stats, files_checksum([out]))
    )
    return stats


def toy_job(folder: Path) -> ShardedJob:
    def check(i: int, checksum: bool):
        record, why = read_json_marker(folder / f"out_{i}.json")
        if record is None:
            return None, why
        sums = (lambda: files_checksum([folder / f"out_{i}.txt"])) if checksum else None
        return check_record(record, FP, {"shard": i}, sums)

    return ShardedJob(fn=square_shard, check=check, marker=lambda i: folder / f"out_{i}.json", verb="square")


INPUTS = [[1, 2], [3, 4, 5], [6]]


def run_toy(folder: Path, say=print) -> list[int]:
    job = toy_job(folder)
    todo = shards_to_run(job, list(range(len(INPUTS))), say)
    job.run(LocalExecutor(1), [(str(folder), i, INPUTS[i], FP) for i in todo], None, lambda s, b: None, False)
    return todo


def test_finished_shards_are_skipped_and_a_marker_that_does_not_check_out_is_named_and_redone(tmp_path):
    assert run_toy(tmp_path) == [0, 1, 2]
    want = {i: (tmp_path / f"out_{i}.txt").read_text() for i in range(3)}
    assert want[1] == "9 16 25"
    assert run_toy(tmp_path) == []  # every marker checks out: nothing runs
    (tmp_path / "out_1.txt").write_text("9 16 26")  # the output changed after its marker was written
    (tmp_path / "out_2.json").write_text((tmp_path / "out_0.json").read_text())  # another shard's marker
    said: list[str] = []
    assert run_toy(tmp_path, said.append) == [1, 2]
    assert said == [
        "shard 2: out_1.json is not usable (its files do not match the checksum written with them); "
        "squaring it again",  # counted from 1 in words, as the lines about finished shards count them
        "shard 3: out_2.json is not usable (holds shard 1, not this one); squaring it again",
    ]
    assert {i: (tmp_path / f"out_{i}.txt").read_text() for i in range(3)} == want
    stats = finished_stats(toy_job(tmp_path), [0, 1, 2], tmp_path)
    assert [s["n_docs"] for s in stats] == [2, 3, 1]


def test_a_marker_of_another_run_or_unreadable_or_missing_is_not_done(tmp_path):
    run_toy(tmp_path)
    record = json.loads((tmp_path / "out_0.json").read_text())
    assert check_record(record, "another fingerprint", {"shard": 0})[1] == (
        "written by a run with another config or input"
    )
    (tmp_path / "out_1.json").write_text('{"fingerprint": "cut sho')  # a torn write
    (tmp_path / "out_2.json").unlink()
    job = toy_job(tmp_path)
    assert job.check(1, True) == (None, "unreadable (JSONDecodeError)")
    assert job.check(2, True) == (None, None)  # never finished: run, without a line about it
    with pytest.raises(
        UserError, match=r"^shard 2 of .* \(out_1\.json\) is unreadable \(JSONDecodeError\); run the same"
    ):
        finished_stats(job, [0, 1, 2], tmp_path)


def test_checksums_see_names_dtypes_shapes_bytes_and_missing_files(tmp_path):
    a = {"x": np.arange(6, dtype=np.int64)}
    assert arrays_checksum(a) == arrays_checksum({"x": np.arange(6, dtype=np.int64)})
    assert arrays_checksum(a) != arrays_checksum({"x": np.arange(6, dtype=np.int32)})
    assert arrays_checksum(a) != arrays_checksum({"x": np.arange(6, dtype=np.int64).reshape(2, 3)})
    assert arrays_checksum(a) != arrays_checksum({"y": np.arange(6, dtype=np.int64)})
    (tmp_path / "f").write_bytes(b"")
    assert files_checksum([tmp_path / "f"]) != files_checksum([tmp_path / "missing"])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    text = shakespeare(30_000)
    files = {
        f"{d}/f{i}.txt": text[(k := 5 * i + 2 * j) * 700 : k * 700 + 500 + 50 * i]
        for j, d in enumerate("ab")
        for i in range(5)
    }
    return write_tree(tmp_path_factory.mktemp("corpus"), files)


@pytest.fixture(scope="module")
def one_process(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "store"
    ingest(corpus, out, IngestConfig(), progress=False)
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_ingest_parts_in_this_process_or_a_pool_equal_the_one_process_ingest(
    corpus, one_process, tmp_path, workers
):
    parts = in_parts(LocalExecutor(workers), 3)
    store = ingest(corpus, tmp_path / "store", IngestConfig(), progress=False, store_documents=parts).store
    assert tree_digest(store.path) == tree_digest(one_process)


def test_an_ingest_part_whose_files_changed_is_ingested_again_from_scratch(
    corpus, one_process, tmp_path, monkeypatch, capsys
):
    parts, out = in_parts(LocalExecutor(1), 3), tmp_path / "store"

    def stop(*args):
        raise KeyboardInterrupt  # killed once every part is done, before they are put together

    monkeypatch.setattr(ingest_parts, "_assemble", stop)
    with pytest.raises(KeyboardInterrupt):
        ingest(corpus, out, IngestConfig(), progress=False, store_documents=parts)
    monkeypatch.undo()
    tokens = tmp_path / "store.partial" / "parts" / "part_00001" / "tokens.bin"
    blob = bytearray(tokens.read_bytes())
    blob[3] ^= 1  # one id changed in place, the size the same: only the checksum can tell
    tokens.write_bytes(bytes(blob))
    capsys.readouterr()
    ingest(corpus, out, IngestConfig(), progress=True, store_documents=parts)
    said = capsys.readouterr().out
    assert (
        "part 2: part_00001.json is not usable (its files do not match the checksum written with them); "
        "ingesting it again" in said
    )
    assert "resuming ingest: 2 of 3 part(s) already ingested" in said
    assert tree_digest(out) == tree_digest(one_process)


def _slow_start(marks: list, count=None) -> dict:
    """A shard that works a while before its first unit (a dense shard embedding), then counts."""
    import time

    time.sleep(0.3)
    marks.append(time.time())
    count(5)
    return {"n_docs": 5}


def test_the_bar_is_timed_from_the_first_unit_done(monkeypatch):
    """A dense packing's bar counted its minutes of embedding into the rate (37 min left was said, 2.4
    taken): the clock starts at the first document packed."""
    import contextlab.data.shards.local_pool as local_pool

    bars = []
    real = local_pool.progress_bar

    def kept(*args, **kwargs):
        bars.append(real(*args, **kwargs))
        return bars[-1]

    monkeypatch.setattr(local_pool, "progress_bar", kept)
    monkeypatch.setenv("CONTEXTLAB_PROGRESS_SECONDS", "60")  # off a terminal: a line a minute, a live bar
    marks: list[float] = []
    LocalExecutor(1).run(_slow_start, [(marks,)], 5, lambda stats, bar: None, progress=True)
    (bar,) = bars
    assert bar.n == 5 and bar.start_t >= marks[0]  # not the bar's creation, 0.3 s before


def _slow_shard(i: int, marks: str, count) -> dict:
    """Shard ``i``: the first returns at once, the others write their mark after 4 s."""
    import time

    if i:
        time.sleep(4)
        (Path(marks) / f"shard_{i}").write_text("done")
    return {"i": i}


def test_an_interrupt_stops_the_running_shards_of_a_pool(tmp_path):
    """SIGTERM to `data pack --workers 2`: the pool waited for the running shards and the one queued
    behind them, so 3 shards were written after the signal and the log named one."""
    from contextlab.data.shards.local_pool import run_in_pool

    class Bar:
        n = 0

        def update(self, k):
            pass

    def interrupt(stats, bar):
        raise KeyboardInterrupt  # as the CLI's SIGTERM handler raises, at the first shard reported

    with pytest.raises(KeyboardInterrupt):
        run_in_pool(_slow_shard, [(i, str(tmp_path)) for i in range(6)], 2, interrupt, Bar(), "pack")
    import time

    time.sleep(6)  # a shard left running would have written its mark by now
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_ingest_in_parts_stopped_by_a_one_line_error_keeps_its_finished_parts(
    corpus, one_process, tmp_path, monkeypatch, capsys
):
    # A worker killed for memory ends with "the shards already finished are kept: run the same
    # command again"; the ingest then deleted OUT.partial, finished parts and all.
    parts, out = in_parts(LocalExecutor(1), 3), tmp_path / "store"
    real = ingest_parts.ingest_part

    def dies_on_the_third(*job):
        if job[3] == 2:
            raise UserError(
                "a worker process died before its shard was finished; the shards already finished are kept"
            )
        return real(*job)

    monkeypatch.setattr(ingest_parts, "ingest_part", dies_on_the_third)
    with pytest.raises(UserError, match="already finished are kept"):
        ingest(corpus, out, IngestConfig(), progress=False, store_documents=parts)
    monkeypatch.undo()
    records = tmp_path / "store.partial" / "parts"
    assert sorted(p.name for p in records.glob("part_*.json")) == ["part_00000.json", "part_00001.json"]
    capsys.readouterr()
    ingest(corpus, out, IngestConfig(), progress=True, store_documents=parts)
    assert "resuming ingest: 2 of 3 part(s) already ingested" in capsys.readouterr().out
    assert tree_digest(out) == tree_digest(one_process)


def test_an_ingest_in_parts_that_filters_out_every_document_leaves_nothing_to_refuse_a_rerun(
    corpus, tmp_path
):
    # As the one-process ingest: nothing worth resuming is kept, so the rerun with relaxed filters
    # is not refused as "an ingest of a different config" of an empty partial store.
    parts, out = in_parts(LocalExecutor(1), 3), tmp_path / "store"
    with pytest.raises(UserError, match="no documents left .* relax the filters"):
        ingest(corpus, out, IngestConfig(min_tokens=10**9), progress=False, store_documents=parts)
    assert not (tmp_path / "store.partial").exists()
    store = ingest(corpus, out, IngestConfig(), progress=False, store_documents=parts).store
    assert store.n_docs > 0


def test_a_part_whose_documents_are_all_filtered_out_is_put_together_as_an_empty_part(corpus, tmp_path):
    # Assembling a part with no documents mapped its empty offsets file: "cannot mmap an empty file".
    from contextlab.data.sources import open_source

    groups = ingest_parts.split_files(open_source(corpus, IngestConfig().source), 3)
    sizes = [[path.stat().st_size for _, path in group] for group in groups]
    config = IngestConfig(min_tokens=max(sizes[0]) + 1)  # the byte tokenizer: a token per byte
    assert any(n >= config.min_tokens for group in sizes[1:] for n in group)
    one = ingest(corpus, tmp_path / "one", config, progress=False).store
    parts = in_parts(LocalExecutor(1), 3)
    store = ingest(corpus, tmp_path / "store", config, progress=False, store_documents=parts).store
    assert store.n_docs == one.n_docs > 0
    assert tree_digest(store.path) == tree_digest(one.path)
