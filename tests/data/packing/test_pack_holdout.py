"""``data pack --val-fraction``: the documents held out for validation are drawn once from the token
store, packed by no method, and every run on a packing of that store validates on them, so an EP and a
SPLICE run (and a data.store run with the same split) score the same rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextlab.cli import main
from contextlab.data.packing import PackConfig, PackedStore, pack
from contextlab.data.packing.packed_store import packed_split
from contextlab.data.training import build_training_data
from contextlab.data.views import split_documents
from contextlab.errors import UserError
from contextlab.train.config import DataSection, MixtureSource
from tests.data.packing.helpers import EOT, make_store, mixed_corpus

CONTEXT = 15


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("holdout"), mixed_corpus(60))


@pytest.fixture(scope="module")
def packs(store, tmp_path_factory):
    """EP, SPLICE-BM25 and within-domain EP packings of one store, 10% of its documents held out."""
    root = tmp_path_factory.mktemp("packs")
    methods = {"ep": {}, "splice": {"retriever": "bm25"}, "ep-domain": {}}
    return {
        m: pack(
            store,
            root / m,
            PackConfig(method=m, context=CONTEXT, val_fraction=0.1, shards=3, **kw),
            progress=False,
        ).packed
        for m, kw in methods.items()
    }


def _packed_docs(p: PackedStore) -> set[int]:
    return set(np.asarray(p.entries)[:, 0].tolist())


def test_every_packing_holds_out_the_documents_a_store_run_holds_out(store, packs):
    held = split_documents(store, 0.1, 0)[1].indices  # what data.store with val_fraction 0.1 holds out
    assert len(held) == 6
    for method, p in packs.items():
        assert np.array_equal(p.heldout_documents(), held), method
        assert _packed_docs(p) == set(range(store.n_docs)) - set(held.tolist()), method
        assert p.meta["heldout"] == {
            "val_fraction": 0.1,
            "split_seed": 0,
            "documents": 6,
            "tokens": int(store.lengths()[held].sum()),
        }
        assert sum(s["n_docs"] for s in p.meta["shards"]) == store.n_docs - 6


def test_the_repo_retriever_reads_the_rows_of_the_documents_it_packs(store, tmp_path):
    """Held-out documents leave gaps in a shard's documents; the repo retriever relates the others by
    their own paths (a row read for the wrong document would pair files of other folders)."""
    cfg = PackConfig(method="splice", retriever="repo", context=9_999, separator="none", val_fraction=0.2)
    p = pack(store, tmp_path / "repo", cfg, progress=False).packed
    paths = [m["path"] for m in store.docs_meta()]
    held = set(p.heldout_documents().tolist())
    order = [int(d) for d in np.asarray(p.entries)[:, 0]]
    assert not held & set(order) and len(order) == store.n_docs - len(held)
    folders = [paths[d].split("/")[0] for d in order]
    assert sum(a != b for a, b in zip(folders, folders[1:])) == 3  # depth-first: each folder once


def test_ep_and_splice_runs_validate_on_the_same_rows_as_a_store_run(store, packs):
    """The validation rows of both packings are the windows over the held-out documents, byte for byte
    those of a data.store run with that val_fraction and split_seed; no training row holds their text."""
    args = dict(context=CONTEXT, rows=4, seed=1, val_tokens=10 * CONTEXT)
    built = {m: build_training_data(DataSection(packed=str(p.path)), **args) for m, p in packs.items()}
    plain = build_training_data(DataSection(store=str(store.path), val_fraction=0.1), **args)
    assert plain.val_rows_total == 10
    for method, data in built.items():
        assert np.array_equal(data.val_rows, plain.val_rows), method
        assert data.val_rows_hash == plain.val_rows_hash and data.val_documents == plain.val_documents
    assert (
        built["ep"].more_validation == "raise train.val_tokens (the held-out text gives 49 rows; 10 are read)"
    )
    all_read = build_training_data(DataSection(packed=str(packs["ep"].path)), **{**args, "val_tokens": 10**6})
    assert all_read.more_validation == "pack with a larger --val-fraction (it held out 0.1 of the documents)"
    assert plain.more_validation == built["ep"].more_validation  # what a few-documents note advises
    mixed = build_training_data(DataSection(store=str(store.path), val_fraction=0.2), **args)
    assert mixed.val_rows_hash != plain.val_rows_hash  # other documents: other rows, another hash
    held = set(packs["ep"].heldout_documents().tolist())
    loader = built["splice"].loader
    full = packs["splice"].sequence_lengths() == CONTEXT + 1
    assert loader.source.n_rows == full.sum()  # every full sequence trains
    trained = {
        int(d) for i in loader.source.doc_order for d in packs["splice"].sequence_entries(int(i))[:, 0]
    }
    assert not trained & held


def test_a_mixture_of_packings_of_one_store_reads_its_held_out_windows_once(store, packs):
    """Two packings of one store hold out the same documents: their shares of the validation rows are
    read on along one stream of windows (each share from the start gave every row twice)."""
    mix = [MixtureSource(packed=str(packs["ep"].path), weight=0.5)]
    mix.append(MixtureSource(packed=str(packs["splice"].path), weight=0.5))
    args = dict(context=CONTEXT, rows=4, seed=1, val_tokens=8 * CONTEXT)
    data = build_training_data(DataSection(mixture=mix), **args)
    alone = build_training_data(DataSection(packed=str(packs["ep"].path)), **args)
    assert data.val_rows_total == 8 and len({tuple(r) for r in data.val_rows.tolist()}) == 8
    assert np.array_equal(data.val_rows, alone.val_rows) and data.val_rows_hash == alone.val_rows_hash


@pytest.mark.parametrize("other", ["split_seed", "val_fraction", "sequences"])
def test_a_mixture_of_packings_holding_out_other_text_of_one_store_is_refused(store, packs, tmp_path, other):
    """A packing that holds out other documents, or sequences, trains on the text the other validates
    on: the run's validation loss would be in-sample, so it does not start."""
    kw = {"split_seed": {"split_seed": 1, "val_fraction": 0.1}, "val_fraction": {"val_fraction": 0.2}}
    kw["sequences"] = {"val_fraction": 0}
    p = pack(store, tmp_path / other, PackConfig(context=CONTEXT, **kw[other]), progress=False).packed
    mix = [MixtureSource(packed=str(packs["ep"].path)), MixtureSource(packed=str(p.path))]
    with pytest.raises(UserError) as e:
        build_training_data(DataSection(mixture=mix), context=CONTEXT, rows=4, seed=1, val_tokens=CONTEXT)
    said = {
        "split_seed": "6 documents (val_fraction 0.1, split_seed 1)",
        "val_fraction": "12 documents (val_fraction 0.2, split_seed 0)",
        "sequences": "sequences (packed with --val-fraction 0)",
    }
    assert f"hold out 6 documents (val_fraction 0.1, split_seed 0) and {said[other]}" in str(e.value)
    assert "so each trains on text the other validates on; pack both with one --val-fraction" in str(e.value)
    val = make_store(tmp_path, mixed_corpus(8, seed=5), name=f"val_{other}")  # a validation store: no overlap
    data = build_training_data(
        DataSection(mixture=mix, val_store=str(val.path)), context=CONTEXT, rows=4, seed=1, val_tokens=CONTEXT
    )
    assert data.val_rows_total == 1


def test_held_out_documents_too_short_for_a_window_are_said_by_pack_and_train(store, tmp_path, capsys):
    held = split_documents(store, 0.02, 0)[1].indices
    context = int(store.lengths()[held].sum()) + 1  # more than their tokens and separator: no window
    p = pack(store, tmp_path / "p", PackConfig(context=context, val_fraction=0.02), progress=False).packed
    assert f"makes no window of {context + 1:,} tokens, so a run on this pack has nothing to validate on" in (
        capsys.readouterr().err
    )
    with pytest.raises(UserError, match="pack with a larger --val-fraction or another --split-seed or use"):
        build_training_data(DataSection(packed=str(p.path)), context=context, rows=1, seed=1, val_tokens=1)


def test_a_held_out_share_far_above_the_fraction_asked_is_said(tmp_path, capsys):
    few = make_store(tmp_path, {f"d{i}.txt": "w1 w2 w3 " * 9 for i in range(3)}, name="few")
    pack(few, tmp_path / "few_p", PackConfig(context=CONTEXT, val_fraction=0.02), progress=False)
    err = capsys.readouterr().err
    assert "note: the 1 document held out for validation (" in err
    assert "is 1 of the store's 3 documents" in err and "more than --val-fraction 0.02 asks" in err
    many = make_store(tmp_path, mixed_corpus(20, seed=1), name="many")
    pack(many, tmp_path / "many_p", PackConfig(context=CONTEXT, val_fraction=0.9), progress=False)
    assert "so the pack trains on 2 of its 20 documents; a smaller --val-fraction" in capsys.readouterr().err
    pack(many, tmp_path / "usual", PackConfig(context=CONTEXT, val_fraction=0.1), progress=False)
    assert capsys.readouterr().err == ""


def test_a_pack_holding_out_nothing_keeps_its_fingerprint_and_splits_sequences(store, tmp_path, capsys):
    """Packs made before --val-fraction existed: same fingerprint as --val-fraction 0, a run on one
    holds out its sequences, and asking for the default names the difference."""
    out = tmp_path / "old"
    p = pack(store, out, PackConfig(context=CONTEXT, val_fraction=0), progress=False).packed
    assert p.heldout_documents() is None and not (out / "heldout.npy").exists()
    meta = json.loads((out / "meta.json").read_text())
    del meta["config"]["val_fraction"], meta["config"]["split_seed"]  # as written before the option
    (out / "meta.json").write_text(json.dumps(meta))
    assert pack(store, out, PackConfig(context=CONTEXT, val_fraction=0), progress=False).up_to_date
    with pytest.raises(UserError, match=r"val_fraction 0.0 there, 0.02 now"):
        pack(store, out, PackConfig(context=CONTEXT), progress=False)
    data = build_training_data(
        DataSection(packed=str(out), val_fraction=0.1), context=CONTEXT, rows=4, seed=1, val_tokens=CONTEXT
    )
    train_ids = packed_split(p, 0.1, 0)[0]  # its sequences, held out as before
    assert data.loader.source.n_rows == (p.sequence_lengths()[train_ids] == CONTEXT + 1).sum()
    assert data.loader.source.n_rows < (p.sequence_lengths() == CONTEXT + 1).sum()


def test_a_store_of_one_document_holds_out_none_and_says_so(tmp_path, capsys):
    one = make_store(tmp_path, {"only.txt": "word " * 400})
    p = pack(one, tmp_path / "p", PackConfig(context=CONTEXT), progress=False).packed
    assert p.heldout_documents() is None and p.meta["config"]["val_fraction"] == 0.0
    err = capsys.readouterr().err
    assert "has 1 document, so none is held out for validation" in err and "data.val_store" in err


def test_the_command_line_says_what_it_held_out_and_refuses_a_bad_fraction(store, tmp_path, capsys):
    args = ["data", "pack", str(store.path), "--context", str(CONTEXT), "--no-progress", "--out"]
    assert main([*args, str(tmp_path / "p"), "--val-fraction", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "from 57 of 60 documents (3 held out for validation" in out and "val_fraction 0.05)" in out
    assert main([*args, str(tmp_path / "q"), "--val-fraction", "1"]) == 2
    assert "val_fraction must be in [0, 1), got 1.0" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()


def _parquet_rows(out, split: str) -> dict[str, list]:
    import pyarrow.parquet as pq

    tables = [pq.read_table(f) for f in sorted(out.glob(f"{split}-*.parquet"))]
    return {
        c: [r for t in tables for r in t.column(c).to_pylist()]
        for c in ("input_ids", "position_ids", "document_ids")
    }


def test_a_data_export_writes_the_held_out_documents_as_the_runs_validation_rows(
    store, packs, tmp_path, capsys
):
    """The validation split of an export is the windows a run on the pack validates on (its first rows
    are that run's validation rows, whatever the run's data.split_seed: the pack's split_seed orders
    them); positions restart at each document and document ids are the store's; the train split holds
    none of those documents."""
    from contextlab.data.export import ExportConfig, export

    out = tmp_path / "pq"
    rec = export(packs["splice"], out, ExportConfig(), progress=False).record
    run = build_training_data(
        DataSection(packed=str(packs["ep"].path), split_seed=3),
        context=CONTEXT,
        rows=4,
        seed=1,
        val_tokens=10 * CONTEXT,
    )
    val = _parquet_rows(out, "validation")
    assert rec["splits"]["validation"]["rows"] == len(val["input_ids"]) > 10
    assert np.array_equal(np.array(val["input_ids"][:10]), run.val_rows)
    assert rec["validation"] == {"from": "heldout documents", **packs["splice"].meta["heldout"]}
    export(packs["splice"], tmp_path / "seed3", ExportConfig(split_seed=3), progress=False)
    assert "follow the split_seed it was packed with (0)" in capsys.readouterr().err
    assert _parquet_rows(tmp_path / "seed3", "validation") == val
    split_seed = 0
    held_ids = packs["splice"].heldout_documents()
    stream, owner = [], []  # the held-out documents end to end in the seeded order, each with its EOT
    for d in held_ids[np.random.default_rng(split_seed).permutation(len(held_ids))]:
        stream += [*store.doc(int(d)).tolist(), EOT]
        owner += [int(d)] * (len(store.doc(int(d))) + 1)
    for r, (toks, pos, docs) in enumerate(zip(val["input_ids"], val["position_ids"], val["document_ids"])):
        assert toks == stream[r * CONTEXT : r * CONTEXT + CONTEXT + 1]  # windows share one token
        assert docs == owner[r * CONTEXT : r * CONTEXT + CONTEXT + 1]
        starts = [j == 0 or docs[j] != docs[j - 1] for j in range(len(docs))]  # restart at 0 there
        assert all(pos[j] == (0 if starts[j] else pos[j - 1] + 1) for j in range(len(docs)))
    assert len(val["input_ids"]) == (len(stream) - 1) // CONTEXT  # every full window
    trained = {d for docs in _parquet_rows(out, "train")["document_ids"] for d in docs}
    assert trained and not trained & set(held_ids.tolist())


def test_a_megatron_export_of_a_holdout_pack_has_the_same_validation_rows(packs, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from contextlab.data.export import ExportConfig, export

    export(packs["ep"], tmp_path / "pq", ExportConfig(), progress=False)
    export(packs["ep"], tmp_path / "mg", ExportConfig(format="megatron"), progress=False)
    want = _parquet_rows(tmp_path / "pq", "validation")["input_ids"]
    ds = IndexedDataset(str(tmp_path / "mg" / "validation"))
    assert [ds[r].tolist() for r in range(len(ds))] == want


def test_a_pack_without_separators_validates_and_exports_without_them(store, tmp_path):
    """--separator none: the held-out windows carry no end-of-text either (they did: a model trained
    without the token was validated on it, and the Megatron export said eod_id null over EOTs)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from contextlab.data.export import ExportConfig, export

    cfg = PackConfig(method="ep", context=CONTEXT, val_fraction=0.1, separator="none")
    bare = pack(store, tmp_path / "bare", cfg, progress=False).packed
    data = build_training_data(
        DataSection(packed=str(bare.path)), context=CONTEXT, rows=4, seed=1, val_tokens=10**6
    )
    assert data.val_rows.size and not (data.val_rows == EOT).any()
    held = np.concatenate([store.doc(int(d)) for d in bare.heldout_documents()])
    assert not (held == EOT).any()  # the text holds none of its own
    export(bare, tmp_path / "mg", ExportConfig(format="megatron"), progress=False)
    ds = IndexedDataset(str(tmp_path / "mg" / "validation"))
    assert len(ds) and not any((ds[r] == EOT).any() for r in range(len(ds)))


def test_a_data_export_of_a_pack_holding_documents_out_refuses_a_sequence_split(packs, tmp_path, capsys):
    argv = ["data", "export", str(packs["ep"].path), "--out", str(tmp_path / "x"), "--no-progress"]
    assert main([*argv, "--val-fraction", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "holds 6 documents out of its sequences for validation" in err
    assert "those documents are exported as the validation split" in err
    assert main(argv) == 0
    assert "(windows over the 6 documents the pack held out)" in capsys.readouterr().out


def test_held_out_documents_too_short_for_a_window_give_no_validation_split(store, tmp_path, capsys):
    from contextlab.data.export import ExportConfig, export

    held = split_documents(store, 0.02, 0)[1].indices
    context = int(store.lengths()[held].sum()) + 1  # one more than their tokens: no full window
    p = pack(store, tmp_path / "p", PackConfig(context=context, val_fraction=0.02), progress=False).packed
    rec = export(p, tmp_path / "x", ExportConfig(), progress=False).record
    assert list(rec["splits"]) == ["train"] and rec["validation"] is None
    err = capsys.readouterr().err
    assert f"holds out 1 document for validation ({context - 1:,} tokens), too few for one window" in err
    assert f"window of {context + 1:,} tokens, so the export has no validation split" in err


def test_a_val_store_beside_a_pack_holding_documents_out_says_they_go_unused(store, packs, tmp_path):
    other = make_store(tmp_path, mixed_corpus(8, seed=3), name="val")
    args = dict(context=CONTEXT, rows=4, seed=1, val_tokens=2 * CONTEXT)
    data = build_training_data(DataSection(packed=str(packs["ep"].path), val_store=str(other.path)), **args)
    (note,) = data.notes
    assert note.startswith(f"note: {packs['ep'].path} was packed without 6 documents")
    assert "pack with --val-fraction 0 to train on every document" in note
    assert not build_training_data(DataSection(packed=str(packs["ep"].path)), **args).notes


def test_pack_stats_names_the_held_out_documents(packs):
    from contextlab.data.packing import pack_stats
    from contextlab.data.packing.stats import format_pack_stats, stats_record

    stats = pack_stats(packs["splice"], progress=False)
    assert stats_record(stats)["heldout"]["documents"] == 6
    lines = format_pack_stats(stats).splitlines()
    assert (
        lines[2].startswith("held out       6 documents (") and "val_fraction 0.1, split_seed 0" in lines[2]
    )


def test_an_unfinished_pack_with_another_setting_is_refused_naming_it(store, tmp_path):
    """A killed pack resumed with another --val-fraction said only 'another config or store'."""
    out = tmp_path / "p"
    pack(store, out, PackConfig(context=CONTEXT, shards=3), progress=False, only_shards=[0])
    with pytest.raises(
        UserError, match=r"p.partial holds an unfinished pack \(val_fraction 0.02 there, 0.1 now\)"
    ):
        pack(store, out, PackConfig(context=CONTEXT, shards=3, val_fraction=0.1), progress=False)
    assert pack(store, out, PackConfig(context=CONTEXT, shards=3), progress=False).packed is not None
