"""The SPLICE vs EP study script as a list of steps: its commands, which steps a recipe change
reaches, and a corpus preparation that leaves unchanged files alone."""

from __future__ import annotations

import importlib
import json

import pytest

from contextlab.config import read_toml
from tests.conftest import REPO


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
        "--order", "identity", "--context", "2048", "--seed", "0",
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
    assert sorted(p.name for p in (out / "data" / "eval_books").iterdir()) == ["pg0.txt", "pg3.txt"]
    standard = [json.loads(x) for x in (out / "data" / "standard.jsonl").read_text().splitlines()]
    long = [json.loads(x) for x in (out / "data" / "long.jsonl").read_text().splitlines()]
    assert {r["domain"] for r in standard} == {"pg1", "pg4"} and {r["domain"] for r in long} == {"pg2", "pg5"}
    assert all(len(r["text"]) >= 2000 for r in standard[:-1]) and "HEAD" not in standard[0]["text"]
    mtime = (out / "data" / "standard.jsonl").stat().st_mtime_ns
    study.prepare_corpus(recipe, out)  # a rerun must not touch the sources the ingest steps fingerprint
    assert (out / "data" / "standard.jsonl").stat().st_mtime_ns == mtime
