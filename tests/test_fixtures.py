"""tests/fixtures is what its README says: verbatim copies keep their sources' hashes, every file is listed.

Trade-off: only hashes recorded inside the repository are checked here (nothing outside the
repository needed);
scripts/check_fixtures.py rebuilds every fixture from the real data sets and compares all bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil

import pytest

from tests.conftest import (
    FIXTURES,
    GPT2_DIR,
    GPT2_FIXTURE,
    SHAKESPEARE,
    WIKI_TEST,
    golden_corpus,
    read_gz_text,
    unpacked_gpt2,
)

# sha256 of Tiny Shakespeare's first 100,000 bytes: the golden run's corpus since the golden file was written
GOLDEN_CORPUS_SHA256 = "caad989adf87f2482e346c9a77d1fb03c6c033aa8689e2e97aee2de90b0f8839"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    "data, source",
    [
        (lambda: SHAKESPEARE.read_bytes(), SHAKESPEARE.with_name("SOURCE.txt")),
        (
            lambda: gzip.decompress((GPT2_FIXTURE / "encoder.json.gz").read_bytes()),
            GPT2_FIXTURE / "SOURCE.txt",
        ),
        (lambda: (GPT2_FIXTURE / "vocab.bpe").read_bytes(), GPT2_FIXTURE / "SOURCE.txt"),
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


def test_the_gpt2_folder_the_tests_use_is_the_fixture_unpacked(tmp_path):
    """GPT2_DIR holds the committed files with encoder.json unpacked; unpacking again reuses the folder,
    and a changed fixture gets a folder of its own."""
    for name in ("vocab.bpe", "SOURCE.txt"):
        assert (GPT2_DIR / name).read_bytes() == (GPT2_FIXTURE / name).read_bytes()
    encoder = gzip.decompress((GPT2_FIXTURE / "encoder.json.gz").read_bytes())
    assert (GPT2_DIR / "encoder.json").read_bytes() == encoder
    assert unpacked_gpt2() == GPT2_DIR
    changed = shutil.copytree(GPT2_FIXTURE, tmp_path / "gpt2")
    (changed / "SOURCE.txt").write_text("another source\n")
    other = unpacked_gpt2(changed)
    try:
        assert other != GPT2_DIR and (other / "encoder.json").read_bytes() == encoder
    finally:
        shutil.rmtree(other)
