"""The packed store: exact tokens, resume after a kill, parallel shards, clear errors."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from contextlab import FORMAT_VERSION
from contextlab.config import to_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.packing import PackConfig, PackedStore, pack
from contextlab.data.packing import shards as shards_mod
from contextlab.data.packing.pack import PACKED_FORMAT, fingerprint
from contextlab.errors import UserError
from tests.conftest import write_tree
from tests.data.packing.helpers import EOT, make_store, mixed_corpus, paths_of


def test_sequence_tokens_exact_ids_separators_and_trimming(tmp_path):
    store = make_store(tmp_path, {"a/1.txt": "abcde", "a/2.txt": "fghij", "a/3.txt": "klmnopqrst"})
    packed = pack(
        store, tmp_path / "p", PackConfig(method="ep", context=7, seed=0, val_fraction=0), progress=False
    ).packed
    text = {p: open(tmp_path / "store_src" / p, "rb").read() for p in paths_of(store)}
    stream, ids = [], []
    for i in range(packed.n_sequences):
        toks, doc_ids = packed.sequence_tokens(i)
        assert toks.dtype == np.int64 and doc_ids.dtype == np.int32 and len(toks) == len(doc_ids) <= 8
        if i < packed.n_sequences - 1:
            assert len(toks) == 8
        stream += toks.tolist()
        ids += doc_ids.tolist()
    # remainder "next": the stream is the documents in packing order, each followed by EOT, also where
    # a document fills its sequence to the last token (its EOT then starts the next one; it was cut)
    order = list(dict.fromkeys(int(d) for d in np.asarray(packed.entries)[:, 0]))
    paths = paths_of(store)
    expected = [t for d in order for t in list(text[paths[d]]) + [EOT]]
    exp_ids = [d for d in order for _ in range(len(text[paths[d]]) + 1)]
    assert stream == expected and ids == exp_ids
    assert any(packed.sequence_tokens(i)[0][0] == EOT for i in range(1, packed.n_sequences))  # that case
    # a trimmed document is an entry with end < its length, continued in the next sequence
    e = np.asarray(packed.entries)
    assert (e[:, 2] < store.lengths()[e[:, 0]]).any()
    no_sep = packed.sequence_tokens(0, separator_id=None)[0]
    assert EOT not in no_sep.tolist()


def test_meta_is_self_describing(tmp_path):
    store = make_store(tmp_path, mixed_corpus(12))
    cfg = PackConfig(method="splice", context=49, k=2, noise=0.25, shards=2, seed=9)
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    m = json.loads((packed.path / "meta.json").read_text())
    assert m["format"] == "contextlab-packed-store" and m["version"] == 1
    assert m["config"]["k"] == 2 and m["config"]["noise"] == 0.25 and m["config"]["shards"] == 2
    assert m["store"]["content_hash"] == store.hash and m["store"]["tokenizer_hash"] == store.tokenizer_hash
    assert m["separator_id"] == EOT and m["n_sequences"] == packed.n_sequences
    assert len(m["shards"]) == 2 and all(s["index_bytes"] > 0 and "seconds" in s for s in m["shards"])
    assert (packed.path / "config.toml").is_file() and not (packed.path / "shards").exists()


def _arrays(path):
    return {
        n: (path / n).read_bytes()
        for n in ("entries.npy", "seq_offsets.npy", "similarity.npy", "config.toml")
    }


def _meta_without_timings(path):
    m = json.loads((path / "meta.json").read_text())
    for s in m["shards"]:
        s.pop("seconds"), s.pop("index_seconds")
    return m


def test_resume_after_kill_gives_identical_bytes(tmp_path, monkeypatch):
    store = make_store(tmp_path, mixed_corpus(40))
    cfg = PackConfig(method="splice", context=59, shards=4, seed=4, remainder="pool", order="shuffle")
    full = pack(store, tmp_path / "full", cfg, progress=False)

    real, calls = shards_mod.run_shard, []

    def dies_after_two(*args):
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process is killed while packing shard 3
        calls.append(args[2])
        return real(*args)

    monkeypatch.setattr(shards_mod, "run_shard", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        pack(store, tmp_path / "out", cfg, progress=False)
    assert not (tmp_path / "out").exists()
    assert len(list((tmp_path / "out.partial" / "shards").glob("shard_*.npz"))) == 2
    monkeypatch.setattr(shards_mod, "run_shard", real)
    resumed = pack(store, tmp_path / "out", cfg, progress=False)
    assert (resumed.shards_resumed, resumed.shards_packed) == (2, 2)
    assert _arrays(full.packed.path) == _arrays(resumed.packed.path)
    assert _meta_without_timings(full.packed.path) == _meta_without_timings(resumed.packed.path)
    assert not (tmp_path / "out.partial").exists()
    again = pack(store, tmp_path / "out", cfg, progress=False)
    assert again.up_to_date


def test_shards_in_parallel_processes_and_one_at_a_time_agree(tmp_path):
    store = make_store(tmp_path, mixed_corpus(30))
    cfg = PackConfig(method="splice", context=59, shards=3, seed=1)
    serial = pack(store, tmp_path / "serial", cfg, progress=False)
    for s in (2, 0, 1):  # e.g. three machines, in any order
        assert pack(store, tmp_path / "many", cfg, only_shards=[s], progress=False).packed is None
    many = pack(store, tmp_path / "many", cfg, progress=False)
    assert many.shards_resumed == 3
    par = pack(store, tmp_path / "par", cfg, workers=2, progress=False)
    assert _arrays(serial.packed.path) == _arrays(many.packed.path) == _arrays(par.packed.path)


def test_user_errors(tmp_path):
    with pytest.raises(UserError, match="store not found"):
        pack(tmp_path / "nope", tmp_path / "p", PackConfig())
    with pytest.raises(UserError, match="context must be >= 4"):
        PackConfig(context=0)
    with pytest.raises(UserError, match="unknown packing method 'zigzag'"):
        PackConfig(method="zigzag")
    with pytest.raises(UserError, match="noise"):
        PackConfig(noise=1.5)
    with pytest.raises(UserError, match="packed store not found"):
        PackedStore(tmp_path / "nothing")
    files = {"a/1.txt": "one two", "a/2.txt": "three four"}
    store = make_store(tmp_path, files)
    pack(store, tmp_path / "p", PackConfig(context=7), progress=False)
    with pytest.raises(UserError, match=r"already holds a different packed store \(context 7 there, 8 now\)"):
        pack(store, tmp_path / "p", PackConfig(context=8), progress=False)
    with pytest.raises(UserError, match="shard 5 does not exist"):
        pack(store, tmp_path / "q", PackConfig(context=7), only_shards=[5], progress=False)
    # the token store changes under the packed store: hash mismatch
    write_tree(tmp_path / "store_src", {"a/1.txt": "one two changed"})
    ingest(
        tmp_path / "store_src",
        tmp_path / "store",
        IngestConfig(tokenizer="byte"),
        overwrite=True,
        progress=False,
    )
    with pytest.raises(UserError, match="changed since .* was packed"):
        PackedStore(tmp_path / "p")
    # corrupt arrays
    np.save(tmp_path / "p" / "entries.npy", np.zeros((1, 3), np.int64))
    with pytest.raises(UserError, match="entries.npy is int64"):
        PackedStore(tmp_path / "p")


def test_more_shards_than_documents_are_cut_to_fit_said_and_recorded(tmp_path, capsys):
    """--shards 9 of 4 documents made 4 shards silently, meta.json saying 9. It says so in one line,
    records the 4 it packs, and is the pack of --shards 4 (the same command again is up to date)."""
    store = make_store(tmp_path, mixed_corpus(4))
    out = tmp_path / "p"
    cfg = PackConfig(method="ep", context=15, val_fraction=0, shards=9)
    packed = pack(store, out, cfg, progress=False).packed
    assert capsys.readouterr().err == (
        f"note: --shards 9 is more than the 4 documents of {store.path}: packing 4 shards of one "
        "document each (meta.json records shards 4)\n"
    )
    assert packed.meta["config"]["shards"] == 4 and len(packed.meta["shards"]) == 4
    assert "shards = 4" in (out / "config.toml").read_text()
    cfg = PackConfig(method="ep", context=15, val_fraction=0, shards=4)
    four = pack(store, tmp_path / "four", cfg, progress=False)
    assert (
        _arrays(out) == _arrays(four.packed.path)
        and packed.meta["fingerprint"] == four.packed.meta["fingerprint"]
    )
    for shards in (9, 4):  # the same command again, or the shards it recorded: the same pack
        assert pack(
            store, out, PackConfig(method="ep", context=15, val_fraction=0, shards=shards), progress=False
        ).up_to_date
    # a store packed before the cut records the shards asked for, and its command still finds it
    meta = json.loads((out / "meta.json").read_text())
    meta["config"]["shards"] = 9
    meta["fingerprint"] = fingerprint(PackConfig(method="ep", context=15, val_fraction=0, shards=9), store)
    (out / "meta.json").write_text(json.dumps(meta))
    assert pack(
        store, out, PackConfig(method="ep", context=15, val_fraction=0, shards=9), progress=False
    ).up_to_date
    # another setting is named, with its value there and now
    with pytest.raises(UserError, match=r"different packed store \(shards 9 there, 4 now\); choose another"):
        pack(store, out, PackConfig(method="ep", context=15, val_fraction=0, shards=4), progress=False)
    with pytest.raises(UserError, match=r"\(method ep there, icp now; shards 9 there, 4 now\)"):
        pack(store, out, PackConfig(method="icp", context=15, val_fraction=0, shards=4), progress=False)


def test_a_store_packed_before_the_rename_opens_for_its_context(tmp_path):
    store = make_store(tmp_path, mixed_corpus(8))
    new = pack(store, tmp_path / "p", PackConfig(method="ep", context=15), progress=False).packed
    assert new.context == 15 and new.row_len == 16 and new.meta["row_len"] == 16
    meta = json.loads((new.path / "meta.json").read_text())
    meta["config"]["seq_len"] = meta["config"].pop("context") + 1  # how meta.json looked before
    del meta["row_len"]
    (new.path / "meta.json").write_text(json.dumps(meta))
    old = PackedStore(new.path)
    assert old.context == 15 and old.row_len == 16
    assert old.sequence_lengths().tolist() == new.sequence_lengths().tolist()
    # the fingerprint hashes the old config form, so stores packed before the rename stay up to date
    old_config = {**to_dict(PackConfig(method="ep", context=15)), "seq_len": 16}
    del old_config["context"], old_config["dense_device"]  # dense_device came later still
    blob = {"format": PACKED_FORMAT, "version": FORMAT_VERSION, "config": old_config}
    blob |= {"store": store.hash, "tokenizer": store.tokenizer_hash}
    want = hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()
    assert fingerprint(PackConfig(method="ep", context=15), store) == want == meta["fingerprint"]
    # a pack whose embeddings came from a GPU is another pack (float sums differ from the CPU's)
    on_gpu = PackConfig(method="splice", retriever="dense", context=15, dense_device="cuda")
    assert fingerprint(on_gpu, store) != fingerprint(
        PackConfig(method="splice", retriever="dense", context=15), store
    )


@pytest.mark.parametrize("separator", ["eot", "none"])
def test_the_final_arrays_are_the_shards_one_after_another_as_np_save_writes_them(tmp_path, separator):
    """The driver writes the arrays a shard at a time: the files must be byte for byte what
    np.save writes for the concatenation, and the counts in meta.json what the whole arrays give."""
    import io

    store = make_store(tmp_path, mixed_corpus(60))
    cfg = PackConfig(method="splice", context=47, shards=5, seed=2, separator=separator)
    out = tmp_path / "packed"
    assert pack(store, out, cfg, only_shards=list(range(5)), progress=False).packed is None
    shards = [dict(np.load(f)) for f in sorted((tmp_path / "packed.partial" / "shards").glob("*.npz"))]
    assert len(shards) == 5 and all(len(s["entries"]) for s in shards)
    ends = np.cumsum([0] + [int(s["seq_offsets"][-1]) for s in shards])
    expected = {
        "entries.npy": np.concatenate([s["entries"] for s in shards]),
        "seq_offsets.npy": np.concatenate([[0]] + [s["seq_offsets"][1:] + e for s, e in zip(shards, ends)]),
        "similarity.npy": np.concatenate([s["similarity"] for s in shards]),
    }
    packed = pack(store, out, cfg, progress=False).packed
    for name, arr in expected.items():
        buf = io.BytesIO()
        np.save(buf, arr)
        assert (out / name).read_bytes() == buf.getvalue(), name
    lens = packed.sequence_lengths()  # from the whole arrays
    assert packed.meta["n_tokens"] == int(lens.sum()) and packed.meta["n_entries"] == len(
        expected["entries.npy"]
    )
    assert packed.meta["n_full_sequences"] == int((lens == packed.row_len).sum()) > 0
    assert packed.meta["n_sequences"] == len(expected["seq_offsets.npy"]) - 1


def test_a_shard_file_that_does_not_match_its_record_is_packed_again(tmp_path, capsys):
    store = make_store(tmp_path, mixed_corpus(30))
    cfg = PackConfig(method="splice", context=47, shards=3, seed=2)
    reference = pack(store, tmp_path / "reference", cfg, progress=False).packed
    pack(store, tmp_path / "packed", cfg, only_shards=[0, 1, 2], progress=False)
    f = tmp_path / "packed.partial" / "shards" / "shard_00001.npz"
    with np.load(f) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["similarity"] = arrays["similarity"][:-1]  # one row short of what its record says
    np.savez(f, **arrays)
    capsys.readouterr()
    packed = pack(store, tmp_path / "packed", cfg, progress=True).packed
    said = capsys.readouterr().out.splitlines()
    # the file of index 1 is the second shard: its two lines count it the same way (they said 1, then 2/3)
    assert said[0].startswith(
        "shard 2/3: shard_00001.npz is not usable (its arrays do not match the checksum"
    )
    assert said[1] == "resuming pack into " + str(tmp_path / "packed") + ": 2 of 3 shard(s) already packed"
    assert said[2].startswith("  shard 2/3: ") and len(said) == 3
    for name in ("entries", "seq_offsets", "similarity"):
        a, b = np.load(packed.path / f"{name}.npy"), np.load(reference.path / f"{name}.npy")
        assert np.array_equal(a, b, equal_nan=name == "similarity")


def test_a_moved_token_store_is_found_by_relative_path_or_given_with_store(tmp_path, capsys):
    """A packed store recorded only its token store's absolute path: moving the project folder broke
    it, and the fix was a Python call. Now a project moved whole keeps working (the relative path is
    recorded too), and a store moved alone is given with --store (export, pack-stats) or data.store
    (train), accepted by its content hash; other content is refused naming both hashes."""
    import shutil

    from contextlab.cli import main
    from contextlab.data.store import TokenStore
    from contextlab.data.training import packed_sources

    store = make_store(tmp_path / "proj" / "data", mixed_corpus(12), name="st orig")
    packed = pack(store, tmp_path / "proj" / "packs" / "p", PackConfig(context=31), progress=False).packed
    rows = [packed.sequence_tokens(i)[0].tolist() for i in range(packed.n_sequences)]
    record = json.loads((packed.path / "meta.json").read_text())["store"]
    assert record["relative_path"] == "../../data/st orig"
    shutil.move(tmp_path / "proj", tmp_path / "moved proj")  # the whole project: nothing to pass
    moved = PackedStore(tmp_path / "moved proj" / "packs" / "p")
    assert moved.store.path == tmp_path / "moved proj" / "data" / "st orig"
    assert [moved.sequence_tokens(i)[0].tolist() for i in range(moved.n_sequences)] == rows

    p = tmp_path / "moved proj" / "packs" / "p"
    shutil.move(tmp_path / "moved proj" / "data" / "st orig", tmp_path / "elsewhere")  # the store alone
    with pytest.raises(UserError) as err:
        PackedStore(p)
    assert "was packed from is missing; restore it, or give its new place: --store NEW_PATH" in str(err.value)
    assert f"data.store=NEW_PATH (train), a store with content hash {store.hash[:12]}" in str(err.value)
    assert main(["data", "pack-stats", str(p), "--store", str(tmp_path / "elsewhere"), "--no-plot"]) == 0
    out = tmp_path / "export"
    assert (
        main(
            [
                "data",
                "export",
                str(p),
                "--format",
                "parquet",
                "--out",
                str(out),
                "--store",
                str(tmp_path / "elsewhere"),
            ]
        )
        == 0
    )
    assert (out / "export.json").is_file()
    data = type(
        "Data", (), {"store": str(tmp_path / "elsewhere"), "val_store": "", "packed": str(p), "mixture": []}
    )()
    assert packed_sources(data)[0].store.path == tmp_path / "elsewhere"  # train: data.store
    other = make_store(tmp_path, {"x.txt": "other text"}, name="other")
    capsys.readouterr()
    assert main(["data", "pack-stats", str(p), "--store", str(other.path), "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert (
        f"is not the one {p} was packed from (content hash {other.hash[:12]}, packed from {store.hash[:12]}"
        in err
    )

    del record["relative_path"]  # a packed store written before the relative path: opened as before
    meta = json.loads((p / "meta.json").read_text())
    meta["store"] = {**record, "path": str(tmp_path / "elsewhere")}
    (p / "meta.json").write_text(json.dumps(meta))
    assert PackedStore(p).store.path == tmp_path / "elsewhere"
    assert TokenStore(tmp_path / "elsewhere").hash == store.hash
