"""Fault injection for ingest sources: a SIGKILL inside a long document streamed through the
tokenizer, then the same command again, must give the store of an uninterrupted run."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from contextlab.data.store import TokenStore
from tests.conftest import GPT2_DIR, REPO, write_tree

# Patch the long-document stream to SIGKILL the process after `after` id pieces, then run the CLI.
KILLER = """
import os, signal, sys
import contextlab.data.ingest_long as il
real, after = il.stream_ids, int(sys.argv[1])
def dying(*a, **k):
    for i, ids in enumerate(real(*a, **k)):
        if i == after:
            os.kill(os.getpid(), signal.SIGKILL)
        yield ids
il.stream_ids = dying
from contextlab.cli import main
sys.exit(main(sys.argv[2:]))
"""


def corpus(root):
    rng = np.random.default_rng(3)
    words = ["context", "window", "über", "naïve", "—", "data", "  ", "x1"]
    files = {f"a{i}.txt": " ".join(rng.choice(words, size=200)) for i in range(6)}
    files["m_long.txt"] = " ".join(rng.choice(words, size=300_000))  # ~1.6 MB on one line
    files.update({f"z{i}.txt": " ".join(rng.choice(words, size=200)) for i in range(6)})
    return write_tree(root, files)


@pytest.mark.parametrize("after", [0, 7])
def test_kill_inside_a_streamed_long_document_then_resume(tmp_path, after):
    src = corpus(tmp_path / "c")
    args = ["data", "ingest", str(src), "--tokenizer", f"gpt2:{GPT2_DIR}", "--batch-mb", "0.002"]
    args += ["--long-doc-mb", "0.5", "--no-progress"]
    ref = subprocess.run(
        [sys.executable, "-m", "contextlab", *args, "--out", str(tmp_path / "ref")], cwd=REPO
    )
    assert ref.returncode == 0
    out = ["--out", str(tmp_path / "out")]
    killed = subprocess.run([sys.executable, "-c", KILLER, str(after), *args, *out], cwd=REPO)
    assert killed.returncode == -9
    record = (tmp_path / "out.partial" / "progress.json").read_text()
    assert '"n_docs": 6' in record  # the short files before it are committed, the long one is not
    again = subprocess.run([sys.executable, "-m", "contextlab", *args, *out], cwd=REPO, capture_output=True)
    assert again.returncode == 0, again.stderr
    a, b = TokenStore(tmp_path / "ref"), TokenStore(tmp_path / "out")
    assert (a.path / "tokens.bin").read_bytes() == (b.path / "tokens.bin").read_bytes()
    assert (a.path / "docs.jsonl").read_bytes() == (b.path / "docs.jsonl").read_bytes()
    assert a.hash == b.hash and a.n_docs == 13
    b.verify()


def test_ray_that_cannot_start_is_one_line(monkeypatch):
    """Robustness II item 15: `Exception: The current node timed out during startup` from Ray's init
    was a traceback; it is one line that says what to try."""
    import types

    import pytest

    import contextlab.ray_engine as engine
    from contextlab.errors import UserError

    def init(**kwargs):
        raise Exception(
            "The current node timed out during startup. This could happen because some of the Ray"
        )

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setattr(engine, "import_ray", lambda: fake)
    with pytest.raises(
        UserError, match=r"Ray could not start a local instance \(The current node timed out"
    ) as e:
        engine.connect(None)
    assert "\n" not in str(e.value) and "ray stop" in str(e.value)
    with pytest.raises(UserError, match="cannot reach the Ray cluster at 10.0.0.1:6379"):
        engine.connect("10.0.0.1:6379")
