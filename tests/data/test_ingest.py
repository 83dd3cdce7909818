"""Ingest: resume after a kill (real SIGKILL and a torn write), filters, refusals, tokenizers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.sources import SourceOptions
from contextlab.data.store import StoreWriter, TokenStore
from contextlab.errors import UserError
from tests.conftest import GPT2_DIR, REPO, write_tree


def make_corpus(root, n_files=60, size=3000, seed=0):
    rng = np.random.default_rng(seed)
    words = ["context", "window", "token", "loss", "model", "packing", "über", "naïve", "—", "data"]
    files = {}
    for i in range(n_files):
        text = " ".join(rng.choice(words, size=size // 6))
        files[f"d{i % 5}/f{i:04d}.txt"] = text
    return write_tree(root, files)


def same_store(a: TokenStore, b: TokenStore) -> None:
    assert (a.path / "tokens.bin").read_bytes() == (b.path / "tokens.bin").read_bytes()
    assert np.array_equal(a.offsets, b.offsets)
    assert (a.path / "docs.jsonl").read_bytes() == (b.path / "docs.jsonl").read_bytes()
    assert a.hash == b.hash and a.tokenizer_hash == b.tokenizer_hash


def test_torn_write_after_last_commit_is_dropped(tmp_path, monkeypatch):
    src = make_corpus(tmp_path / "c")
    cfg = IngestConfig(tokenizer="byte", batch_mb=0.01)
    ref = ingest(src, tmp_path / "ref", cfg, progress=False).store

    calls = {"n": 0}
    real_flush = StoreWriter.flush

    def dying_flush(self):
        calls["n"] += 1
        if calls["n"] == 4:  # batch 4 is written to the files but never committed
            raise KeyboardInterrupt
        return real_flush(self)

    monkeypatch.setattr(StoreWriter, "flush", dying_flush)
    with pytest.raises(KeyboardInterrupt):
        ingest(src, tmp_path / "out", cfg, progress=False)
    monkeypatch.setattr(StoreWriter, "flush", real_flush)
    partial = tmp_path / "out.partial"
    record = json.loads((partial / "progress.json").read_text())
    assert record["writer"]["n_docs"] > 0
    assert (partial / "tokens.bin").stat().st_size > record["writer"]["n_tokens"]  # torn tail present
    rep = ingest(src, tmp_path / "out", cfg, progress=False)
    assert rep.resumed_from_docs == record["source_pos"] > 0
    same_store(rep.store, ref)
    assert not partial.exists()


def test_resume_after_real_sigkill(tmp_path):
    src = make_corpus(tmp_path / "c", n_files=400, size=6000)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "contextlab",
        "data",
        "ingest",
        str(src),
        "--out",
        str(out),
        "--tokenizer",
        "byte",
        "--batch-mb",
        "0.005",
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    progress = out.with_name("out.partial") / "progress.json"
    deadline = time.time() + 60
    pos = 0
    while time.time() < deadline and proc.poll() is None:
        try:
            pos = json.loads(progress.read_text())["source_pos"]
        except (OSError, ValueError, KeyError):
            pos = 0
        if pos >= 40:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "ingest finished before it could be killed; make the corpus bigger"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists() and progress.exists()
    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming ingest" in resumed.stdout
    ref = ingest(src, tmp_path / "ref", IngestConfig(tokenizer="byte", batch_mb=0.005), progress=False).store
    same_store(TokenStore(out), ref)
    assert TokenStore(out).n_docs == 400


def test_length_filters_are_counted(tmp_path):
    src = write_tree(tmp_path / "c", {"a.txt": "x" * 5, "b.txt": "y" * 50, "c.txt": "z" * 500})
    rep = ingest(src, tmp_path / "s", IngestConfig(min_tokens=10, max_tokens=100), progress=False)
    assert rep.store.n_docs == 1 and rep.store.doc(0).tolist() == [ord("y")] * 50
    assert rep.skipped_short == 1 and rep.skipped_long == 1
    assert rep.store.meta["filters"]["skipped_short"] == 1
    with pytest.raises(UserError, match="no documents left"):
        ingest(src, tmp_path / "s2", IngestConfig(min_tokens=1000), progress=False)


def test_existing_output_rules(tmp_path):
    src = write_tree(tmp_path / "c", {"a.txt": "alpha", "b.txt": "beta"})
    first = ingest(src, tmp_path / "s", IngestConfig(), progress=False)
    again = ingest(src, tmp_path / "s", IngestConfig(), progress=False)
    assert again.up_to_date and again.store.hash == first.store.hash
    with pytest.raises(
        UserError, match=r"already holds a different token store \(the same source .* another setting"
    ):
        ingest(src, tmp_path / "s", IngestConfig(min_tokens=2), progress=False)
    with pytest.raises(UserError, match=r"different token store \(exclude \[\] there, \['b.txt'\] now\)"):
        ingest(src, tmp_path / "s", IngestConfig(source=SourceOptions(exclude=["b.txt"])), progress=False)
    other_src = write_tree(tmp_path / "c2", {"a.txt": "alpha"})
    with pytest.raises(UserError, match=r"different token store \(source .*c there, .*c2 now\)"):
        ingest(other_src, tmp_path / "s", IngestConfig(), progress=False)
    # the line named "its tokenizer" as a possible cause when the tokenizer is the same; it says which
    with pytest.raises(UserError, match=r"the same source .* and tokenizer \(byte\): its files differ"):
        ingest(src, tmp_path / "s", IngestConfig(min_tokens=2), progress=False)
    gpt2 = "gpt2:" + str(GPT2_DIR)
    with pytest.raises(UserError, match=r"its tokenizer differs: byte there, gpt2 now"):
        ingest(src, tmp_path / "s", IngestConfig(tokenizer=gpt2), progress=False)
    before = np.fromfile(tmp_path / "s" / "tokens.bin", dtype=np.uint16)
    assert bytes(before.astype(np.uint8)) == b"alphabeta"  # untouched by the refused run
    rep = ingest(src, tmp_path / "s", IngestConfig(min_tokens=5), overwrite=True, progress=False)
    assert rep.store.n_docs == 1 and not (tmp_path / "s.old").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    for overwrite in (False, True):  # --overwrite replaces a token store only, never the user's folder
        with pytest.raises(UserError, match="is not a token store; --overwrite replaces only a token store"):
            ingest(src, tmp_path / "other", IngestConfig(), overwrite=overwrite, progress=False)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_partial_of_a_different_source_is_refused(tmp_path, monkeypatch):
    src = make_corpus(tmp_path / "c", n_files=20)
    real_flush, calls = StoreWriter.flush, []

    def flush_then_die(self):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_flush(self)

    monkeypatch.setattr(StoreWriter, "flush", flush_then_die)
    with pytest.raises(KeyboardInterrupt):
        ingest(src, tmp_path / "out", IngestConfig(batch_mb=0.01), progress=False)
    monkeypatch.undo()
    with pytest.raises(UserError, match="unfinished ingest of a different source"):
        ingest(src, tmp_path / "out", IngestConfig(batch_mb=0.01, min_tokens=3), progress=False)
    # with --overwrite the unfinished run is discarded and the new one completes
    rep = ingest(
        src, tmp_path / "out", IngestConfig(batch_mb=0.01, min_tokens=3), overwrite=True, progress=False
    )
    assert rep.store.n_docs == 20 and rep.resumed_from_docs == 0


def test_failed_run_that_committed_nothing_does_not_block(tmp_path):
    write_tree(tmp_path / "c", {"bad.txt": b"\xff\xfe bad"})
    with pytest.raises(UserError, match="bad.txt"):
        ingest(tmp_path / "c", tmp_path / "s", progress=False)
    rep = ingest(
        tmp_path / "c", tmp_path / "s", IngestConfig(source=SourceOptions(encoding="replace")), progress=False
    )
    assert rep.store.n_docs == 1


def test_bpe_training_and_store_spec(tmp_path):
    src = make_corpus(tmp_path / "c", n_files=30)
    a = ingest(src, tmp_path / "a", IngestConfig(tokenizer="bpe:300"), progress=False).store
    tok = a.tokenizer()
    assert tok.vocab_size == 300 and a.tokenizer_spec["name"] == "bpe-300"
    text = (src / "d0" / "f0000.txt").read_text(encoding="utf-8")
    assert tok.decode(a.doc(0)) == text
    assert a.n_tokens < sum(len(tok.encode(t)) * 0 + len(t.encode()) for t in [text]) * 30  # compresses
    b = ingest(src / "d1", tmp_path / "b", IngestConfig(tokenizer=f"store:{a.path}"), progress=False).store
    assert b.tokenizer_hash == a.tokenizer_hash
    b.check_tokenizer(a.tokenizer_spec)


def test_gpt2_ids_in_store(tmp_path):
    src = write_tree(tmp_path / "c", {"h.txt": "Hello world"})
    s = ingest(src, tmp_path / "s", IngestConfig(tokenizer=f"gpt2:{GPT2_DIR}"), progress=False).store
    assert s.doc(0).tolist() == [15496, 995] and s.dtype == np.uint16


def test_bad_sources(tmp_path):
    with pytest.raises(UserError, match="not found"):
        ingest(tmp_path / "missing", tmp_path / "s", progress=False)
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01\x02binary\x00")
    with pytest.raises(UserError, match="not a text file"):
        ingest(tmp_path / "bin.dat", tmp_path / "s", progress=False)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "e.txt").write_text("")
    with pytest.raises(UserError, match="no documents"):
        ingest(tmp_path / "empty", tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def test_undecodable_bytes_are_reported(tmp_path):
    write_tree(tmp_path / "c", {"ok.txt": "fine", "bad.txt": b"caf\xe9 and \xff\xfe"})
    with pytest.raises(UserError, match="bad.txt"):
        ingest(tmp_path / "c", tmp_path / "s", progress=False)
    rep = ingest(
        tmp_path / "c", tmp_path / "s", IngestConfig(source=SourceOptions(encoding="replace")), progress=False
    )
    assert rep.store.meta["source_stats"]["undecodable_bytes"] == 3
    assert rep.store.tokenizer().decode(rep.store.doc(0)) == "caf\ufffd and \ufffd\ufffd"


def test_dataset_dict_ingest_prints_its_splits_and_records_the_one_read(tmp_path, capsys):
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["ab", "cd", "ef"]})
    datasets.DatasetDict({"train": ds.select([0]), "test": ds}).save_to_disk(str(tmp_path / "dd"))
    capsys.readouterr()
    cfg = IngestConfig(source=SourceOptions(split="test"))
    store = ingest(tmp_path / "dd", tmp_path / "s", cfg, progress=False).store
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{tmp_path / 'dd'} is a DatasetDict with splits train (1 row), test (3 rows): "
        "ingesting test; --split NAME reads another"
    )
    assert [store.doc(i).tolist() for i in range(store.n_docs)] == [[97, 98], [99, 100], [101, 102]]
    assert store.meta["source"]["split"] == "test"
    default = ingest(tmp_path / "dd", tmp_path / "t", progress=False).store
    assert default.n_docs == 1 and default.meta["source"]["split"] == "train"


def test_a_field_no_row_has_leaves_nothing_in_the_way_of_the_fixed_command(tmp_path):
    rows = [{"text": f"row {i} " * 20, "cat": "ab"[i % 2]} for i in range(200)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    typo = IngestConfig(batch_mb=0.001, source=SourceOptions(domain_field="kat"))
    with pytest.raises(UserError, match=r"no row of .*c\.jsonl has a field 'kat' \(line 1 has: text, cat\)"):
        ingest(tmp_path / "c.jsonl", tmp_path / "s", typo, progress=False)  # batches were committed
    assert not (tmp_path / "s.partial").exists() and not (tmp_path / "s").exists()
    fixed = IngestConfig(batch_mb=0.001, source=SourceOptions(domain_field="cat"))
    store = ingest(tmp_path / "c.jsonl", tmp_path / "s", fixed, progress=False).store  # no --overwrite
    assert store.n_docs == 200 and [m["domain"] for m in store.docs_meta()][:3] == ["a", "b", "a"]


def test_partial_left_by_a_kill_inside_the_old_finalize_resumes(tmp_path, monkeypatch):
    """Earlier versions unlinked offsets.i64 before hashing and had no finalize.json: such a partial
    store said "damaged" on every rerun (with --overwrite too); now it resumes to the same store."""
    import contextlab.data.store_write as store_write

    src = make_corpus(tmp_path / "c", n_files=20)
    cfg = IngestConfig(batch_mb=0.01)
    ref = ingest(src, tmp_path / "ref", cfg, progress=False).store

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(store_write, "content_hash", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest(src, tmp_path / "out", cfg, progress=False)
    monkeypatch.undo()
    partial = tmp_path / "out.partial"
    (partial / "offsets.i64").unlink()  # the state the old finalize left
    (partial / "finalize.json").unlink()
    assert (partial / "offsets.npy").is_file() and (partial / "progress.json").is_file()
    rep = ingest(src, tmp_path / "out", cfg, overwrite=True, progress=False)
    same_store(rep.store, ref)
    assert not partial.exists()


def test_interrupted_finalize_of_another_config_is_not_discarded_silently(tmp_path, monkeypatch):
    import contextlab.data.store_write as store_write

    src = make_corpus(tmp_path / "c", n_files=10)
    real = store_write.replace_dir

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(store_write, "replace_dir", killed)  # finalized, not renamed yet
    with pytest.raises(KeyboardInterrupt):
        ingest(src, tmp_path / "out", IngestConfig(batch_mb=0.01), progress=False)
    monkeypatch.setattr(store_write, "replace_dir", real)
    with pytest.raises(UserError, match="unfinished ingest of a different source"):
        ingest(src, tmp_path / "out", IngestConfig(batch_mb=0.01, min_tokens=3), progress=False)
    rep = ingest(src, tmp_path / "out", IngestConfig(batch_mb=0.01), progress=False)
    assert rep.store.n_docs == 10 and not (tmp_path / "out.partial").exists()


def single_line(path, n_chars, seed=0):
    """A one-line text of about ``n_chars`` characters (words, odd spacing, non-ASCII)."""
    rng = np.random.default_rng(seed)
    words = ["context", "window", "  token", "über", "naïve—", "data\t", "x", "12345", "   "]
    text = " ".join(rng.choice(words, size=n_chars // 6))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return text


@pytest.mark.parametrize("spec", ["byte", f"gpt2:{GPT2_DIR}"])
def test_long_document_streamed_equals_whole_document(tmp_path, spec):
    from contextlab.data.source_files import LongText
    from contextlab.data.sources import open_source
    from contextlab.data.tokenizers import load_tokenizer

    text = single_line(tmp_path / "c" / "long.txt", 2_000_000)
    (tmp_path / "c" / "short.txt").write_text("short one")
    streamed = SourceOptions(long_doc_mb=0.3)
    assert isinstance(next(iter(open_source(tmp_path / "c", streamed))).text, LongText)
    cfg = IngestConfig(tokenizer=spec, batch_mb=0.2)
    whole = ingest(tmp_path / "c", tmp_path / "whole", cfg, progress=False).store
    cfg_s = IngestConfig(tokenizer=spec, batch_mb=0.2, source=streamed)
    got = ingest(tmp_path / "c", tmp_path / "streamed", cfg_s, progress=False)
    assert got.bytes_read == len(text.encode()) + len("short one")
    assert np.array_equal(got.store.doc(0), load_tokenizer(spec).encode_batch([text])[0])
    same_store(got.store, whole)
    # a streamed document outside the length filters is taken back out of the file
    n = len(got.store.doc(0))
    cut = IngestConfig(tokenizer=spec, batch_mb=0.2, max_tokens=n - 1, source=streamed)
    rep = ingest(tmp_path / "c", tmp_path / "cut", cut, progress=False)
    assert rep.skipped_long == 1 and rep.store.n_docs == 1 and rep.store.n_tokens == len(rep.store.doc(0))


def test_skipped_files_are_named_next_to_the_store(tmp_path):
    import gzip

    root = write_tree(tmp_path / "c", {"a.txt": "alpha", "d/b.txt": "beta", "bin.dat": b"\0\1"})
    (root / "bad.txt.gz").write_bytes(gzip.compress(b"x" * 100)[:-8] + b"garbage!")
    os.symlink("loop", root / "d" / "loop")
    os.symlink("a.txt", root / "again.txt")
    rep = ingest(root, tmp_path / "s", IngestConfig(source=SourceOptions(exclude=["d/loop"])), progress=False)
    assert [m["path"] for m in rep.store.docs_meta()] == ["a.txt", "d/b.txt"]
    lines = [json.loads(x) for x in (tmp_path / "s" / "skipped.jsonl").read_text().splitlines()]
    assert {e["path"]: e["reason"].split(" (")[0] for e in lines} == {
        "again.txt": "duplicate of a.txt",
        "bad.txt.gz": "unreadable: not a valid gzip file",
        "bin.dat": "binary",
        "d/loop": "symlink loop",
    }
    stats = rep.store.meta["source_stats"]
    assert (stats["skipped_unreadable"], stats["skipped_duplicates"], stats["skipped_symlinks"]) == (1, 1, 1)
    rep.store.verify()


def test_strict_encoding_names_all_bad_files_first_and_a_new_policy_needs_no_overwrite(tmp_path):
    files = {f"f{i:02d}.txt": f"file {i} " * 50 for i in range(30)}
    files.update({"f05.txt": b"caf\xe9", "f25.txt": b"\xff ok"})
    root = write_tree(tmp_path / "c", files)
    out = tmp_path / "s"
    cmd = [
        sys.executable,
        "-m",
        "contextlab",
        "data",
        "ingest",
        str(root),
        "--out",
        str(out),
        "--batch-mb",
        "0.0001",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0
    last = r.stderr.split("\n")[-2].split("\r")[-1]  # what the terminal shows on the last line
    assert (
        last.startswith("contextlab data ingest: error: 2 files in ")
        and "f05.txt (byte 3), f25.txt (byte 0)" in last
    )
    assert "Traceback" not in r.stderr
    r = subprocess.run([*cmd, "--encoding", "skip"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    store = TokenStore(out)
    assert store.n_docs == 28
    skipped = [json.loads(x) for x in (out / "skipped.jsonl").read_text().splitlines()]
    assert [e["path"] for e in skipped] == ["f05.txt", "f25.txt"]


def test_repo_retriever_warns_once_when_rows_have_no_paths(tmp_path, capsys):
    from contextlab.data.packing.retrievers import build_repo

    rows = [{"text": f"doc {i}", "file": f"repo/d{i % 2}/f{i}.py"} for i in range(4)]
    write_tree(tmp_path, {"code.jsonl": "".join(json.dumps(r) + "\n" for r in rows)})
    plain = ingest(tmp_path / "code.jsonl", tmp_path / "plain", progress=False).store
    build_repo(plain, np.arange(2), None)
    build_repo(plain, np.arange(2, 4), None)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "--path-field" in err
    cfg = IngestConfig(source=SourceOptions(path_field="file"))
    with_paths = ingest(tmp_path / "code.jsonl", tmp_path / "paths", cfg, progress=False).store
    assert [m["path"] for m in with_paths.docs_meta()] == [r["file"] for r in rows]
    assert [m["domain"] for m in with_paths.docs_meta()] == ["repo"] * 4
    build_repo(with_paths, np.arange(4), None)
    assert capsys.readouterr().err == ""


def test_error_mid_ingest_is_not_glued_to_the_progress_bar(tmp_path):
    lines = [json.dumps({"text": f"row {i} " * 40}) for i in range(40)] + ["{oops"]
    write_tree(tmp_path, {"rows.jsonl": "\n".join(lines) + "\n"})
    cmd = [sys.executable, "-m", "contextlab", "data", "ingest", str(tmp_path / "rows.jsonl")]
    r = subprocess.run(
        [*cmd, "--out", str(tmp_path / "s"), "--batch-mb", "0.001"], capture_output=True, text=True
    )
    assert r.returncode != 0 and "ingest:" in r.stderr  # the bar was drawn
    shown = r.stderr.split("\n")[-2].split("\r")[-1]  # what the terminal shows on the last line
    assert shown.startswith("contextlab data ingest: error: ") and "line 41 is not valid JSON" in shown


def test_an_ingest_that_keeps_no_document_leaves_nothing_to_resume(tmp_path):
    src = tmp_path / "c"
    src.mkdir()
    for i in range(5):
        (src / f"{i}.txt").write_text("short text " * (i + 1))
    with pytest.raises(UserError, match="no documents left .* relax the filters"):
        ingest(src, tmp_path / "s", IngestConfig(min_tokens=10_000), progress=False)
    assert not (tmp_path / "s.partial").exists() and not (tmp_path / "s").exists()
    rep = ingest(src, tmp_path / "s", IngestConfig(min_tokens=1), progress=False)  # no --overwrite needed
    assert rep.store.n_docs == 5


@pytest.mark.parametrize("tokenizer", ["byte", "bpe:300"])
def test_an_empty_corpus_is_named_as_such_whatever_the_tokenizer(tmp_path, tokenizer, capsys):
    """Robustness II item 18: with bpe:N, an empty corpus was reported as a bad tokenizer spec."""
    from contextlab.cli import main

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "empty.txt").write_text("")
    argv = [
        "data",
        "ingest",
        str(tmp_path / "corpus"),
        "--tokenizer",
        tokenizer,
        "--out",
        str(tmp_path / "s"),
    ]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # (bpe:N first says that it reads the text)
    assert "error: no documents in" in err[-1] and "tokenizer spec" not in err[-1], err
    assert [line for line in err if "error" in line] == err[-1:]


def test_an_ingest_names_the_files_it_could_not_read(tmp_path, capsys):
    """A corrupt archive among the inputs is named on the terminal with its reason (the summary gave
    only 'skipped (unreadable): 1'); excluded files are not listed there."""
    from contextlab.cli import main

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text('{"text": "hello"}\n')
    (tmp_path / "src" / "b.jsonl.gz").write_text("not gzip at all\n")
    out = tmp_path / "s"
    assert main(["data", "ingest", str(tmp_path / "src"), "--tokenizer", "byte", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  skipped (unreadable): 1" in lines
    said = [line for line in lines if line.startswith("  b.jsonl.gz: unreadable: not a valid gzip file")]
    assert len(said) == 1, lines


def test_an_ingest_refused_before_any_work_leaves_nothing_behind(tmp_path, capsys):
    """An empty source and a bad tokenizer spec end in one line and leave no OUT.partial (nothing a rerun
    could resume) and no lock file beside the output (a user's trial found both after every refusal)."""
    from contextlab.cli import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "t.txt").write_text("hello world, some text")
    assert main(["data", "ingest", str(tmp_path / "empty"), "--out", str(tmp_path / "a")]) == 2
    assert (
        main(
            [
                "data",
                "ingest",
                str(tmp_path / "t.txt"),
                "--tokenizer",
                "bpe:100",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no documents" in err[0] and "bpe:257 or more" in err[1], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "t.txt"]


def test_a_store_of_the_other_kind_is_named_with_what_reads_it(tmp_path):
    """A packed store where a token store is read (data info, evaluations) and the reverse (pack-stats):
    the one line says what the folder is and which command takes it."""
    from contextlab.data.packing import PackConfig, PackedStore, pack

    src = write_tree(tmp_path / "c", {"a.txt": "alpha " * 40, "b.txt": "beta " * 40})
    store = ingest(src, tmp_path / "s", IngestConfig(), progress=False).store
    packed = pack(store, tmp_path / "p", PackConfig(method="ep", context=31), progress=False).packed
    said = "it is a packed store: `contextlab data pack-stats` describes it"
    with pytest.raises(UserError, match=said) as err:
        TokenStore(packed.path)
    # its token store is named by its path, not by "meta.json's store.path"
    assert f"its token store ({store.path}) is what `data info`" in str(err.value)
    assert "store.path" not in str(err.value)
    with pytest.raises(UserError, match="it is a token store: `contextlab data info` describes it"):
        PackedStore(store.path)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)  # a training run's folder
    with pytest.raises(
        UserError, match="is a training run, not a contextlab token store; the store it trained"
    ):
        TokenStore(tmp_path / "run")


def test_file_names_that_are_not_utf8_are_ingested_with_their_bytes_escaped(tmp_path):
    """A source file whose name is not valid UTF-8 (café.txt in Latin-1) crashed the ingest's
    fingerprint with a UnicodeEncodeError; it is a document whose name shows the byte as \\xe9, in
    docs.jsonl, skipped.jsonl and the strict-encoding message alike."""
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.txt").write_text("plain")
    os.mkdir(os.path.join(os.fsencode(root), b"d\xefr"))
    for name, data in (
        (b"d\xefr/caf\xe9.txt", b"caf\xc3\xa9"),
        (b"bin\xff.dat", b"a\0b"),
        (b"lat\xe9.txt", b"\xe9"),
    ):
        with open(os.path.join(os.fsencode(root), name), "wb") as f:
            f.write(data)
    with pytest.raises(UserError, match=r"not valid UTF-8: lat\\xe9\.txt \(byte 0\)"):
        ingest(root, tmp_path / "strict", IngestConfig(tokenizer="byte"), progress=False)
    cfg = IngestConfig(tokenizer="byte", source=SourceOptions(encoding="skip"))
    store = ingest(root, tmp_path / "s", cfg, progress=False).store
    assert [(d["id"], d["domain"]) for d in store.docs_meta()] == [
        ("a.txt", ""),
        ("d\\xefr/caf\\xe9.txt", "d\\xefr"),
    ]
    assert bytes(store.doc(1).astype(np.uint8)) == b"caf\xc3\xa9"
    skipped = [json.loads(line) for line in (store.path / "skipped.jsonl").read_text().splitlines()]
    assert [s["path"] for s in skipped] == ["bin\\xff.dat", "lat\\xe9.txt"]


def test_a_corpus_folders_own_notes_are_named_with_the_exclude_that_leaves_them_out(tmp_path, capsys):
    """A downloaded corpus folder holds its SOURCE.txt, README and manifest beside the text: they were
    ingested as training documents without a word. They still are (a code tree's READMEs may be
    wanted), but one line names them and the --exclude it gives leaves exactly them out; a code file
    named source.py is code, not a note."""
    import shlex

    src = write_tree(
        tmp_path / "corpus",
        {
            "book.txt": "the text of a book " * 20,
            "SOURCE.txt": "downloaded from somewhere",
            "manifest.jsonl": '{"title": "a book"}\n',
            "sub/README.md": "# notes",
            "sub/LICENSE": "public domain",
            "code/source.py": "print('code')\n",
        },
    )
    ingest(src, tmp_path / "all", IngestConfig(tokenizer="byte"), progress=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(lines) == 1 and "4 files" in lines[0]
    assert ": SOURCE.txt, manifest.jsonl, sub/LICENSE, sub/README.md;" in lines[0]
    exclude = shlex.split(lines[0].split("--exclude ", 1)[1])[0].split(",")
    assert exclude == ["SOURCE.*", "manifest.*", "LICENSE", "README.*"]
    opts = SourceOptions(exclude=exclude)
    store = ingest(src, tmp_path / "text", IngestConfig(tokenizer="byte", source=opts), progress=False).store
    assert store.n_docs == 2
    assert "note:" not in capsys.readouterr().out


def test_jsonl_files_beside_text_files_are_said_to_be_read_as_text(tmp_path, capsys):
    """Two .jsonl files beside one .txt were stored as JSON syntax (ids of `{"`, `text`, `":`), one
    document a file, with no word, and --text-field was taken in silence though no row was read."""
    src = write_tree(
        tmp_path / "mixed",
        {"a.jsonl": '{"text": "hello world one"}\n{"text": "second row"}\n', "d.txt": "plain text\n"},
    )
    store = ingest(src, tmp_path / "s", IngestConfig(tokenizer="byte"), progress=False).store
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert said == [
        "note: 1 JSON-lines file (a.jsonl) is read as text, one document each, as every file of a folder "
        "that holds other files too; to read its rows, ingest it on its own (the file, or a folder of "
        "JSON-lines files only), or --exclude it here"
    ]
    assert store.n_docs == 2  # as before: a file a document
    only_rows = write_tree(tmp_path / "rows", {"a.jsonl": '{"text": "one"}\n{"text": "two"}\n'})
    assert ingest(only_rows, tmp_path / "r", IngestConfig(tokenizer="byte"), progress=False).store.n_docs == 2
    assert "JSON-lines" not in capsys.readouterr().out
    with pytest.raises(
        UserError,
        match=r"--text-field body names a field of JSONL / Parquet rows, and .* is "
        r"read as text \(a folder of text files",
    ):
        ingest(src, tmp_path / "f", IngestConfig(tokenizer="byte", source=SourceOptions(text_field="body")))
    with pytest.raises(UserError, match="--domain-field repo names a field"):
        ingest(
            src / "d.txt",
            tmp_path / "g",
            IngestConfig(tokenizer="byte", source=SourceOptions(domain_field="repo")),
        )


def test_a_csv_read_as_text_is_said(tmp_path, capsys):
    """A 301-line CSV became one document, header included, with no word; Parquet's rows are read."""
    (tmp_path / "q.csv").write_text("id,content\n1,what is this\n2,who is that\n")
    store = ingest(tmp_path / "q.csv", tmp_path / "s", IngestConfig(tokenizer="byte"), progress=False).store
    assert store.n_docs == 1
    assert (
        "note: q.csv is a CSV/TSV file, read as text: one document holding every line, header included; to "
        "ingest rows, write them as JSONL or Parquet"
    ) in capsys.readouterr().out


def test_a_text_file_opening_with_a_byte_order_mark_is_read_past_and_said(tmp_path, capsys):
    """A text file saved with a UTF-8 BOM was stored with the mark as 3 tokens (ids 239, 187, 191 of the
    byte tokenizer) at its start, with no word; the JSONL reader read past it already."""
    from contextlab.cli import main

    src = tmp_path / "c"
    src.mkdir()
    (src / "bom.txt").write_bytes(b"\xef\xbb\xbfHello with BOM")
    (src / "plain.txt").write_bytes(b"Hello without")
    assert main(["data", "ingest", str(src), "--tokenizer", "byte", "--out", str(tmp_path / "s")]) == 0
    assert "  1 file opened with a UTF-8 byte-order mark, read past (not text)" in capsys.readouterr().out
    store = TokenStore(tmp_path / "s")
    assert (
        bytes(store.doc(0).tolist()) == b"Hello with BOM"
        and store.meta["source_stats"]["byte_order_marks"] == 1
    )


def test_a_jsonl_file_opening_with_a_byte_order_mark_is_read(tmp_path):
    """A JSONL file an editor saved with a UTF-8 BOM was refused with Python's "(decode using
    utf-8-sig)", which names no fix a user can act on; the mark is read past, the rows are kept."""
    rows = [{"text": "first row"}, {"text": "second row"}]
    (tmp_path / "d.jsonl").write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    store = ingest(tmp_path / "d.jsonl", tmp_path / "s", IngestConfig(tokenizer="byte"), progress=False).store
    assert [bytes(store.doc(i).astype(np.uint8)).decode() for i in range(len(store))] == [
        "first row",
        "second row",
    ]


def test_a_negative_vocab_size_is_not_called_fractional():
    """`--tokenizer bpe:-5` was answered "-5 is not a whole number"."""
    from contextlab.data.tokenizer_spec import spec_problem

    assert spec_problem("bpe:-5") == "the vocab size '-5' is not a positive whole number (e.g. bpe:4096)"
    assert spec_problem("bpe:4096") is None


def test_a_folder_of_links_out_of_it_says_links_are_never_followed(tmp_path):
    """A folder of symlinks to files outside it gave "20 symlinks skipped; check --include/--exclude",
    naming no fix: links out of the folder are never followed, and the line says so."""
    from contextlab.errors import UserError

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "links").mkdir()
    for i in range(3):
        (tmp_path / "elsewhere" / f"{i}.txt").write_text(f"text {i}")
        (tmp_path / "links" / f"{i}.txt").symlink_to(tmp_path / "elsewhere" / f"{i}.txt")
    with pytest.raises(
        UserError,
        match=r"3 symlinks skipped \(links to folders, out of the folder, or broken are never followed",
    ):
        ingest(tmp_path / "links", tmp_path / "s", IngestConfig(tokenizer="byte"), progress=False)


def test_a_store_given_as_the_source_is_refused(tmp_path):
    """`data ingest STORE` exited 0, ingesting the store's meta.json, docs.jsonl and config.toml as text."""
    from contextlab.errors import UserError

    (tmp_path / "t.txt").write_text("some text to ingest")
    ingest(tmp_path / "t.txt", tmp_path / "s", IngestConfig(tokenizer="byte"), progress=False)
    with pytest.raises(UserError, match=r"is a token store: .* give the text it was made from"):
        ingest(tmp_path / "s", tmp_path / "again", IngestConfig(tokenizer="byte"), progress=False)
    assert not (tmp_path / "again").exists()


def test_an_ingest_in_parts_stopped_and_run_on_changed_text_is_refused_not_restarted_silently(
    tmp_path, monkeypatch
):
    """A user killed an ingest in parts with 8 of 16 parts done, edited a book, and ran it again: it threw
    the parts away and started over without a word (a one-process ingest, and a pack, refuse)."""
    import contextlab.data.ingest_parts as parts_mod
    from contextlab.data.ingest_parts import in_parts
    from contextlab.data.shards.local_pool import LocalExecutor
    from tests.conftest import shakespeare

    src = tmp_path / "src"
    src.mkdir()
    text = shakespeare(40_000)
    for i in range(4):
        (src / f"b{i}.txt").write_text(text[i * 10_000 : (i + 1) * 10_000])
    original, calls = parts_mod.ingest_part, []

    def two_then_stop(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(args[3])
        return original(*args, **kwargs)

    monkeypatch.setattr(parts_mod, "ingest_part", two_then_stop)
    out = tmp_path / "store"
    with pytest.raises(KeyboardInterrupt):
        ingest(src, out, IngestConfig(), progress=False, store_documents=in_parts(LocalExecutor(), 4))
    done = sorted((tmp_path / "store.partial" / "parts").glob("part_*.json"))
    assert len(done) == 2
    monkeypatch.setattr(parts_mod, "ingest_part", original)
    (src / "b3.txt").write_text(text[30_000:40_000].replace(" the ", " THE "))
    with pytest.raises(UserError) as err:
        ingest(src, out, IngestConfig(), progress=False, store_documents=in_parts(LocalExecutor(), 4))
    assert str(err.value) == (
        f"{tmp_path / 'store.partial'} holds an unfinished ingest of a different source or config; delete "
        "it or pass --overwrite"
    )
    assert sorted((tmp_path / "store.partial" / "parts").glob("part_*.json")) == done  # kept
    ingest(
        src, out, IngestConfig(), progress=False, store_documents=in_parts(LocalExecutor(), 4), overwrite=True
    )
    assert TokenStore(out).n_docs == 4


def test_ingest_threads_sets_the_tokenizer_pool_and_gives_the_same_store(tmp_path, monkeypatch, capsys):
    """`--threads N` for a machine shared with others: the store is the one every core makes."""
    import contextlab.data.tokenizer_base as base
    from contextlab.cli import main

    monkeypatch.setattr(base, "_threads", 0)
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    src = make_corpus(tmp_path / "c", n_files=12)
    common = ["data", "ingest", str(src), "--tokenizer", "bpe:300", "--no-progress"]
    assert main([*common, "--out", str(tmp_path / "all")]) == 0
    assert main([*common, "--threads", "1", "--out", str(tmp_path / "one")]) == 0
    assert base.tokenizer_threads() == 1 and os.environ["RAYON_NUM_THREADS"] == "1"
    same_store(TokenStore(tmp_path / "all"), TokenStore(tmp_path / "one"))
    for extra, message in [
        (["--threads", "-1"], "--threads must be a number of threads (0 = one per core), got -1"),
        (["--threads", "2", "--ray"], "--threads is for an ingest on this machine; with --ray"),
    ]:
        assert main([*common, *extra, "--out", str(tmp_path / "x")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()


def test_ingest_threads_is_the_size_of_the_tokenizers_thread_pool(tmp_path):
    """The Rust pool of HF tokenizers really runs on N threads (it reads its size once, at start)."""
    src = make_corpus(tmp_path / "c", n_files=12)
    code = (
        "import os, sys; from contextlab.cli import main; "
        f"rc = main(['data', 'ingest', {str(src)!r}, '--tokenizer', 'bpe:300', '--no-progress', "
        f"'--threads', '6', '--out', {str(tmp_path / 's')!r}]); "
        "print('threads', len(os.listdir('/proc/self/task'))); sys.exit(rc)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("RAYON_NUM_THREADS", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    threads = int(done.stdout.split("threads ")[-1])
    assert threads >= 7, done.stdout  # the main thread and a pool of 6 (on a 2-core machine: 2 without it)
