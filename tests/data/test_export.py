"""contextlab data export: Parquet read back through `datasets`, Megatron through megatron-core's readers."""

from __future__ import annotations

import json
from collections import defaultdict
from functools import partial
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from contextlab.cli import main
from contextlab.data.export import ExportConfig, export
from contextlab.data.export import parquet as parquet_mod
from contextlab.data.export.megatron import megatron_dtype, write_megatron_split
from contextlab.data.export.rows import row_batches
from contextlab.data.packing import PackConfig, pack
from contextlab.data.packing.packed_store import packed_split
from contextlab.errors import UserError
from tests.data.packing.helpers import EOT, make_store, mixed_corpus

CONTEXT = 32
ROW = CONTEXT + 1


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A SPLICE-BM25 packed store of two shards (so two short rows) over 120 byte-token documents."""
    root = tmp_path_factory.mktemp("export")
    store = make_store(root, mixed_corpus(120, seed=4))
    cfg = PackConfig(method="splice", context=CONTEXT, seed=1, shards=2, remainder="next", val_fraction=0)
    return pack(store, root / "splice", cfg, progress=False).packed


def expected_row(packed, i):
    """(tokens, positions, document ids) of sequence i, from its entries one by one."""
    doc_len = packed.store.lengths()
    toks, pos, docs = [], [], []
    for d, b, e in packed.sequence_entries(i):
        piece = list(packed.store.doc(int(d))[b:e]) + ([EOT] if e == doc_len[d] else [])
        toks += piece
        pos += list(range(len(piece)))
        docs += [int(d)] * len(piece)
    return toks[:ROW], pos[:ROW], docs[:ROW]


def full_ids(packed, among=None):
    ids = np.arange(len(packed)) if among is None else among
    return [int(i) for i in ids if packed.sequence_lengths()[i] == ROW]


def load_parquet(out, tmp_path):
    import datasets

    return datasets.load_dataset("parquet", data_dir=str(out), cache_dir=str(tmp_path / "hf_cache"))


def test_parquet_rows_read_back_through_datasets_in_packed_order(packed, tmp_path):
    out = tmp_path / "pq"
    report = export(packed, out, ExportConfig(rows_per_shard=25), progress=False)
    want = full_ids(packed)
    assert len(want) < len(packed) and len(want) > 100  # the two short rows are left out
    ds = load_parquet(out, tmp_path)
    assert list(ds) == ["train"] and ds["train"].num_rows == len(want)
    for r, i in enumerate(want):
        tokens, positions, docs = expected_row(packed, i)
        row = ds["train"][r]
        assert row["input_ids"] == tokens and row["position_ids"] == positions and row["document_ids"] == docs
        assert row["input_ids"] == packed.sequence_tokens(i)[0].tolist()
    n_files = -(-len(want) // 25)
    names = sorted(p.name for p in out.glob("*.parquet"))
    assert names == [f"train-{k:05d}-of-{n_files:05d}.parquet" for k in range(n_files)]
    sizes = [pq.ParquetFile(out / n).metadata.num_rows for n in names]
    assert sizes == [25] * (n_files - 1) + [len(want) - 25 * (n_files - 1)]
    assert report.record["short_rows_left_out"] == len(packed) - len(want)


def test_rows_hold_several_documents_and_positions_restart_at_each(packed, tmp_path):
    """The fixture is real SPLICE data: rows with several documents, each restarting position 0."""
    out = tmp_path / "pq"
    export(packed, out, ExportConfig(), progress=False)
    table = pq.read_table(out / "train-00000-of-00001.parquet").to_pydict()
    multi = 0
    for toks, pos, docs in zip(table["input_ids"], table["position_ids"], table["document_ids"]):
        starts = [j for j in range(ROW) if pos[j] == 0]
        assert starts[0] == 0 and all(toks[j - 1] == EOT for j in starts[1:])  # a new document after EOT
        assert all(docs[j] != docs[j - 1] for j in starts[1:])
        assert all(docs[j] == docs[j - 1] for j in range(1, ROW) if j not in starts)
        multi += len(starts) > 1
    assert multi > 50


def test_validation_split_is_the_trainers_split_and_short_rows_on_request(packed, tmp_path):
    out = tmp_path / "pq"
    export(packed, out, ExportConfig(val_fraction=0.25, split_seed=3, keep_short_rows=True), progress=False)
    train_ids, val_ids = packed_split(packed, 0.25, 3)
    ds = load_parquet(out, tmp_path)
    assert sorted(ds) == ["train", "validation"]
    for split, ids in (("train", train_ids), ("validation", val_ids)):
        assert list(ds[split]["input_ids"]) == [packed.sequence_tokens(int(i))[0].tolist() for i in ids]
    assert min(len(x) for s in ("train", "validation") for x in ds[s]["input_ids"]) < ROW  # short kept


def test_megatron_read_back_by_megatron_core(packed, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    out = tmp_path / "mg"
    report = export(packed, out, ExportConfig(format="megatron"), progress=False)
    want = full_ids(packed)
    ds = IndexedDataset(str(out / "train"))
    assert len(ds) == len(want) and ds.index.dtype == np.uint16
    assert ds.sequence_lengths.tolist() == [ROW] * len(want)
    assert ds.document_indices.tolist() == list(range(len(want) + 1))  # every row its own document
    for r, i in enumerate(want):
        assert ds[r].tolist() == packed.sequence_tokens(i)[0].tolist()
    rec = json.loads((out / "export.json").read_text())
    assert rec == report.record and rec["splits"]["train"]["rows"] == len(want) and rec["eod_id"] == EOT


def test_megatron_validation_split(packed, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    out = tmp_path / "mg"
    export(packed, out, ExportConfig(format="megatron", val_fraction=0.25, split_seed=3), progress=False)
    train_ids, val_ids = packed_split(packed, 0.25, 3)
    for split, ids in (("train", train_ids), ("validation", val_ids)):
        ds = IndexedDataset(str(out / split))
        want = full_ids(packed, ids)
        assert [ds[r].tolist() for r in range(len(ds))] == [
            packed.sequence_tokens(i)[0].tolist() for i in want
        ]


def gpt_dataset(prefix, n, seq_len, add_extra):
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    tok = SimpleNamespace(eod=EOT, vocab_size=257, unique_identifiers={"class": "byte"})
    cfg = GPTDatasetConfig(
        random_seed=1,
        sequence_length=seq_len,
        tokenizer=tok,
        reset_position_ids=True,
        reset_attention_mask=True,
        eod_mask_loss=False,
        create_attention_mask=False,
        add_extra_token_to_sequence=add_extra,
    )
    return GPTDataset(IndexedDataset(prefix), prefix, np.arange(n, dtype=np.int32), None, Split.train, cfg)


def test_megatron_gpt_dataset_samples_are_whole_rows_with_the_documented_settings(packed, tmp_path):
    """sequence_length = context + 1 and no extra token: each sample is one row (shuffled), with
    Megatron's EOD-reset positions equal to the Parquet position_ids; the default cuts across rows."""
    out = tmp_path / "mg"
    export(packed, out, ExportConfig(format="megatron"), progress=False)
    rows = defaultdict(list)
    for i in full_ids(packed):
        tokens, positions, _ = expected_row(packed, i)
        rows[tuple(tokens)].append(positions)
    n = sum(len(v) for v in rows.values())
    ds = gpt_dataset(str(out / "train"), n, ROW, add_extra=False)
    assert len(ds) == n
    seen = defaultdict(int)
    for k in range(n):
        sample = ds[k]
        key = tuple(sample["tokens"].tolist())
        assert key in rows and sample["position_ids"].tolist() == rows[key][0]
        seen[key] += 1
    assert all(seen[key] == len(v) for key, v in rows.items())  # every row exactly once
    default = gpt_dataset(str(out / "train"), n, CONTEXT, add_extra=True)
    whole = sum(_is_row(default[k], rows) for k in range(n))
    assert whole < n // 2


def _is_row(sample, rows) -> bool:
    text = sample["tokens"].tolist() + [sample["labels"].tolist()[-1]]
    return tuple(text) in rows


def test_megatron_int32_for_large_vocabularies(packed, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    assert megatron_dtype(65499) == np.uint16 and megatron_dtype(65500) == np.int32
    ids = np.array(full_ids(packed)[:7])
    rows = partial(row_batches, packed)
    write_megatron_split(rows, ids, tmp_path / "big", np.dtype(np.int32), 3, lambda n: None)
    ds = IndexedDataset(str(tmp_path / "big"))
    assert ds.index.dtype == np.int32
    assert [ds[r].tolist() for r in range(7)] == [packed.sequence_tokens(int(i))[0].tolist() for i in ids]


def test_export_json_describes_the_source(packed, tmp_path):
    rec = export(packed, tmp_path / "pq", ExportConfig(rows_per_shard=40), progress=False).record
    store_meta = packed.meta["store"]
    assert rec["format"] == "contextlab-export" and rec["version"] == 1
    assert rec["source"]["fingerprint"] == packed.meta["fingerprint"]
    assert rec["tokenizer_hash"] == store_meta["tokenizer_hash"] and rec["eod_id"] == EOT
    assert rec["context"] == CONTEXT and rec["row_len"] == ROW
    files = rec["splits"]["train"]["files"]
    assert sum(f["rows"] for f in files) == rec["splits"]["train"]["rows"] == len(full_ids(packed))
    assert rec["splits"]["train"]["tokens"] == ROW * len(full_ids(packed))


def test_existing_out_and_bad_options_are_refused_in_one_line(packed, tmp_path, capsys):
    out = tmp_path / "pq"
    export(packed, out, ExportConfig(), progress=False)
    with pytest.raises(UserError, match="already exists; choose another --out or pass --overwrite"):
        export(packed, out, ExportConfig(), progress=False)
    export(packed, out, ExportConfig(format="megatron"), overwrite=True, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "train.bin", "train.idx"]
    with pytest.raises(UserError, match="--keep-short-rows is for --format parquet"):
        export(packed, tmp_path / "x", ExportConfig(format="megatron", keep_short_rows=True), progress=False)
    with pytest.raises(UserError, match="--rows-per-shard sizes the Parquet files"):  # it was ignored
        export(packed, tmp_path / "x", ExportConfig(format="megatron", rows_per_shard=100), progress=False)
    with pytest.raises(UserError, match="lies inside .*, which this command reads"):
        export(packed, packed.path / "sub", ExportConfig(), progress=False)
    assert main(["data", "export", str(packed.path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already exists" in err
    with pytest.raises(SystemExit) as exc:  # the flag's own name and its values
        main(["data", "export", str(packed.path), "--out", str(tmp_path / "y"), "--format", "arrow"])
    assert exc.value.code == 2 and "argument --format: invalid choice: 'arrow'" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()


def test_unfinished_pack_is_refused_with_the_fix(tmp_path):
    (tmp_path / "p.partial").mkdir()
    with pytest.raises(UserError, match="unfinished .* run the same `contextlab data pack` command again"):
        export(tmp_path / "p", tmp_path / "out", ExportConfig(), progress=False)


def test_killed_export_leaves_no_out_and_a_rerun_starts_clean(packed, tmp_path, monkeypatch):
    out = tmp_path / "pq"
    real = parquet_mod.write_parquet_split

    def dies(*args, **kw):
        real(*args, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr("contextlab.data.export.write_parquet_split", dies)
    with pytest.raises(KeyboardInterrupt):
        export(packed, out, ExportConfig(rows_per_shard=30), progress=False)
    assert not out.exists() and any((tmp_path / "pq.partial").glob("train-*.parquet"))
    monkeypatch.setattr("contextlab.data.export.write_parquet_split", real)
    assert (
        main(
            ["data", "export", str(packed.path), "--out", str(out), "--rows-per-shard", "50", "--no-progress"]
        )
        == 0
    )
    assert not (tmp_path / "pq.partial").exists()
    assert {p.name.split("-of-")[1] for p in out.glob("*.parquet")} == {
        f"{-(-len(full_ids(packed)) // 50):05d}.parquet"
    }


def test_lengths_in_chunks_and_released_pages_change_nothing(packed, monkeypatch):
    from contextlab.data.export import rows

    monkeypatch.setattr(rows, "_CHUNK", 7)
    assert rows.row_lengths(packed).tolist() == packed.sequence_lengths().tolist()
    before = packed.sequence_tokens(5)[0].tolist()
    rows.release_pages(packed.store.tokens)
    rows.release_pages(np.arange(3))  # an in-memory array: nothing to do
    assert packed.sequence_tokens(5)[0].tolist() == before


def test_hf_model_given_position_ids_masks_documents_within_a_row(packed, tmp_path):
    """The HF recipe of docs/data.md: rows with their position_ids and no attention_mask (use_cache
    off) attend within each document only: logits equal those of each document run alone."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, default_data_collator

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=257, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, use_cache=False, attn_implementation="sdpa",
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    out = tmp_path / "pq"
    export(packed, out, ExportConfig(), progress=False)
    ds = load_parquet(out, tmp_path)["train"].with_format("numpy")
    rows = [r for r in ds.select(range(40)) if (r["position_ids"] == 0).sum() >= 2][:4]
    assert len(rows) == 4
    batch = default_data_collator([{k: r[k] for k in ("input_ids", "position_ids")} for r in rows])
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits  # (4, ROW, V)
        for b, row in enumerate(rows):
            starts = np.flatnonzero(row["position_ids"] == 0).tolist() + [ROW]
            for s, e in zip(starts, starts[1:]):
                alone = model(input_ids=torch.as_tensor(row["input_ids"][s:e])[None].long()).logits[0]
                torch.testing.assert_close(logits[b, s:e], alone, rtol=1e-4, atol=1e-4)
        whole = model(input_ids=batch["input_ids"]).logits  # without position_ids: one causal sequence
    assert not torch.allclose(whole, logits, atol=1e-3)


def test_without_separators_positions_restart_at_each_entry(tmp_path):
    store = make_store(tmp_path, mixed_corpus(30, seed=2))
    cfg = PackConfig(method="ep", context=CONTEXT, seed=0, separator="none")
    pk = pack(store, tmp_path / "ep", cfg, progress=False).packed
    export(pk, tmp_path / "pq", ExportConfig(), progress=False)
    table = pq.read_table(tmp_path / "pq" / "train-00000-of-00001.parquet").to_pydict()
    ids = full_ids(pk)
    assert len(table["input_ids"]) == len(ids) and all(EOT not in row for row in table["input_ids"])
    for r, i in enumerate(ids):
        want = []
        for _, b, e in pk.sequence_entries(i):
            want += list(range(e - b))
        assert table["position_ids"][r] == want[:ROW]
        assert table["input_ids"][r] == pk.sequence_tokens(i)[0].tolist()


def _change_one_token_in_place(store, at: int) -> int:
    """Change the id at position ``at`` of ``store``'s tokens.bin, the file's size the same; the new id."""
    f = store.path / "tokens.bin"
    tokens = np.memmap(f, dtype=store.dtype, mode="r+")
    tokens[at] = new = (int(tokens[at]) + 1) % 256
    tokens.flush()
    del tokens
    return new


def test_a_token_store_changed_in_place_after_packing_is_refused(tmp_path, capsys):
    """export and pack-stats read the tokens, so they check the store's content hash as pack and
    train do (opening the packed store compares meta.json's hash only, blind to an edit in place)."""
    store = make_store(tmp_path, mixed_corpus(30, seed=2))
    cfg = PackConfig(method="ep", context=CONTEXT, val_fraction=0)
    pk = pack(store, tmp_path / "ep", cfg, progress=False).packed
    new = _change_one_token_in_place(store, 10)
    with pytest.raises(UserError, match=r"store .* changed after it was written: its content hash is "):
        export(pk.path, tmp_path / "pq", ExportConfig(), progress=False)
    assert not (tmp_path / "pq").exists() and not (tmp_path / "pq.partial").exists()
    for argv in (
        ["data", "export", str(pk.path), "--out", str(tmp_path / "pq"), "--no-progress"],
        ["data", "pack-stats", str(pk.path), "--no-plot", "--no-progress"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "changed after it was written" in err and "--no-verify" in err
    # --no-verify uses the store as it is: the exported row holds the changed token
    cli = ["data", "export", str(pk.path), "--out", str(tmp_path / "pq"), "--no-progress", "--no-verify"]
    assert main(cli) == 0
    table = pq.read_table(tmp_path / "pq" / "train-00000-of-00001.parquet").to_pydict()
    row = [r for r, i in enumerate(full_ids(pk)) if 10 in _token_positions(pk, i)]
    assert row and new in table["input_ids"][row[0]]
    assert main(["data", "pack-stats", str(pk.path), "--no-plot", "--no-progress", "--no-verify"]) == 0


def _token_positions(packed, i):
    """The positions in tokens.bin of sequence i's tokens."""
    ends = packed.store.offsets
    return {int(ends[d]) + t for d, b, e in packed.sequence_entries(i) for t in range(b, e)}


def test_megatron_export_without_separators_says_boundaries_are_lost(tmp_path, capsys):
    """--separator none leaves Megatron no end-of-text token to find documents by; the export wrote
    eod_id null silently. One note: line says so and what to do; Parquet and packs with separators
    get none."""
    store = make_store(tmp_path, mixed_corpus(30, seed=2))
    cfg = PackConfig(method="ep", context=CONTEXT, separator="none", val_fraction=0)
    pk = pack(store, tmp_path / "ep", cfg, progress=False).packed
    capsys.readouterr()
    rec = export(pk, tmp_path / "mg", ExportConfig(format="megatron"), progress=False).record
    assert rec["eod_id"] is None
    assert capsys.readouterr().err == (
        f"note: {pk.path} was packed with --separator none, so its rows hold no end-of-text token and "
        "Megatron cannot see where documents end (eod_id is null); export --format parquet "
        "(position_ids and document_ids mark them) or pack with --separator eot\n"
    )
    export(pk, tmp_path / "pq", ExportConfig(), progress=False)
    cfg = PackConfig(method="ep", context=CONTEXT, val_fraction=0)
    with_eot = pack(store, tmp_path / "eot", cfg, progress=False).packed
    export(with_eot, tmp_path / "mg_eot", ExportConfig(format="megatron"), progress=False)
    assert capsys.readouterr().err == ""


def test_the_tokens_of_the_short_rows_left_out_are_said(packed, tmp_path, capsys):
    """A user's export said "4 short rows left out" of 38,310 tokens, 9.6% of the pack."""
    lengths = np.asarray(packed.sequence_lengths())
    lost = int(lengths[lengths < ROW].sum())
    out = tmp_path / "pq"
    assert main(["data", "export", str(packed.path), "--out", str(out), "--no-progress"]) == 0
    record = json.loads((out / "export.json").read_text())
    assert record["short_row_tokens_left_out"] == lost > 0 and record["packed_tokens"] == int(lengths.sum())
    share = 100 * lost / lengths.sum()
    assert (
        f"short rows left out ({lost:,} tokens, {share:.1f}% of the packed ones)" in capsys.readouterr().out
    )


def test_a_packed_store_given_to_model_export_names_data_export(packed, tmp_path, capsys):
    """`contextlab export PACKED` said "has no checkpoints ...; train first"."""
    assert main(["export", str(packed.path), "--out", str(tmp_path / "hf")]) == 2
    said = capsys.readouterr().err
    assert "is a packed store" in said and "`contextlab data export` writes its rows" in said
    assert f"its token store ({packed.store.path})" in " ".join(said.split())
    assert "train first" not in said and not (tmp_path / "hf").exists()


def test_one_row_is_said_in_the_singular():
    """ "validation 1 rows / 16,385 tokens" in a user's export line."""
    from contextlab.cli.export_data import splits_text

    assert splits_text(
        {"train": {"rows": 22, "tokens": 360_470}, "validation": {"rows": 1, "tokens": 16_385}}
    ) == ("train 22 rows / 360,470 tokens, validation 1 row / 16,385 tokens")
