"""``--split run``: an evaluation reads exactly what the run held out for validation (whole
documents, document tails, the text of no training sequence, or its validation store),
on the run's own store by default, and refuses another store or a model that is no run."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from contextlab.cli import main
from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.packing.packed_store import PackedStore, packed_split
from contextlab.data.store import TokenStore
from contextlab.data.views import split_documents, split_tail
from contextlab.errors import UserError
from contextlab.eval import heldout
from contextlab.train.config import RunConfig
from contextlab.train.trainer import train
from tests.conftest import shakespeare
from tests.train.test_moved_data import TINY


def pack_argv(project, *extra: str) -> list[str]:
    """`contextlab data pack` of the project's store at context 32, with ``extra`` options."""
    return ["data", "pack", str(project / "store"), "--context", "32", "--no-progress", *extra]


def _config(out_dir, context: int = 32, **data) -> RunConfig:
    cfg = json.loads(json.dumps(TINY))
    cfg["data"] = {"val_split": "documents", "val_fraction": 0.1, "split_seed": 3, **data}
    cfg["train"].update(out_dir=str(out_dir), max_steps=2, context=context, tokens_per_step=4 * context)
    return from_dict(RunConfig, cfg)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A store of 40 documents (200-1,370 bytes), another of other text, and a run on the first."""
    root = tmp_path_factory.mktemp("heldout")
    text = shakespeare(60_000)
    (root / "docs").mkdir()
    at = 0
    for i in range(40):
        n = 200 + 30 * i
        (root / "docs" / f"d{i:02d}.txt").write_text(text[at : at + n])
        at += n
    (root / "other.txt").write_text(text[at : at + 5_000])
    for src, name in (("docs", "store"), ("other.txt", "other")):
        ingest(root / src, root / name, IngestConfig(tokenizer="byte"), progress=False)
    train(_config(root / "run", store=str(root / "store")))
    return root


def _eval(root, out, *args) -> tuple[int, dict]:
    code = main(["eval", *args, "--model", str(root / "run"), "--out", str(out), "--no-progress"])
    return code, json.loads((out / f"{args[0]}.json").read_text()) if code == 0 else {}


def test_documents_are_the_ones_training_held_out(project):
    store = TokenStore(project / "store")
    view, held = heldout.documents(store, str(project / "run"), "run")
    _, val = split_documents(store, 0.1, 3)
    assert view.indices.tolist() == val.indices.tolist() and len(view) == 4
    assert held == {
        "split": "run",
        "held_out": "val_fraction 0.1 of the documents, split_seed 3",
        "documents": 4,
        "tokens": int(store.lengths()[val.indices].sum()),
        "held_out_id": heldout.view_id(view),
        "held_out_by": str((project / "run").resolve()),
    }
    every, nothing = heldout.documents(store, str(project / "run"), "all")
    assert len(every) == 40 and nothing == {}


def test_eval_split_run_reads_the_held_out_documents_of_the_run_store(project, tmp_path, capsys):
    store = TokenStore(project / "store")
    ids = split_documents(store, 0.1, 3)[1].indices
    capsys.readouterr()
    code, doc = _eval(project, tmp_path / "ppl", "ppl", "--split", "run")  # no --data: the run's store
    captured = capsys.readouterr()
    assert code == 0 and "trained on" not in captured.err
    assert "split run: 4 held-out documents" in captured.out
    assert doc["data"]["store"] == str(project / "store") and doc["data"]["split"] == "run"
    assert "training_store" not in doc["data"]
    assert doc["results"]["n_documents"] == 4
    assert doc["results"]["n_tokens_scored"] == int(store.lengths()[ids].sum()) - 4
    assert main(["report", str(tmp_path / "ppl")]) == 0
    page = (tmp_path / "ppl" / "report.html").read_text()
    assert (
        "read on what the run held out</b> (val_fraction 0.1 of the documents, split_seed 3): 4 documents"
        in page
    )
    every = tmp_path / "ppl-all"
    code, whole = _eval(project, every, "ppl", "--data", str(project / "store"))
    assert code == 0 and whole["data"]["training_store"] is True and whole["results"]["n_documents"] == 40
    assert "or --split run (what the run held out)" in capsys.readouterr().err

    code, cw = _eval(project, tmp_path / "cw", "contextwise", "--split", "run")
    pieces = np.load(tmp_path / "cw" / cw["arrays"]["pieces"])
    assert code == 0 and set(pieces[:, 0]) <= set(ids.tolist()) and len(pieces) > 4
    assert cw["data"]["documents"] == 4 and "training_store" not in cw["data"]

    code, bf = _eval(
        project, tmp_path / "bf", "bayes-fit", "--split", "run", "--lengths", "1,2,4,8", "--samples", "24"
    )
    targets = np.load(tmp_path / "bf" / bf["arrays"]["targets"])
    assert code == 0 and set(targets[:, 0]) <= set(ids.tolist())
    assert all(8 <= t < store.lengths()[d] for d, t in targets)


def test_another_store_and_a_model_that_is_no_run_are_refused(project, tmp_path):
    with pytest.raises(
        UserError, match=r"trained on .*store, not on .*other: --split run reads the run's own"
    ):
        heldout.documents(TokenStore(project / "other"), str(project / "run"), "run")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(UserError, match="is no contextlab run, checkpoint, or export"):
        heldout.run_source(str(tmp_path / "hf"))
    code, _ = _eval(project, tmp_path / "x", "ppl", "--split", "run", "--data", str(project / "other"))
    assert code != 0


def test_a_store_written_again_in_the_runs_own_place_is_named_as_changed(project, tmp_path):
    """A run's store ingested again (--overwrite, other text) was refused with "trained on STORE, not on
    STORE: ... (leave --data out)", where --data was already left out; the store had changed."""
    import shutil

    root = tmp_path / "p"
    shutil.copytree(project / "docs", root / "docs")
    ingest(root / "docs", root / "store", IngestConfig(tokenizer="byte"), progress=False)
    train(_config(root / "run", store=str(root / "store")))
    (root / "docs" / "d00.txt").write_text("other text now " * 30)
    ingest(root / "docs", root / "store", IngestConfig(tokenizer="byte"), overwrite=True, progress=False)
    with pytest.raises(UserError, match=r"store is where .*run read its data, but it changed since the run"):
        heldout.documents(TokenStore(root / "store"), str(root / "run"), "run")


def test_tail_validation_reads_every_document_tail(project, tmp_path):
    train(_config(tmp_path / "tail", store=str(project / "store"), val_split="tail"))
    store = TokenStore(project / "store")
    view, held = heldout.documents(store, str(tmp_path / "tail"), "run")
    _, val = split_tail(store, 0.1)
    assert len(view) == 40 and held["held_out"].startswith("the last 0.1 of every document's tokens")
    assert [view.doc(i).tolist() for i in (0, 39)] == [val.doc(i).tolist() for i in (0, 39)]
    assert len(view.doc(0)) == store.lengths()[0] - int(store.lengths()[0] * 0.9)
    with pytest.raises(UserError, match="tail.*not whole files"):
        heldout.documents(store, str(tmp_path / "tail"), "run", whole=True)


def test_a_validation_store_is_read_whole_and_is_the_default(project, tmp_path):
    run = tmp_path / "vs"
    train(_config(run, store=str(project / "store"), val_store=str(project / "other")))
    assert heldout.default_store(str(run)) == str(project / "other")
    view, held = heldout.documents(TokenStore(project / "other"), str(run), "run")
    assert len(view) == 1 and held["held_out"].startswith("its validation store")
    with pytest.raises(UserError, match="held out a separate store, data.val_store"):
        heldout.documents(TokenStore(project / "store"), str(run), "run")


def _packed_run(project, tmp_path, context: int):
    packed = tmp_path / f"packed{context}"
    args = ["data", "pack", str(project / "store"), "--method", "ep", "--context", str(context)]
    args += ["--val-fraction", "0"]  # every document packed: the run holds out sequences
    assert main([*args, "--out", str(packed), "--no-progress"]) == 0
    run = tmp_path / f"pk{context}"
    train(_config(run, context, packed=str(packed), mode="packed", val_fraction=0.3))
    return packed, run


def _covered(view) -> set[tuple[int, int]]:
    """Every (document, token) a view reads; its pieces of one document neither overlap nor meet."""
    out: set[tuple[int, int]] = set()
    last = (-1, -1)
    for d, b, e in sorted(zip(view.indices.tolist(), view.begin.tolist(), view.end.tolist())):
        assert (d, b) > last and not (d == last[0] and b <= last[1]), "pieces overlap or meet"
        out.update((d, t) for t in range(b, e))
        last = (d, e)
    return out


def _unseen(store, packs, fraction: float = 0.3, seed: int = 3) -> set[tuple[int, int]]:
    """What no training sequence of ``packs`` holds, token by token: documents with no trained token
    whole, and of the others the tokens of held-out sequences."""
    trained, held = set(), set()
    for path in packs:
        ps = PackedStore(path)
        for ids, into in zip(packed_split(ps, fraction, seed), (trained, held)):
            for i in ids:
                for d, b, e in ps.sequence_entries(int(i)).tolist():
                    into.update((d, t) for t in range(b, e))
    seen = {d for d, _ in trained}
    lengths = store.lengths()
    whole = {(d, t) for d in range(store.n_docs) if d not in seen for t in range(int(lengths[d]))}
    return whole | {x for x in held - trained if x[0] in seen}


def test_a_packed_run_holds_out_the_text_of_no_training_sequence(project, tmp_path):
    packed, run = _packed_run(project, tmp_path, 1024)  # most documents fit one sequence
    assert heldout.default_store(str(run)) == str(project / "store")
    store = TokenStore(project / "store")
    view, held = heldout.documents(store, str(run), "run")
    assert _covered(view) == _unseen(store, [packed]) and len(view) > 0
    p = PackedStore(packed)
    seen = {int(d) for i in packed_split(p, 0.3, 3)[0] for d in p.sequence_entries(int(i))[:, 0]}
    files = heldout.documents(store, str(run), "run", whole=True)[0]  # infill: whole files only
    assert files.indices.tolist() == sorted(set(range(40)) - seen)
    assert (files.end - files.begin).tolist() == store.lengths()[files.indices].tolist()
    assert held["held_out"].startswith("the text of no training sequence, data.packed with val_fraction 0.3")
    assert held["documents"] == len(set(view.indices.tolist())) and held["tokens"] == len(_covered(view))


def test_a_packed_run_of_documents_longer_than_the_context_reads_its_held_out_sequences(project, tmp_path):
    """Every document spans dozens of 33-token sequences, so none is unseen whole: the held-out part is
    the pieces of held-out sequences, joined where they meet (it was refused); whole files are refused."""
    packed, run = _packed_run(project, tmp_path, 32)
    store = TokenStore(project / "store")
    view, held = heldout.documents(store, str(run), "run")
    covered = _covered(view)
    assert covered == _unseen(store, [packed]) and len(covered) > 0.2 * store.n_tokens
    others = len(set(view.indices.tolist()))  # documents with a held-out sequence: most of the 40
    assert held["held_out"].endswith(f"0 whole documents and {len(view):,} pieces of {others} others")
    assert others >= 30 and held["documents"] == others
    assert len(set(view.indices[:others].tolist())) == others  # first pieces first: every document in N
    assert (view.end - view.begin).max() >= 66  # consecutive held-out sequences of a document joined
    with pytest.raises(UserError, match="none is unseen whole, as files are read"):
        heldout.documents(store, str(run), "run", whole=True)
    argv = ["eval", "contextwise", "--model", str(run), "--length", "33", "--split", "run", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "cw")]) == 0
    doc = json.loads((tmp_path / "cw" / "contextwise.json").read_text())
    assert doc["data"]["split"] == "run"
    pieces = np.load(tmp_path / "cw" / "contextwise.pieces.npy")
    assert {(int(d), int(s) + t) for d, s in pieces for t in range(33)} <= covered
    assert doc["results"]["n_documents"] == len({int(d) for d, _ in pieces})  # the store's, not pieces
    ppl_argv = ["eval", "ppl", "--model", str(run), "--split", "run", "--context", "32", "--no-progress"]
    assert main([*ppl_argv, "--out", str(tmp_path / "p")]) == 0
    ppl = json.loads((tmp_path / "p" / "ppl.json").read_text())
    ids = np.load(tmp_path / "p" / "ppl.doc_ids.npy")  # per scored piece, the store's document
    assert ids.tolist() == view.indices.tolist() and ppl["results"]["n_pieces"] == len(view)
    assert ppl["results"]["n_documents"] == others and ppl["data"]["texts_scored"] == len(view)
    _, wide = _packed_run(project, tmp_path, 1024)  # another packing of the store: other sequences held out
    with pytest.raises(
        UserError,
        match=r"\(packed data .*packed32 against .*packed1024: a run on a store packed with --val-fraction 0",
    ):
        heldout.shared_run([str(run), str(wide)], store)


def test_a_mixture_run_holds_out_per_store_what_no_training_sequence_holds(project, tmp_path, capsys):
    """A mixture of packed stores made from two token stores: --split run reads, of the store given,
    the documents no training sequence of its packed stores holds; without --data it asks which."""
    text = shakespeare(120_000)[70_000:]
    (tmp_path / "more").mkdir()
    for i in range(20):
        (tmp_path / "more" / f"m{i:02d}.txt").write_text(text[i * 900 : i * 900 + 300 + 25 * i])
    ingest(tmp_path / "more", tmp_path / "more_store", IngestConfig(tokenizer="byte"), progress=False)
    packed = []
    for name in ("store", "more_store"):
        source = project / name if name == "store" else tmp_path / name
        args = ["data", "pack", str(source), "--method", "ep", "--context", "1024", "--no-progress"]
        args += ["--val-fraction", "0"]
        assert main([*args, "--out", str(tmp_path / f"pk_{name}")]) == 0
        packed.append(tmp_path / f"pk_{name}")
    run = tmp_path / "mix"
    mixture = [{"packed": str(p), "weight": 0.5} for p in packed]
    train(_config(run, 1024, mixture=mixture, mode="packed", val_fraction=0.3))
    for p, store in zip(packed, (TokenStore(project / "store"), TokenStore(tmp_path / "more_store"))):
        view, held = heldout.documents(store, str(run), "run")
        assert _covered(view) == _unseen(store, [p]) and len(view) > 0
        assert held["held_out"].startswith("the text of no training sequence of the mixture's stores")
    with pytest.raises(UserError, match="made from 2 token stores .*; give --data the one"):
        heldout.default_store(str(run))
    with pytest.raises(UserError, match=r"made from .*, not from .*other: give --data one of them"):
        heldout.documents(TokenStore(project / "other"), str(run), "run")
    assert heldout.shared_run([str(run)], TokenStore(tmp_path / "more_store")) == str(run.resolve())
    args = ["eval", "ppl", "--model", str(run), "--split", "run", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "e0")]) == 2  # a usage error: which store to read
    assert "give --data the one whose held-out part to read" in capsys.readouterr().err
    assert main([*args, "--data", str(tmp_path / "more_store"), "--out", str(tmp_path / "e1")]) == 0
    doc = json.loads((tmp_path / "e1" / "ppl.json").read_text())
    assert doc["data"]["split"] == "run" and doc["data"]["documents"] == len(
        heldout.documents(TokenStore(tmp_path / "more_store"), str(run), "run")[0]
    )
    packed[1].rename(tmp_path / "moved_away")  # the other packing may hold this store's text: unknown
    with pytest.raises(
        UserError, match="packed store not found: .*pk_more_store .*of the run's data.mixture"
    ):
        heldout.documents(TokenStore(project / "store"), str(run), "run")


def test_an_export_finds_its_run_from_anywhere_and_after_the_project_moved(project, tmp_path, monkeypatch):
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copytree(project / "run", proj / "run")
    monkeypatch.chdir(proj)
    assert main(["export", "run", "--out", "hf", "--no-progress"]) == 0  # the run named relative to here
    monkeypatch.chdir(tmp_path)
    ckpt = "run/checkpoints/step_000002"
    assert heldout.run_source(str(proj / "hf")).resolve() == (proj / ckpt).resolve()
    shutil.move(proj, tmp_path / "moved")
    assert heldout.run_source(str(tmp_path / "moved/hf")).resolve() == (tmp_path / "moved" / ckpt).resolve()


def test_visible_loss_and_entropy_read_the_held_out_documents(project, tmp_path):
    ids = set(split_documents(TokenStore(project / "store"), 0.1, 3)[1].indices.tolist())
    code, vis = _eval(
        project, tmp_path / "vis", "visible", "--task", "loss", "--split", "run", "--samples", "16"
    )
    assert code == 0 and vis["data"]["split"] == "run" and vis["data"]["documents"] == len(ids)
    assert "training_store" not in vis["data"]
    code, _ = _eval(project, tmp_path / "vis2", "visible", "--task", "passkey", "--split", "run")
    assert code != 0  # only task=loss reads a store
    args = ["analyze", "entropy", "--model", str(project / "run"), "--data", str(project / "store")]
    args += ["--split", "run", "--contexts", "4,8,16", "--samples", "40", "--n-components", "8"]
    args += ["--kde-dims", "0", "--out", str(tmp_path / "ent")]
    assert main([*args, "--no-progress"]) == 0
    ent = json.loads((tmp_path / "ent" / "entropy.json").read_text())
    assert ent["data"]["split"] == "run" and ent["data"]["documents"] == len(ids)
    assert ent["results"]["protocol"]["n_documents"] <= len(ids)
    without = [a for a in args if a not in ("--data", str(project / "store"))]  # the run's own store
    without[without.index(str(tmp_path / "ent"))] = str(tmp_path / "ent2")
    assert main([*without, "--no-progress"]) == 0  # --data was required, unlike eval's --split run
    ent2 = json.loads((tmp_path / "ent2" / "entropy.json").read_text())
    assert ent2["data"] == ent["data"] and ent2["results"] == ent["results"]


def test_a_profile_of_a_run_reads_what_it_held_out_without_a_second_store(project, tmp_path, capsys):
    run = tmp_path / "r64"
    train(_config(run, 64, store=str(project / "store")))
    out = tmp_path / "profile"
    argv = ["profile", "--model", str(run), "--split", "run", "--out", str(out), "--no-progress"]
    assert main([*argv, "--threads", "1"]) == 0  # no --data: the run's own store
    said = capsys.readouterr()
    assert "trained on" not in said.err  # no in-sample note: it read what was held out
    assert f"the store's steps read what {run.resolve()} held out: 4 documents" in said.out
    doc = json.loads((out / "profile.json").read_text())
    assert doc["split"] == "run" and doc["data"] == str(project / "store")
    ids = split_documents(TokenStore(project / "store"), 0.1, 3)[1].indices.tolist()
    for name, key in (("contextwise", "pieces"), ("bayes-fit", "targets")):
        result = json.loads((out / "models" / "r64" / f"{name}.json").read_text())
        assert result["data"]["split"] == "run" and "training_store" not in result["data"]
        assert set(np.load(out / "models" / "r64" / result["arrays"][key])[:, 0]) <= set(ids)
    attention = json.loads((out / "models" / "r64" / "attention.json").read_text())
    assert attention["data"]["split"] == "run" and "training_store" not in attention["data"]
    assert not any("in-sample" in (row.get("note") or "") for row in doc["headline"])
    capsys.readouterr()
    text = tmp_path / "t.txt"
    text.write_text(shakespeare(3_000))
    bad = [
        "profile",
        "--model",
        str(run),
        "--split",
        "run",
        "--data",
        str(text),
        "--out",
        str(tmp_path / "b"),
    ]
    assert main(bad) != 0
    assert "--split run reads the part of a run's token store it held out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["profile", "--model", str(run), "--out", str(tmp_path / "c")])
    assert "required: --data (or --split run" in capsys.readouterr().err


def test_another_model_reads_what_a_run_held_out_and_a_pair_shares_one_part(project, tmp_path):
    """A base model beside the run that continued it reads that run's held-out part (--heldout-of; a
    profile picks the run); two runs of one store must have held out the same part."""
    base = tmp_path / "base"  # a run of other text: none of the store is in its training
    train(_config(base, store=str(project / "other"), val_split="tail"))
    code, same = _eval(project, tmp_path / "b", "ppl", "--split", "run", "--heldout-of", str(project / "run"))
    assert code == 0 and same["data"]["documents"] == 4  # --heldout-of naming the model's own run
    args = ["eval", "ppl", "--model", str(base), "--split", "run", "--heldout-of", str(project / "run")]
    assert (
        main([*args, "--out", str(tmp_path / "base_ppl"), "--no-progress"]) == 0
    )  # no --data: that run's store
    read = json.loads((tmp_path / "base_ppl" / "ppl.json").read_text())["data"]
    assert read["store"] == str(project / "store") and read["documents"] == 4
    assert read["held_out_by"] == str((project / "run").resolve())
    assert main(["eval", "ppl", "--model", str(base), "--heldout-of", str(project / "run")]) != 0
    store = TokenStore(project / "store")
    assert heldout.shared_run([str(base), str(project / "run")], store) == str((project / "run").resolve())
    tail = tmp_path / "tail"
    train(_config(tail, store=str(project / "store"), val_split="tail"))
    with pytest.raises(
        UserError, match="held out different parts of .*data.val_split 'documents' against 'tail'"
    ):
        heldout.shared_run([str(project / "run"), str(tail)], store)
    with pytest.raises(UserError, match="no run that trained on"):
        heldout.shared_run([str(base)], store)


def test_ep_and_splice_runs_read_and_validate_on_the_documents_their_packs_held_out(
    project, tmp_path, capsys
):
    """Packed holding documents out (the default), two packings of one store hold out the same documents:
    --split run reads them for both runs (before, two packings held out different sequences and a paired
    reading was refused), the runs' validation rows are the same, and the report draws them together."""
    from contextlab.report.together import together_section
    from contextlab.rundir import data_record

    runs = []
    for method in ("ep", "splice"):
        assert main(pack_argv(project, "--method", method, "--out", str(tmp_path / method))) == 0
        train(_config(tmp_path / f"run_{method}", packed=str(tmp_path / method), mode="packed"))
        runs.append(tmp_path / f"run_{method}")
    store = TokenStore(project / "store")
    held = split_documents(store, 0.02, 0)[1].indices  # the pack's default, not the run's val_fraction 0.1
    for run in runs:
        view, record = heldout.documents(store, str(run), "run")
        assert np.array_equal(view.indices, held) and view.begin is not None
        assert np.array_equal(view.end - view.begin, store.lengths()[held])  # whole documents
        assert record["held_out"].startswith(f"the documents {tmp_path / run.name[4:]} (val_fraction 0.02")
    assert heldout.shared_run([str(r) for r in runs], store) == str(runs[0].resolve())
    # and `compare` pairs them: their results' held-out parts differ in words (each names its pack), not
    # in the documents (a user's SPLICE - EP comparison was refused as "not the same samples")
    for run in runs:
        assert main(["eval", "ppl", "--model", str(run), "--split", "run", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["compare", str(runs[1]), str(runs[0])]) == 0
    said = " ".join(capsys.readouterr().out.split())  # and names what the two runs differ in
    here = tmp_path.name
    named = f"note: A and B were trained with other setting: data.packed {here}/splice vs {here}/ep"
    assert named in said
    args = pack_argv(project, "--val-fraction", "0.1")
    assert main([*args, "--out", str(tmp_path / "ep10")]) == 0
    train(_config(tmp_path / "run_ep10", packed=str(tmp_path / "ep10"), mode="packed"))
    # 0.02 of the documents is a part of the 0.1 drawn with the same seed: unseen by both runs
    pair = [str(runs[0]), str(tmp_path / "run_ep10")]
    assert heldout.shared_run(pair, store) == heldout.shared_run(pair[::-1], store) == str(runs[0].resolve())
    assert main([*args, "--split-seed", "1", "--out", str(tmp_path / "ep10s1")]) == 0
    train(_config(tmp_path / "run_ep10s1", packed=str(tmp_path / "ep10s1"), mode="packed"))
    with pytest.raises(
        UserError,
        match=r"holding out other documents \(val_fraction, split_seed \(0.1, 0\) against \(0.1, 1\)\)",
    ):
        heldout.shared_run([str(tmp_path / "run_ep10"), str(tmp_path / "run_ep10s1")], store)
    # a data.store run with the pack's val_fraction and split_seed holds out the same documents
    train(_config(tmp_path / "run_store", store=str(project / "store"), val_fraction=0.02, split_seed=0))
    pair = [str(tmp_path / "run_store"), str(runs[1])]
    assert heldout.shared_run(pair, store) == str((tmp_path / "run_store").resolve())
    assert data_record(tmp_path / "run_store")["validation_rows"] == data_record(runs[1])["validation_rows"]
    from contextlab.report.runs import validated_on  # the report's runs table: what each validated on

    rows = data_record(runs[1])["validation_rows"][:8]
    assert validated_on(runs[1]) == f"1 document held out by its pack, rows {rows}"
    assert validated_on(tmp_path / "run_store") == f"0.02 of the documents (split_seed 0), rows {rows}"
    hashes = {data_record(r)["validation_rows"] for r in runs}
    assert len(hashes) == 1 and len(next(iter(hashes))) == 64
    html = together_section(runs, {r: r.name for r in runs})
    assert html.count('alt="validation loss of the runs"') == 1 and "not drawn together" not in html


def test_a_pack_packed_again_since_the_run_trained_is_refused(project, tmp_path):
    """--split run reads what the packed store holds out now; packed again (another --val-fraction,
    --overwrite) it holds out other documents, some of which the run trained on: one line, not a
    reading of training text as held out."""
    args = pack_argv(project, "--out", str(tmp_path / "p"))
    assert main(args) == 0
    train(_config(tmp_path / "run", packed=str(tmp_path / "p"), mode="packed"))
    store = TokenStore(project / "store")
    assert len(heldout.documents(store, str(tmp_path / "run"), "run")[0]) == 1
    assert main([*args, "--val-fraction", "0.2", "--overwrite"]) == 0
    with pytest.raises(UserError, match=r"p was packed again since .*run trained on it \(its fingerprint is"):
        heldout.documents(store, str(tmp_path / "run"), "run")
    with pytest.raises(
        UserError, match=r"cannot resume from step_\d+: data.packed .* holds other content than"
    ):
        train(_config(tmp_path / "run", packed=str(tmp_path / "p"), mode="packed"))
    # a run that held out a data.val_store reads that store, whatever became of its pack
    train(
        _config(tmp_path / "vs", packed=str(tmp_path / "p"), mode="packed", val_store=str(project / "other"))
    )
    assert main([*args, "--val-fraction", "0.1", "--overwrite"]) == 0
    other = TokenStore(project / "other")
    assert len(heldout.documents(other, str(tmp_path / "vs"), "run")[0]) == other.n_docs


def test_without_data_the_store_of_the_first_run_or_the_reason_there_is_none(project, tmp_path, capsys):
    """profile --split run without --data: a model path that does not exist is named; a run on packed
    stores of two token stores says to give --data one of them (it was a usage dump about --data)."""
    assert heldout.first_run([str(tmp_path / "nope"), str(project / "run")]) == str(project / "store")
    with pytest.raises(UserError, match=r"nope not found: --split run reads what a contextlab run"):
        heldout.first_run([str(tmp_path / "nope")])
    for name in ("store", "other"):
        argv = ["data", "pack", str(project / name), "--context", "32", "--no-progress"]
        assert main([*argv, "--val-fraction", "0", "--out", str(tmp_path / f"p_{name}")]) == 0
    mix = [{"packed": str(tmp_path / f"p_{name}"), "weight": 0.5} for name in ("store", "other")]
    train(_config(tmp_path / "mix", mixture=mix, mode="packed"))
    argv = ["profile", "--model", str(tmp_path / "mix"), "--split", "run", "--out", str(tmp_path / "prof")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "trained on a mixture of packed stores made from 2 token stores" in err and "usage:" not in err
