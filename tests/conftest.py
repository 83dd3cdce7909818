"""Shared test helpers: the repository's own fixture files, and tiny corpora in tmp_path.

Every file a test reads lives in this repository (tests/fixtures, see its README), so a fresh
clone tests with nothing beside it; no test reads the data folder outside it. Trade-off: the fixtures are
small cuts of the real data sets, rebuilt and checked byte for byte against them by
scripts/check_fixtures.py (make check-fixtures, run by CI).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

# progress bars off a terminal write a line a minute (contextlab.bars); a test's captured output stays
# as it was without them (tests/test_bars.py turns them on for itself)
os.environ.setdefault("CONTEXTLAB_PROGRESS_SECONDS", "0")

if os.environ.get("PYTEST_XDIST_WORKER"):  # one of several test processes: one CPU thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # read by torch here and by every command a test starts
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: a process per core, at most 4 (each holds torch and tiny models; the Ray tests start
    a local cluster each)."""
    return max(1, min(4, os.cpu_count() or 1))


REPO = Path(__file__).resolve().parents[1]


def _untracked() -> set[str] | None:
    """The repository's files git neither tracks nor ignores (None where git cannot say)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "ls-files", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return set(out.splitlines())


def pytest_sessionstart(session) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        session.config._contextlab_untracked = _untracked()


def pytest_sessionfinish(session, exitstatus) -> None:
    """A test that writes into the working directory instead of tmp_path fails the run: two files a test
    left in the repository's root were once committed with it."""
    before = getattr(session.config, "_contextlab_untracked", None)
    after = _untracked() if before is not None else None
    if after is None:
        return
    new = sorted(after - before)
    if new:
        print(f"\nthe tests left files in the repository (write them under tmp_path): {', '.join(new)}")
        session.exitstatus = 1


FIXTURES = REPO / "tests" / "fixtures"  # small files the tests read (see its README)
SHAKESPEARE = FIXTURES / "tinyshakespeare" / "input.txt"  # char-rnn Tiny Shakespeare, 1,115,394 bytes
GPT2_FIXTURE = FIXTURES / "gpt2_tokenizer"  # OpenAI GPT-2 encoder.json.gz + vocab.bpe, as committed
KV_75 = FIXTURES / "lost_in_the_middle" / "kv-retrieval-75_keys.first2.jsonl.gz"  # first 2 examples
TREC = FIXTURES / "trec_qc"  # train.txt (100 lines) and test.txt (10 lines)
WIKI_TEST = FIXTURES / "wikitext2_raw_test" / "wiki.test.raw.gz"  # WikiText-2 raw test split
GOLDEN_CHARS = 100_000  # the golden run's corpus: the first 100,000 bytes of Tiny Shakespeare


def unpacked_gpt2(fixture: Path = GPT2_FIXTURE) -> Path:
    """GPT-2's tokenizer folder as its loaders read it (encoder.json, vocab.bpe, SOURCE.txt). The
    fixture keeps encoder.json gzipped (a third of the size); it is unpacked once per content into
    the temp dir, under a name made from the fixture's hash, and renamed into place whole, so
    concurrent test processes never see half a folder."""
    parts = [(fixture / n).read_bytes() for n in ("encoder.json.gz", "vocab.bpe", "SOURCE.txt")]
    key = hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"contextlab-tests-gpt2-{key}"
    if not folder.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        for name, data in zip(
            ("encoder.json", "vocab.bpe", "SOURCE.txt"), (gzip.decompress(parts[0]), *parts[1:])
        ):
            (tmp / name).write_bytes(data)
        try:
            tmp.rename(folder)
        except OSError:  # another process put it there first
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


GPT2_DIR = unpacked_gpt2()  # the folder `gpt2:DIR` specs and the BPE loaders are given


def shakespeare(n: int | None = None) -> str:
    """The first ``n`` characters of Tiny Shakespeare (all of it when None); ASCII, LF line ends."""
    return SHAKESPEARE.read_text(encoding="utf-8")[:n]


def golden_corpus(folder: Path) -> Path:
    """Write the golden run's corpus (Tiny Shakespeare's first 100,000 bytes) to folder; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tinyshakespeare_100k.txt"
    path.write_bytes(SHAKESPEARE.read_bytes()[:GOLDEN_CHARS])
    return path


def read_gz_text(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode("utf-8")


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create ``files`` (relative path -> text or bytes) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode("utf-8"))
    return root


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (Linux /proc: a zombie counts as dead, only unreaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def save_tiny_llama(folder: Path, *, vocab: int, layers: int, chars: int, positions: int = 512) -> Path:
    """A random-weight Hugging Face Llama (width 32, seed 0) saved with ``save_pretrained`` into ``folder``,
    beside the tokenizer.json of contextlab's byte-level BPE (``train_bpe``) of ``vocab`` ids trained on the
    first ``chars`` of Tiny Shakespeare: a model folder as a user brings one, made without a download."""
    import torch
    import transformers

    from contextlab.data.hf_tokenizer import train_bpe

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=positions,
    )
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)
    with tempfile.TemporaryDirectory() as tmp:
        train_bpe([shakespeare(chars)], vocab).save(tmp)
        shutil.copy(Path(tmp) / "tokenizer.json", Path(folder) / "tokenizer.json")
    return Path(folder)
