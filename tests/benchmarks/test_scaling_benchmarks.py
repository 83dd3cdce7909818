"""The scaling benchmarks' corpus sampler (seeded, real units) and a toy run of pack_scaling / ingest_scaling
(books and code written in tmp_path; timings are never asserted)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import subprocess
import sys

import pytest

from tests.conftest import REPO, write_tree


def _sampler():
    spec = importlib.util.spec_from_file_location("corpus_sampler", REPO / "benchmarks" / "corpus_sampler.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("corpus_sampler", mod)  # dataclasses look their module up there
    spec.loader.exec_module(sys.modules["corpus_sampler"])
    return sys.modules["corpus_sampler"]


BOOK = "\n\n".join(
    f"Paragraph {i} of the tale: the {w} walked past the mill and spoke of rivers and stones."
    for i, w in enumerate(["miller", "baker", "sailor", "weaver", "smith", "tailor"] * 4)
)
CODE = """
def top(a, b):
    return a + b


class Box:
    def put(self, x):
        self.x = x

    def get(self):
        return self.x


class Empty:
    pass
"""


@pytest.fixture
def sources(tmp_path):
    books = tmp_path / "books"
    header = "*** START OF THE PROJECT GUTENBERG EBOOK TALE ***\n"
    footer = "\n*** END OF THE PROJECT GUTENBERG EBOOK TALE ***\nlicence text\n"
    write_tree(books, {"tale.txt": header + BOOK + footer, "other.txt": BOOK.replace("tale", "song")})
    code = tmp_path / "code"
    write_tree(code, {"pkg/mod.py": CODE, "pkg/broken.py": "def broken(:\n", "site-packages/x.py": CODE})
    return books, code


def test_units_are_real_paragraphs_and_functions(sources):
    cs = _sampler()
    books, code = sources
    tale = next(s for s in cs.book_sources(books) if s.name == "tale.txt")
    assert len(tale.units) == 24 and tale.units[0].startswith("Paragraph 0 of the tale")
    assert all("licence" not in u and "GUTENBERG" not in u for u in tale.units)  # header and footer cut
    (mod,) = cs.code_sources(code)  # broken.py does not parse, site-packages is left out
    assert mod.name == "pkg/mod.py"
    assert [u.split("(")[0].split(":")[0].strip() for u in mod.units] == [
        "def top",
        "def put",
        "def get",
        "class Empty",
    ]
    assert list(mod.words) == [len(u.split()) for u in mod.units]


def test_sampling_is_deterministic_by_seed_and_draws_from_the_sources(sources):
    cs = _sampler()
    pools = cs.default_pools(*sources)
    a = list(itertools.islice(cs.iter_docs(pools, seed=3, min_words=5, max_words=30), 60))
    b = list(itertools.islice(cs.iter_docs(pools, seed=3, min_words=5, max_words=30), 60))
    c = list(itertools.islice(cs.iter_docs(pools, seed=4, min_words=5, max_words=30), 60))
    assert a == b and a != c
    assert {d["source"] for d in a} == {"tale.txt", "other.txt", "pkg/mod.py"}
    texts = {s.name: "\n".join(s.units) for pool in pools for s in pool}
    for d in a:  # a document is a run of consecutive lines of its source's units
        lines = [x for x in d["text"].split("\n") if x.strip()]
        src = [x for x in texts[d["source"]].split("\n") if x.strip()]
        start = src.index(lines[0])
        assert src[start : start + len(lines)] == lines
        assert len(d["text"].split()) <= 30 + max(len(x.split()) for x in src)


def test_write_corpus_counts_documents_bytes_and_duplicates(sources, tmp_path):
    cs = _sampler()
    pools = cs.default_pools(*sources)
    out = tmp_path / "c" / "docs.jsonl"
    info = cs.write_corpus(out, cs.iter_docs(pools, 0), n_docs=50, progress=False)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert info["docs"] == len(rows) == 50
    assert info["text_bytes"] == sum(len(r["text"].encode()) for r in rows)
    assert info["duplicates"] == 50 - len({r["text"] for r in rows})
    assert [p.name for p in out.parent.iterdir()] == ["docs.jsonl"]  # no temporary file left
    info = cs.write_corpus(tmp_path / "b.jsonl", cs.iter_docs(pools, 0), n_bytes=2000, progress=False)
    assert 2000 <= info["text_bytes"] < 2000 + max(len(r["text"].encode()) for r in rows) + 200
    assert (tmp_path / "b.jsonl").read_text().splitlines()[:3] == out.read_text().splitlines()[:3]


def _bench(args: list[str]) -> tuple[dict, str]:
    res = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stdout


def test_pack_scaling_fixed_shards_keys_and_resume(sources, tmp_path):
    books, code = sources
    args = [
        "benchmarks/pack_scaling.py",
        "--work",
        str(tmp_path / "w"),
        "--sizes",
        "90",
        "--shard-docs",
        "40",
    ]
    args += ["--dense-sizes", "", "--tokenizer", "byte", "--books", str(books), "--code", str(code)]
    out, _ = _bench([*args, "--no-progress"])
    assert {"docs_per_s_10k", "docs_per_s_1m", "ratio_vs_raw_bm25s", "peak_rss_mb", "sizes"} <= set(out)
    row = out["sizes"]["90"]
    assert row["n_shards"] == math.ceil(90 / 40) == 3
    assert {"pack", "raw_bm25s"} <= set(row) and row["pack"]["peak_rss_mb"] > 0
    saved = json.loads((tmp_path / "w" / "result_90.json").read_text())
    meta = json.loads((tmp_path / "w" / "packed_pack_90" / "meta.json").read_text())
    assert len(meta["shards"]) == 3 and sum(s["n_docs"] for s in meta["shards"]) == 90
    assert saved["corpus"]["docs"] == 90 and saved["n_docs"] == 90
    again, stdout = _bench([*args, "--no-progress"])  # a re-run skips the finished size
    assert "done before" in stdout and again["sizes"] == out["sizes"]
    sampled, _ = _bench([*args, "--no-progress", "--max-shards", "2"])  # shards 0 and 2 of 3, measured again
    assert sampled["sizes"]["90"]["sampled_shards"] == [0, 2]
    saved = json.loads((tmp_path / "w" / "result_90.json").read_text())
    middle = meta["shards"][1]["n_docs"]
    assert saved["pack"]["docs"] == saved["raw_bm25s"]["docs"] == 90 - middle


def test_ingest_scaling_reports_rate_and_memory(sources, tmp_path):
    books, code = sources
    args = ["benchmarks/ingest_scaling.py", "--work", str(tmp_path / "w"), "--sizes-mb", "0.01,0.02"]
    out, _ = _bench(
        [*args, "--tokenizer", "byte", "--books", str(books), "--code", str(code), "--no-progress"]
    )
    assert set(out["sizes"]) == {"0.01", "0.02"} and out["rss_ratio_max_vs_min"] > 0
    assert out["sizes"]["0.02"]["mb_read"] >= 0.02 and out["sizes"]["0.01"]["mb_per_s"] > 0
