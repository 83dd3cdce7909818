"""The SPLICE vs EP study script as a list of steps: its commands, which steps a recipe change
reaches, and a corpus preparation that leaves unchanged files alone."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from contextlab.config import read_toml
from tests.conftest import REPO, shakespeare


@pytest.fixture
def study(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    return importlib.import_module("splice_vs_ep_extension")


@pytest.fixture
def recipe(tmp_path):
    books = tmp_path / "books"
    (books / "texts").mkdir(parents=True)
    rows = []
    for i in range(6):
        text = "\n\n".join(f"Book {i} paragraph {p}. " * 20 for p in range(30))
        (books / "texts" / f"pg{i}.txt").write_text("HEAD\n" + text)
        rows.append(
            {
                "ebook_id": i,
                "file": f"texts/pg{i}.txt",
                "title": f"b{i}",
                "body_start_char": 5,
                "body_end_char": 5 + len(text),
            }
        )
    (books / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = read_toml(REPO / "recipes" / "splice_vs_ep_extension.toml")
    r["corpus"]["books"] = str(books)
    r["corpus"]["eval_every"] = 3
    return r


def _digests(study, recipe, out) -> dict:
    return {step.key: step.digest() for _, step in study.plan(recipe, out)}


def test_the_study_is_these_steps_and_commands(study, recipe, tmp_path):
    out = tmp_path / "out"
    steps = study.plan(recipe, out)
    keys = [s.key for _, s in steps]
    evals = [f"eval {m} {e}" for m in ("base", "ep", "splice") for e in ("contextwise", "niah", "kv")]
    assert keys == [
        "prepare", "ingest pretrain", "ingest standard", "ingest long", "ingest eval", "pack standard_ep",
        "pack long_ep", "pack long_splice", "pretrain", "extend ep", "extend splice", *evals, "paired",
        "compare",
    ]  # fmt: skip
    fps = {s.key: s.fingerprint for _, s in steps}
    assert fps["ingest eval"]["args"][:3] == ["data", "ingest", str(recipe["corpus"]["books"]) + "/texts"]
    assert fps["ingest eval"]["args"][5:7] == ["--include", "pg0.txt,pg3.txt"]  # every 3rd book held out
    assert fps["pack long_splice"]["args"] == [
        "data", "pack", str(out / "stores" / "long"), "--method", "splice", "--retriever", "bm25", "--k", "1",
        "--order", "identity", "--context", "2048", "--seed", "0", "--val-fraction", "0.0",
        "--out", str(out / "packed" / "long_splice"), "--no-progress",
    ]  # fmt: skip
    assert fps["extend splice"]["args"] == [
        "train",
        str(out / "configs" / "splice.toml"),
        "--init-from",
        str(out / "runs" / "base"),
    ]
    mixture = fps["extend splice"]["config"]["data"]["mixture"]
    assert [m["packed"] for m in mixture] == [str(out / "packed" / n) for n in ("standard_ep", "long_splice")]
    assert fps["compare"]["args"] == [
        "compare",
        str(out / "eval" / "splice"),
        str(out / "eval" / "ep"),
        "--out",
        str(out / "compare"),
    ]
    assert fps["eval ep kv"]["args"][:8] == [
        "eval", "kv", "--model", str(out / "runs" / "ep"), "--data", recipe["eval"]["kv"]["data"], "--out",
        str(out / "eval" / "ep"),
    ]  # fmt: skip


def test_a_recipe_change_reaches_exactly_the_steps_made_from_it(study, recipe, tmp_path):
    before = _digests(study, recipe, tmp_path)
    recipe["pack"]["k"] = 2  # SPLICE retrieval: only the SPLICE arm and what reads it
    after = _digests(study, recipe, tmp_path)
    changed = {k for k in before if before[k] != after[k]}
    splice_evals = {f"eval splice {e}" for e in ("contextwise", "niah", "kv")}
    assert changed == {"pack long_splice", "extend splice", "paired", "compare"} | splice_evals
    recipe["pretrain"]["optim"]["lr"] = 1e-3  # the base model: everything trained or evaluated after it
    later = _digests(study, recipe, tmp_path)
    changed = {k for k in after if after[k] != later[k]}
    assert "pack long_ep" not in changed and "ingest pretrain" not in changed
    assert {"pretrain", "extend ep", "extend splice", "eval base niah", "eval ep kv", "paired"} <= changed


def test_corpus_preparation_holds_out_books_and_rewrites_nothing_unchanged(study, recipe, tmp_path):
    out = tmp_path / "out"
    study.prepare_corpus(recipe, out)
    held = sorted((out / "data" / "eval_books").iterdir())
    assert [p.name for p in held] == ["pg0.txt", "pg3.txt"]
    # copies, not links: niah skips links out of its folder as data ingest does (the study's needle
    # step then found "no .txt files" in the rehearsal)
    assert not any(p.is_symlink() for p in held)
    standard = [json.loads(x) for x in (out / "data" / "standard.jsonl").read_text().splitlines()]
    long = [json.loads(x) for x in (out / "data" / "long.jsonl").read_text().splitlines()]
    assert {r["domain"] for r in standard} == {"pg1", "pg4"} and {r["domain"] for r in long} == {"pg2", "pg5"}
    assert all(len(r["text"]) >= 2000 for r in standard[:-1]) and "HEAD" not in standard[0]["text"]
    mtime = (out / "data" / "standard.jsonl").stat().st_mtime_ns
    study.prepare_corpus(recipe, out)  # a rerun must not touch the sources the ingest steps fingerprint
    assert (out / "data" / "standard.jsonl").stat().st_mtime_ns == mtime


def test_pretraining_can_add_a_folder_beside_the_books(study, recipe, tmp_path):
    """corpus.pretrain_extra: the pretraining store reads the training books and that folder, never a held-out
    book; the standard, long and evaluation stores stay books only."""
    from contextlab.cli import main as cli_main
    from contextlab.data.store import TokenStore

    default = {s.key: s.fingerprint for _, s in study.plan(recipe, tmp_path / "a")}
    books = recipe["corpus"]["books"]
    assert default["ingest pretrain"]["args"][2] == books + "/texts"
    (Path(books) / "code" / "lib").mkdir(parents=True)
    (Path(books) / "code" / "lib" / "a.c").write_text("int main(void) { return 0; }\n" * 20)
    recipe["corpus"]["pretrain_extra"] = "code"
    recipe["corpus"]["tokenizer"] = "byte"
    fps = {s.key: s.fingerprint for _, s in study.plan(recipe, tmp_path / "b")}
    args = fps["ingest pretrain"]["args"]
    assert args[2] == books
    assert args[args.index("--include") + 1] == "texts/*,code/"
    assert args[args.index("--exclude") + 1] == "texts/pg0.txt,texts/pg3.txt"
    assert fps["ingest eval"]["args"][:3] == default["ingest eval"]["args"][:3]
    assert cli_main(args) == 0
    sources = sorted(m["path"] for m in TokenStore(args[args.index("--out") + 1]).docs_meta())
    assert sources == ["code/lib/a.c", "texts/pg1.txt", "texts/pg2.txt", "texts/pg4.txt", "texts/pg5.txt"]


def test_paired_difference_runs_in_batches_on_the_evaluation_device(study, recipe, tmp_path, monkeypatch):
    """The paired SPLICE - EP step scores the windows batch by batch with the contextwise evaluation's dtype,
    device and batch size, and gets the same per-window means as one pass over all windows."""
    import numpy as np

    import contextlab.eval.adapter as adapter_mod
    from contextlab.data.ingest import IngestConfig, ingest
    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.eval.adapter import in_memory_adapter
    from contextlab.eval.pieces import sequences
    from tests.eval.conftest import tiny_gpt

    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"d{i}.txt").write_text(shakespeare()[i * 900 : i * 900 + 300])
    store = ingest(src, tmp_path / "store", IngestConfig(tokenizer="byte"), progress=False).store
    recipe["eval"]["contextwise"] = {
        "length": 64, "max_docs": 0, "pieces_per_doc": 0, "dtype": "fp32", "device": "cpu", "batch_size": 2,
    }  # fmt: skip
    recipe["pretrain"]["train"]["context"] = 32
    models = {"splice": tiny_gpt(seed=1, context=64), "ep": tiny_gpt(seed=2, context=64)}
    loads, calls = [], []

    class Counting:
        def __init__(self, adapter):
            self.adapter, self.batch_size = adapter, adapter.batch_size

        def token_logprobs(self, rows):
            calls.append(len(rows))
            return self.adapter.token_logprobs(rows)

    def fake_load(path, **kw):
        loads.append(kw)
        model = models[Path(path).name]
        return Counting(in_memory_adapter(model, ByteTokenizer(), "tiny", batch_size=kw["batch_size"]))

    monkeypatch.setattr(adapter_mod, "load_model", fake_load)
    out = tmp_path / "out"
    (out / "eval").mkdir(parents=True)
    res = study.paired_difference(recipe, out, store.path)
    windows = sum(len(store.doc(d)) // 64 for d in range(3))  # 300-byte documents: 4 pieces each
    assert loads == [{"dtype": "fp32", "device": "cpu", "batch_size": 2}] * 2
    assert windows == 12 and calls == [2] * windows  # two models, windows / 2 batches of 2 each
    rows = np.stack([store.doc(d)[s : s + 64].astype(np.int64) for d, s in sequences(store, 64, 0, 0)])
    whole = {
        a: -in_memory_adapter(m, ByteTokenizer(), "t").token_logprobs(rows).numpy() for a, m in models.items()
    }
    for part, cut in (("positions 1-31", slice(0, 31)), ("positions 32-63", slice(31, None))):
        diff = whole["splice"][:, cut].mean(1) - whole["ep"][:, cut].mean(1)
        assert res[part]["windows"] == windows
        assert abs(res[part]["splice_minus_ep"] - diff.mean()) < 1e-6
