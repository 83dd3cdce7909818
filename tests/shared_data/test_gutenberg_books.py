"""All 127 Project Gutenberg books of ../shared/data: the bodies open_source strips equal the manifest's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextlab.data.sources import SourceOptions, open_source

pytestmark = pytest.mark.shared_data


def test_gutenberg_all_books_match_manifest(shared_data: Path):
    books = shared_data / "gutenberg_books"
    manifest = [json.loads(line) for line in (books / "manifest.jsonl").read_text().splitlines()]
    src = open_source(books / "texts", SourceOptions(strip_gutenberg="yes"))
    bodies = {d.meta["path"]: d.text for d in src}
    assert len(manifest) == 127 == len(bodies) == src.stats.gutenberg_stripped
    for m in manifest:
        text = (books / m["file"]).read_bytes().decode("utf-8")
        assert bodies[Path(m["file"]).name] == text[m["body_start_char"] : m["body_end_char"]], m["file"]
