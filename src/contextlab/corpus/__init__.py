"""The default corpora, available on any machine with no downloads.

* ``books``: a few public-domain Project Gutenberg books shipped inside the package
  (header and footer removed; see ``books/PROVENANCE.json`` and
  ``scripts/build_embedded_corpus.py``), about 2.3 MB of English prose.
* ``stdlib``: the running Python's own standard library, a code corpus with real
  directory structure (packages such as ``email/``, ``asyncio/``), which is what
  repository-structure and within-domain packing need.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

BOOKS_DIR = Path(__file__).resolve().parent / "books"
STDLIB_INCLUDE = ["**/*.py"]
STDLIB_EXCLUDE = ["site-packages/**", "dist-packages/**", "**/__pycache__/**"]


def books_dir() -> Path:
    return BOOKS_DIR


def books_provenance() -> list[dict]:
    return json.loads((BOOKS_DIR / "PROVENANCE.json").read_text(encoding="utf-8"))


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])
