"""tests/fixtures against ../shared/data: rebuilt byte for byte; the cut files give the full files' results.

Trade-off: a rebuild reads all 127 books (a few seconds), which is why it is opt-in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contextlab.eval import icl, kv
from tests.conftest import FIXTURES, KV_75, TREC
from tests.eval.conftest import byte_adapter, tiny_gpt
from tests.fixtures.build_fixtures import build

pytestmark = pytest.mark.shared_data
NOT_BUILT = {"README.md", "build_fixtures.py"}


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in NOT_BUILT and "__pycache__" not in p.parts
    }


def test_fixtures_rebuild_byte_for_byte(shared_data: Path, tmp_path: Path):
    build(shared_data, tmp_path)
    built, committed = files(tmp_path), files(FIXTURES)
    assert sorted(built) == sorted(committed)
    for name, data in built.items():
        assert committed[name] == data, f"tests/fixtures/{name} differs from what build_fixtures.py makes"


def test_cut_kv_and_trec_give_the_full_files_results(shared_data: Path):
    full_kv = shared_data / "lost_in_the_middle" / "kv-retrieval-75_keys.jsonl.gz"
    assert kv.read_examples(KV_75) == kv.read_examples(full_kv)[:2]
    adapter = byte_adapter(tiny_gpt(7, block_size=128), batch_size=6)
    full_trec = shared_data / "trec_qc"
    for k in (2, 4):  # the draws tests/eval/test_tasks.py makes: the same shots as from the full file
        cut, full = (
            icl.build_prompts(
                adapter, icl.read_trec(d / "train.txt"), icl.read_trec(d / "test.txt")[:6], k, 0
            )
            for d in (TREC, full_trec)
        )
        assert [s.prompt for s in cut] == [s.prompt for s in full]
    o = icl.Options(shots=[0, 2], n_test=6, seeds=1)
    assert icl.run(adapter, o, str(TREC)).results == icl.run(adapter, o, str(full_trec)).results
