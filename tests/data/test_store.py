"""The token store: exact ids and boundaries, validation of corrupt stores, views."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.store import TokenStore, dtype_for_vocab
from contextlab.data.views import long_documents, split_documents
from contextlab.errors import UserError
from tests.conftest import write_tree

DOCS = {"a/one.txt": "hello", "a/two.txt": "héllo wörld", "b/three.txt": "xyz" * 10, "root.txt": "r"}


@pytest.fixture
def store(tmp_path) -> TokenStore:
    src = write_tree(tmp_path / "corpus", DOCS)
    return ingest(src, tmp_path / "store", IngestConfig(tokenizer="byte"), progress=False).store


def test_exact_ids_and_boundaries(store):
    # sorted by relative path: a/one.txt, a/two.txt, b/three.txt, root.txt
    texts = [DOCS["a/one.txt"], DOCS["a/two.txt"], DOCS["b/three.txt"], DOCS["root.txt"]]
    expected = [list(t.encode("utf-8")) for t in texts]
    assert store.n_docs == 4 and store.n_tokens == sum(map(len, expected))
    assert [store.doc(i).tolist() for i in range(4)] == expected
    assert store.offsets.tolist() == [0, 5, 5 + 13, 5 + 13 + 30, 5 + 13 + 30 + 1]
    assert store.dtype == np.uint16
    meta = store.docs_meta()
    assert [m["path"] for m in meta] == ["a/one.txt", "a/two.txt", "b/three.txt", "root.txt"]
    assert [m["domain"] for m in meta] == ["a", "a", "b", ""]
    assert store.tokenizer().decode(store.doc(1)) == "héllo wörld"
    store.verify()


def test_meta_describes_itself(store):
    meta = json.loads((store.path / "meta.json").read_text())
    assert meta["format"] == "contextlab-token-store" and meta["version"] == 1
    assert meta["tokenizer"]["kind"] == "byte" and meta["tokenizer"]["hash"] == store.tokenizer().hash
    assert meta["n_docs"] == 4 and meta["dtype"] == "uint16" and len(meta["content_hash"]) == 64
    assert (store.path / "config.toml").is_file() and (
        store.path / "tokenizer" / "tokenizer_spec.json"
    ).is_file()


def test_dtype_for_vocab():
    assert dtype_for_vocab(65536) == np.uint16 and dtype_for_vocab(65537) == np.uint32


def test_truncated_tokens_detected(store):
    f = store.path / "tokens.bin"
    f.write_bytes(f.read_bytes()[:-2])
    with pytest.raises(UserError, match="tokens.bin has .* bytes but meta.json says n_tokens"):
        TokenStore(store.path)


def test_hand_edited_offsets_detected(store):
    offsets = np.load(store.path / "offsets.npy")
    np.save(store.path / "offsets.npy", offsets[:-1])
    with pytest.raises(UserError, match="offsets.npy has 4 entries but meta.json says n_docs=4"):
        TokenStore(store.path)
    bad = offsets.copy()
    bad[2] = 1
    bad[1] = 3
    np.save(store.path / "offsets.npy", bad)
    with pytest.raises(UserError, match="not increasing"):
        TokenStore(store.path)


def test_edited_meta_detected(store):
    meta = json.loads((store.path / "meta.json").read_text())
    meta["n_tokens"] += 1
    (store.path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match="corrupt"):
        TokenStore(store.path)
    (store.path / "meta.json").write_text("{not json")
    with pytest.raises(UserError, match="meta.json is not valid JSON"):
        TokenStore(store.path)


def test_same_size_edit_caught_by_verify(store):
    f = store.path / "tokens.bin"
    data = bytearray(f.read_bytes())
    data[0] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(UserError, match="content hash"):
        TokenStore(store.path).verify()


def test_missing_and_not_a_store(tmp_path):
    with pytest.raises(UserError, match="store not found"):
        TokenStore(tmp_path / "nope")
    with pytest.raises(UserError) as err:  # the command to copy quotes a path with spaces
        TokenStore(tmp_path / "st orig")
    assert f"`contextlab data ingest SOURCE --out '{tmp_path / 'st orig'}'`" in str(err.value)
    (tmp_path / "dir").mkdir()
    with pytest.raises(UserError, match="not a contextlab token store"):
        TokenStore(tmp_path / "dir")


def test_tokenizer_mismatch_is_one_clear_line(store):
    from contextlab.data.tokenizers import load_tokenizer

    other = load_tokenizer("byte").with_special_tokens(["<|fim_prefix|>"])
    with pytest.raises(UserError) as e:
        store.check_tokenizer(other.spec(), "the model")
    assert "\n" not in str(e.value) and "differs" in str(e.value)
    store.check_tokenizer(store.tokenizer().spec(), "the model")  # the same tokenizer passes


def test_long_documents_view(store):
    view = long_documents(store, 11)
    assert view.indices.tolist() == [1, 2] and view.lengths().tolist() == [11, 11]
    assert view.doc(1).tolist() == list(b"xyz" * 3 + b"xy")
    with pytest.raises(UserError, match="no document has 100 tokens"):
        long_documents(store, 100)


def test_split_by_document_is_deterministic_and_disjoint(store):
    tr, va = split_documents(store, 0.5, seed=1)
    tr2, va2 = split_documents(store, 0.5, seed=1)
    assert tr.indices.tolist() == tr2.indices.tolist() and va.indices.tolist() == va2.indices.tolist()
    assert sorted(tr.indices.tolist() + va.indices.tolist()) == [0, 1, 2, 3] and len(va) == 2
    assert {tuple(split_documents(store, 0.5, seed=s)[1].indices.tolist()) for s in range(20)} != {
        tuple(va.indices.tolist())
    }
    with pytest.raises(UserError):
        split_documents(store, 1.5)


def test_split_tail_holds_out_the_end_of_every_document(store):
    from contextlab.data.views import split_tail

    train, val = split_tail(store, 0.5)
    lens = store.lengths()
    for i in range(len(train)):
        d = int(train.indices[i])
        assert train.doc(i).tolist() == store.doc(d)[: lens[d] // 2].tolist()
    # one-token documents have nothing left for training but keep their token for validation
    assert [int(i) for i in val.indices] == [0, 1, 2, 3] and [int(i) for i in train.indices] == [0, 1, 2]
    for i in range(len(val)):
        d = int(val.indices[i])
        assert val.doc(i).tolist() == store.doc(d)[lens[d] // 2 :].tolist()
    assert train.n_tokens() + val.n_tokens() == store.n_tokens


def _edit_meta(store_dir, **tokenizer_changes) -> None:
    meta = json.loads((store_dir / "meta.json").read_text())
    meta["tokenizer"].update(tokenizer_changes)
    (store_dir / "meta.json").write_text(json.dumps(meta))


def test_tampered_vocab_size_in_meta_is_caught_at_open(store):
    _edit_meta(store.path, vocab_size=226)
    with pytest.raises(UserError, match="vocab_size 226 .* tokenizer/ .* 257"):
        TokenStore(store.path)


def test_dtype_that_cannot_hold_the_vocabulary_is_caught_at_open(store):
    for f in ("meta.json", "tokenizer/tokenizer_spec.json"):
        spec = json.loads((store.path / f).read_text())
        (spec.get("tokenizer", spec))["vocab_size"] = 70_000
        (store.path / f).write_text(json.dumps(spec))
    with pytest.raises(UserError, match="dtype uint16 cannot hold .* 70000"):
        TokenStore(store.path)


def test_verify_checks_vocab_size_against_the_tokenizer(store):
    """A vocabulary size edited in meta.json and the tokenizer's spec file alike opens (the spec
    file's vocab_size of a byte tokenizer is not hashed) but fails ``verify``."""
    _edit_meta(store.path, vocab_size=226)
    spec_file = store.path / "tokenizer" / "tokenizer_spec.json"
    spec = json.loads(spec_file.read_text())
    spec["vocab_size"] = 226
    spec_file.write_text(json.dumps(spec))
    opened = TokenStore(store.path)
    with pytest.raises(UserError, match="vocab_size 226 but its tokenizer has 257"):
        opened.verify()


def _corrupt_first_token(store) -> None:
    tokens = np.memmap(store.path / "tokens.bin", dtype=np.uint16, mode="r+")
    tokens[0] = 60_000
    tokens.flush()
    del tokens


def test_verify_names_a_token_id_outside_the_vocabulary(store):
    _corrupt_first_token(store)
    with pytest.raises(UserError, match="token id 60000, outside the vocabulary 0..256"):
        TokenStore(store.path).verify()


@pytest.mark.parametrize("method", ["ep", "splice"])
def test_pack_of_a_store_with_an_out_of_range_token_names_data_verify(store, tmp_path, method):
    from contextlab.data.packing import PackConfig, pack

    _corrupt_first_token(store)
    cfg = PackConfig(method=method, context=16)
    with pytest.raises(UserError, match="changed after it was written") as e:  # the content hash first
        pack(store.path, tmp_path / "packed", cfg, progress=False)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="contextlab data verify") as e:  # unverified: the shards' id check
        pack(store.path, tmp_path / "packed", cfg, progress=False, verify=False)
    assert "\n" not in str(e.value)


def test_check_ids_of_a_range_of_documents_reads_only_their_tokens(store):
    tokens = np.memmap(store.path / "tokens.bin", dtype=np.uint16, mode="r+")
    tokens[int(store.offsets[2])] = 60_000  # the first token of document 2
    tokens.flush()
    del tokens
    s = TokenStore(store.path)
    s.check_ids(docs=(0, 2))
    s.check_ids(docs=(3, 4))
    with pytest.raises(UserError, match=r"token id 60000 \(in documents 1..3\), outside the vocabulary"):
        s.check_ids(docs=(1, 4), chunk=3)
    with pytest.raises(UserError, match=r"token id 60000, outside"):
        s.check_ids(chunk=5)


def test_data_verify_command_on_a_tampered_store_is_one_line(store, capsys):
    from contextlab.cli import main

    assert main(["data", "verify", str(store.path)]) == 0
    assert "every id below the vocabulary size 257" in capsys.readouterr().out
    _edit_meta(store.path, vocab_size=226)
    assert main(["data", "verify", str(store.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "vocab_size 226" in err


def test_finalize_streams_the_offsets_and_hashes_them_as_before(tmp_path):
    """offsets.npy is written and hashed in chunks smaller than the array: the file is byte for byte
    what np.save writes, and the content hash is sha256(tokens.bin + the whole array's bytes)."""
    import hashlib
    import io

    from contextlab.data import store_write

    ends = np.cumsum(np.random.default_rng(0).integers(1, 1000, 5001)).astype(np.int64)
    (tmp_path / "offsets.i64").write_bytes(ends.tobytes())
    (tmp_path / "tokens.bin").write_bytes(bytes(range(256)) * 40)
    offsets = store_write._final_offsets(tmp_path, chunk=4096)  # 10 chunks of the 40 KB array
    expected = np.concatenate([np.zeros(1, np.int64), ends])
    buf = io.BytesIO()
    np.save(buf, expected)
    assert (tmp_path / "offsets.npy").read_bytes() == buf.getvalue()
    assert np.array_equal(offsets, expected)
    digest = hashlib.sha256(bytes(range(256)) * 40 + expected.tobytes()).hexdigest()
    assert store_write.content_hash(tmp_path / "tokens.bin", tmp_path / "offsets.npy", chunk=1000) == digest
    (tmp_path / "offsets.i64").unlink()  # a finalize cut short after offsets.npy: read back as it is
    assert np.array_equal(store_write._final_offsets(tmp_path), expected)


def _widened(store, n_docs: int) -> np.ndarray:
    """Rewrite ``store`` as ``n_docs`` one-token documents; returns its offsets."""
    offsets = np.arange(n_docs + 1, dtype=np.int64)
    np.save(store.path / "offsets.npy", offsets)
    (store.path / "tokens.bin").write_bytes(np.zeros(n_docs, store.dtype).tobytes())
    meta = json.loads((store.path / "meta.json").read_text())
    meta.update(n_docs=n_docs, n_tokens=n_docs)
    (store.path / "meta.json").write_text(json.dumps(meta))
    return offsets


@pytest.mark.parametrize("at", [1, 7, 8, 9, 16, 24, 29])  # chunks of 8: inside, at and after a boundary
def test_a_decrease_anywhere_in_the_offsets_is_named(store, monkeypatch, at):
    import contextlab.data.store as store_mod

    monkeypatch.setattr(store_mod, "SCAN_ENTRIES", 8)
    offsets = _widened(store, 30)
    TokenStore(store.path)  # non-decreasing across every chunk: opens
    offsets[at] = offsets[at - 1] - 1 if at > 1 else -1
    offsets[at + 1 :] = np.maximum(offsets[at + 1 :], offsets[at])  # only entry `at` goes down
    np.save(store.path / "offsets.npy", offsets)
    with pytest.raises(UserError, match=rf"not increasing \(entry {at} is below entry {at - 1}\)"):
        TokenStore(store.path)


def test_opening_a_store_does_not_hold_memory_in_proportion_to_its_documents(store):
    """The open-time offsets check allocated 9 bytes per document (diff and comparison) on top of
    mapping all of offsets.npy: 17 GB at the peak to open a billion-document store."""
    import tracemalloc

    _widened(store, 2_000_000)  # a 16 MB offsets.npy
    tracemalloc.start()
    try:
        TokenStore(store.path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, f"{peak:,} bytes allocated to open 2M documents"


def test_docs_meta_read_a_row_at_a_time_and_a_missing_line_is_named(store, capsys):
    from contextlab.cli import main

    rows = list(store.iter_docs_meta())
    assert rows == store.docs_meta() and [r["path"] for r in rows] == sorted(DOCS)
    lines = (store.path / "docs.jsonl").read_text().splitlines(keepends=True)
    (store.path / "docs.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(UserError, match="docs.jsonl has 3 lines but meta.json says n_docs=4"):
        list(TokenStore(store.path).iter_docs_meta())
    assert main(["data", "verify", str(store.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "docs.jsonl has 3 lines" in err


def test_an_unfinished_store_says_so_and_how_to_finish_it(tmp_path, capsys):
    """`data info` on an ingest that was killed (only OUT.partial exists) said 'store not found …
    create one with contextlab data ingest'; it names the unfinished work and the rerun instead, for
    token and packed stores alike."""
    from contextlab.cli import main

    for name, command in (("st", ["data", "info"]), ("pk", ["data", "pack-stats"])):
        (tmp_path / f"{name}.partial").mkdir()
        assert main([*command, str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{tmp_path / name} is unfinished: the `contextlab data" in err[0], err
        assert f"({name}.partial holds its work); run the same command again to finish it" in err[0]
        assert main([*command, str(tmp_path / f"{name}.partial")]) == 2  # the work folder itself
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name}.partial holds the unfinished work of a `contextlab data" in err[0]
