"""tests/fixtures is what its README says: verbatim copies keep their sources' hashes, every file is listed.

Trade-off: only hashes recorded inside the repository are checked here (no ../shared needed);
scripts/check_fixtures.py rebuilds every fixture from the real data sets and compares all bytes.
"""

from __future__ import annotations

import hashlib

import pytest

from tests.conftest import FIXTURES, GPT2_DIR, SHAKESPEARE, WIKI_TEST, golden_corpus, read_gz_text

# sha256 of Tiny Shakespeare's first 100,000 bytes: the golden run's corpus since the golden file was written
GOLDEN_CORPUS_SHA256 = "caad989adf87f2482e346c9a77d1fb03c6c033aa8689e2e97aee2de90b0f8839"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    "data, source",
    [
        (lambda: SHAKESPEARE.read_bytes(), SHAKESPEARE.with_name("SOURCE.txt")),
        (lambda: (GPT2_DIR / "encoder.json").read_bytes(), GPT2_DIR / "SOURCE.txt"),
        (lambda: (GPT2_DIR / "vocab.bpe").read_bytes(), GPT2_DIR / "SOURCE.txt"),
        (lambda: read_gz_text(WIKI_TEST).encode("utf-8"), WIKI_TEST.with_name("SOURCE.txt")),
    ],
    ids=["tinyshakespeare", "encoder.json", "vocab.bpe", "wiki.test.raw"],
)
def test_verbatim_copies_have_the_hash_their_source_states(data, source):
    assert sha256(data()) in source.read_text(encoding="utf-8")


def test_golden_corpus_is_unchanged(tmp_path):
    path = golden_corpus(tmp_path)
    assert path.name == "tinyshakespeare_100k.txt" and sha256(path.read_bytes()) == GOLDEN_CORPUS_SHA256


def test_every_fixture_file_is_in_the_readme():
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    files = [p for p in FIXTURES.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    missing = [
        p.relative_to(FIXTURES).as_posix() for p in files if p.relative_to(FIXTURES).as_posix() not in readme
    ]
    assert len(files) > 15 and not [m for m in missing if m != "README.md"], missing
