"""The quickstart end to end at a tiny budget: every artifact, the headline, skipping and refusing
on re-runs."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from contextlab.cli import main
from contextlab.data.packing import PackedStore
from contextlab.data.store import TokenStore
from contextlab.errors import UserError
from contextlab.quickstart import load_recipe, packaged_recipe
from tests.conftest import REPO

RUNS = ("gpt", "contextlm")
# a few stdlib packages instead of all of it, a 1-block model, 3 steps: the whole pipeline in seconds
TINY = [
    "--steps",
    "3",
    "--vocab",
    "300",
    "--threads",
    "1",
    "--no-progress",
    "--set",
    'corpus.code_include=["json/**", "email/**"]',
    "--set",
    'corpus.heldout=["test/test_json/*.py"]',
    "--set",
    "base.model.n_layer=1",
    "--set",
    "base.model.n_embd=32",
    "--set",
    "base.model.n_head=2",
    "--set",
    "base.train.context=64",
    "--set",
    "base.train.tokens_per_step=256",
    "--set",
    "base.train.val_tokens=256",
    "--set",
    "base.train.ckpt_every=2",
    "--set",
    "base.data.val_fraction=0.05",
    "--set",
    "eval.contextwise={length=128, max_docs=8}",  # past the 64-token context, as the recipe does
    "--set",
    'eval.niah={lengths=[256, 320], depths=[0.0, 100.0], samples=1, scoring="likelihood"}',
]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    out = tmp_path_factory.mktemp("qs") / "out"
    code = main(["quickstart", "--out", str(out), *TINY])
    assert code == 0
    return out, None


def test_stores_hold_the_corpus_split_into_training_and_held_out_code(quickstart):
    out, _ = quickstart
    books, code, held = (TokenStore(out / n) for n in ("books", "stdlib", "stdlib_heldout"))
    assert books.n_docs == 6 and books.tokenizer_spec["vocab_size"] == 300
    for s in (code, held):
        assert s.tokenizer_hash == books.tokenizer_hash and s.n_tokens > 0
    code_paths = [m["path"] for m in code.docs_meta()]
    held_paths = [m["path"] for m in held.docs_meta()]
    assert all(p.startswith(("json/", "email/")) for p in code_paths)
    assert held_paths and all(p.startswith("test/test_json/") for p in held_paths)


def test_both_packings_are_written_with_their_diagnostics(quickstart):
    out, _ = quickstart
    for method in ("ep", "splice"):
        pk = PackedStore(out / "packed" / method)
        assert (
            pk.meta["config"]["method"] == method and pk.context == 64 and pk.row_len == 65
        )  # train.context + 1
        stats = json.loads((out / "packed" / method / "pack_stats.json").read_text())
        assert stats["method"] == method and stats["n_sequences"] == pk.n_sequences
    assert json.loads((out / "packed" / "splice" / "pack_stats.json").read_text())["retriever"] == "bm25"


def test_two_runs_trained_and_evaluated(quickstart):
    out, _ = quickstart
    for name, objective in zip(RUNS, ("clm", "contextlm")):
        run = out / "runs" / name
        assert f'name = "{objective}"' in (run / "config.toml").read_text()
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert rows[-1]["step"] == 3 and "val_loss" in rows[-1]
        assert (run / "checkpoints" / "step_000003").is_dir()
        cw = json.loads((run / "eval" / "contextwise.json").read_text())["results"]
        assert (
            cw["train_context"] == 64 and len(cw["loss"]) == 127
        )  # 2 x context, scored from the first token
        niah = json.loads((run / "eval" / "niah.json").read_text())["results"]
        # 4 cells, each haystack asked once per needle value of the pool of 5
        assert niah["summary"]["chance"] == pytest.approx(0.2) and len(niah["samples"]) == 4 * 5
        assert (run / "eval" / "contextwise.png").exists() and (run / "eval" / "niah.png").exists()


def test_headline_numbers_come_from_the_result_files(quickstart):
    out, _ = quickstart
    summary = json.loads((out / "summary.json").read_text())
    assert [r["run"] for r in summary["headline"]] == list(RUNS)
    for row in summary["headline"]:
        cw = json.loads((out / "runs" / row["run"] / "eval" / "contextwise.json").read_text())["results"][
            "summary"
        ]
        niah = json.loads((out / "runs" / row["run"] / "eval" / "niah.json").read_text())["results"][
            "summary"
        ]
        assert row["best-context loss"] == pytest.approx(cw["best_context_loss"])
        bf = json.loads((out / "runs" / row["run"] / "eval" / "bayes-fit.json").read_text())["results"]
        assert bf["lengths"] == [1, 2, 4, 8, 16, 32, 64] and bf["n_targets"] == 512
        assert row["context gain"] == pytest.approx(bf["loss"][0] - bf["loss"][-1])  # the same targets
        lo, hi = row["context gain interval95"]  # paired per target, documents as the unit
        assert lo < row["context gain"] < hi and bf["context_gain"]["interval95"] == [lo, hi]
        # contextwise's "context_gain" is the same quantity (1 vs all visible), not the bucket drop
        folder = out / "runs" / row["run"] / "eval"
        one, best = (np.load(folder / f"contextwise.piece_{k}.npy") for k in ("one_token_loss", "best_loss"))
        assert (
            cw["context_gain"] == pytest.approx(float((one - best).mean()))
            and "first_to_last_bucket_drop" in cw
        )
        assert row["needle accuracy"] == pytest.approx(niah["likelihood_accuracy"])
    assert (out / "contextwise_models.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_covers_runs_evaluations_packings_and_stores(quickstart):
    out, _ = quickstart
    page = (out / "report.html").read_text()
    for heading in (
        "Headline",
        "Runs",
        "Data",
        "Packing",
        "Run runs/gpt",
        "Run runs/contextlm",
        "Evaluation: contextwise",
        "Evaluation: bayes-fit",
        "Evaluation: niah",
    ):
        assert f">{heading}<" in page, heading
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    # combined curves, the runs' validation losses together (their contextwise curves together are
    # the combined curves, not drawn twice), 3 store histograms, 2 packing plots, per run: loss
    # curve + 3 eval plots
    assert len(images) == 1 + 1 + 3 + 2 + 2 * 4
    assert ">Runs together<" in page and page.count('alt="contextwise loss of the runs"') == 0
    for data in images:
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[-8:-4] == b"IEND"


def test_rerun_skips_every_step_and_changed_settings_are_refused(quickstart, capsys):
    out, _ = quickstart
    metrics = out / "runs" / "gpt" / "metrics.jsonl"
    mtime = metrics.stat().st_mtime
    capsys.readouterr()
    assert main(["quickstart", "--out", str(out), *TINY]) == 0
    printed = capsys.readouterr().out
    assert printed.count("skipped") == 3 + 2 + 2 + 6 + 1  # stores, packings, runs, evaluations, report
    assert metrics.stat().st_mtime == mtime
    assert "best-context loss" in printed and "needle accuracy" in printed and "report.html" in printed
    assert main(["quickstart", "--out", str(out), *TINY, "--steps", "4"]) == 2
    assert "other quickstart settings; pass --overwrite" in capsys.readouterr().err


def test_recipe_is_checked_before_anything_runs():
    with pytest.raises(UserError, match="runs.gpt.packing is 'icp'"):
        load_recipe(None, ["runs.gpt.packing=icp"])
    with pytest.raises(UserError, match="unknown config key 'runs.gpt.options.nosuch'"):
        load_recipe(None, ["runs.gpt.options.nosuch=1"])
    with pytest.raises(UserError, match="run gpt: unknown config key 'train.nosuch'"):
        load_recipe(None, ["base.train.nosuch=1"])
    with pytest.raises(UserError, match="runs.contextlm.objective: unknown objective 'nope'"):
        load_recipe(None, ["runs.contextlm.objective=nope"])
    cfg = load_recipe()
    assert list(cfg.runs) == ["gpt", "contextlm"] and cfg.base["train"]["max_steps"] > 0


def test_packaged_recipe_is_the_one_in_recipes():
    assert (REPO / "recipes" / "quickstart.toml").read_text(encoding="utf-8") == packaged_recipe()


def test_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["quickstart", "--help"])
    out = capsys.readouterr().out
    for flag in (
        "--out",
        "--recipe",
        "--set",
        "--steps",
        "--vocab",
        "--threads",
        "--overwrite",
        "--no-progress",
        "--print-recipe",
        "--corpus",
    ):
        assert flag in out


def test_overwrite_refuses_a_folder_that_is_not_a_quickstart(tmp_path, capsys):
    """--overwrite redoes a quickstart by deleting its runs and state; a folder of the user's own (even
    one with a runs/ folder) is refused in one line and left as it was."""
    from tests.conftest import write_tree

    user = write_tree(tmp_path / "project", {"runs/mine.txt": "keep", "notes.txt": "keep"})
    assert main(["quickstart", "--out", str(user), *TINY, "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--overwrite replaces only a quickstart folder" in err[0], err
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt", "runs"]
    assert (user / "runs" / "mine.txt").read_text() == "keep"


# the tiny model and budget of TINY, on a corpus of the user's instead of the standard library
OWN = [a for i, a in enumerate(TINY) if not (TINY[i - 1] == "--set" and a.startswith("corpus."))]
OWN = [a for i, a in enumerate(OWN) if not (a == "--set" and OWN[i + 1] == "--set")]


@pytest.fixture(scope="module")
def essays(tmp_path_factory):
    """A folder of text files with its own notes: 8 'essays', 2 of them held out, and a SOURCE.txt."""
    from tests.conftest import shakespeare, write_tree

    play = shakespeare(80_000)
    files = {f"{'h' if i < 2 else 'e'}{i}.txt": play[i * 10_000 : (i + 1) * 10_000] for i in range(8)}
    return write_tree(tmp_path_factory.mktemp("essays"), {**files, "SOURCE.txt": "where they came from"})


def test_a_corpus_of_ones_own_is_split_trained_on_and_reported(essays, tmp_path, capsys):
    out = tmp_path / "own"
    picks = ["--set", 'corpus.code_include=["*.txt"]', "--set", 'corpus.heldout=["h*.txt"]']
    picks += ["--set", 'corpus.exclude=["SOURCE.*"]']
    assert main(["quickstart", "--out", str(out), "--corpus", str(essays), *OWN, *picks]) == 0
    printed = capsys.readouterr().out
    assert f"ingest {essays} except h*.txt, with a 300-token BPE trained on it" in printed
    train, held = TokenStore(out / "corpus"), TokenStore(out / "corpus_heldout")
    assert sorted(m["path"] for m in train.docs_meta()) == [f"e{i}.txt" for i in range(2, 8)]
    assert sorted(m["path"] for m in held.docs_meta()) == ["h0.txt", "h1.txt"]
    assert train.tokenizer_spec["vocab_size"] == 300 and held.tokenizer_hash == train.tokenizer_hash
    assert not (out / "books").exists() and not (out / "stdlib").exists()
    for name in RUNS:
        run = json.loads((out / "runs" / name / "eval" / "contextwise.json").read_text())
        assert run["data"]["store"] == str((out / "corpus_heldout").resolve())
    summary = json.loads((out / "summary.json").read_text())
    assert f"on held-out files (h*.txt of {essays})" in summary["notes"][0]
    assert (out / "report.html").is_file()


@pytest.mark.parametrize(
    "given, sets, message",
    [
        ("file", [], "is not a folder; the quickstart holds out some of a folder's files"),
        (
            "folder",
            ["--set", 'corpus.code_include=["*.md"]'],
            "corpus.code_include ['*.md'] selects no training",
        ),
        ("folder", ["--set", 'corpus.heldout=["test/**"]'], "corpus.heldout ['test/**'] selects no"),
    ],
)
def test_a_corpus_that_cannot_be_split_is_one_line_before_anything_runs(
    essays, tmp_path, capsys, given, sets, message
):
    corpus = essays / "e2.txt" if given == "file" else essays
    out = tmp_path / "never"
    assert main(["quickstart", "--out", str(out), "--corpus", str(corpus), *OWN, *sets]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_a_corpus_s_own_notes_are_named_with_the_key_that_leaves_them_out(essays, capsys):
    from contextlab.data.sources import SourceOptions
    from contextlab.quickstart.pipeline import _say_notes

    _say_notes(essays, SourceOptions(include=["*.txt"], exclude=["h*.txt"]))
    assert capsys.readouterr().out.strip() == (
        "note: trained on as text though named like the corpus's own notes: SOURCE.txt; "
        "--set 'corpus.exclude=[\"SOURCE.*\"]' leaves it out"
    )
    _say_notes(essays, SourceOptions(include=["*.txt"], exclude=["SOURCE.*"]))
    assert capsys.readouterr().out == ""


def test_a_folder_the_defaults_select_nothing_of_is_read_whole_with_one_file_in_ten_held_out(tmp_path):
    """The recipe's file choices are the standard library's (**/*.py, test/**/*.py): a folder of text got
    two lines asking for globs, one after the other. Now, where a default selects nothing, every file but
    the corpus's notes is read and one in ten by name is held out (at least one, never all), each named
    exactly; a choice given is kept, and a folder of code keeps the defaults."""
    from contextlab.data.sources import SourceOptions, open_source
    from contextlab.quickstart.config import CorpusSection
    from contextlab.quickstart.pipeline import fit_corpus
    from tests.conftest import write_tree

    names = [f"a{i:02d}.txt" for i in range(24)] + ["a09 [draft]?.txt"]
    folder = write_tree(tmp_path / "text", {**{n: f"text {n}" for n in names}, "SOURCE.txt": "notes"})
    c = CorpusSection(source=str(folder))
    lines = fit_corpus(c)
    assert len(lines) == 2 and lines[1].startswith(
        f"corpus.heldout: no test/**/*.py in {folder}, so 2 of its 25"
    )
    held = [rel for rel, _ in open_source(folder, SourceOptions(include=c.heldout)).files()[0]]
    trained = [
        rel
        for rel, _ in open_source(
            folder, SourceOptions(include=c.code_include, exclude=c.heldout + c.exclude)
        ).files()[0]
    ]
    assert held == ["a09 [draft]?.txt", "a18.txt"] and sorted(trained + held) == sorted(names)
    write_tree(folder, {"sub/a18.txt": "same name, deeper"})  # held out by its path, not its name
    assert [rel for rel, _ in open_source(folder, SourceOptions(include=c.heldout)).files()[0]] == held
    given = CorpusSection(source=str(folder), heldout=["a2*.txt"])
    fit_corpus(given)
    assert given.heldout == ["a2*.txt"] and given.code_include == ["**/*"]
    one = write_tree(tmp_path / "one", {"only.txt": "text"})
    fit_corpus(c_one := CorpusSection(source=str(one)))
    assert c_one.heldout == CorpusSection().heldout  # nothing to train on if held out: check_corpus says so
    code = write_tree(tmp_path / "code", {"m.py": "x = 1", "test/test_m.py": "assert 1"})
    assert fit_corpus(c_code := CorpusSection(source=str(code))) == [] and c_code == CorpusSection(
        source=str(code)
    )
