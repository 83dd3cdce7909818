"""Nothing a user made is replaced unasked: eval results, generate's --out, report's --out.

``eval`` replaces OUT/NAME.json when run again with the same settings (a reproduction) and refuses,
before anything runs, one of other options, another model, precision or data unless ``--overwrite``;
``generate`` refuses an existing --out unless ``--overwrite`` (and then replaces only its own rows);
``report`` replaces only an earlier page of its own, never a file it reads.
"""

from __future__ import annotations

import json
import shutil

import pytest

from contextlab.cli import main

PASSKEY = [
    "--samples",
    "1",
    "--depths",
    "50",
    "--distractors",
    "1",
    "--scoring",
    "likelihood",
    "--no-progress",
]


def passkey(model, out, *extra) -> int:
    return main(["eval", "passkey", "--model", str(model), "--out", str(out), *PASSKEY, *extra])


@pytest.fixture
def first(tiny_runs, tmp_path, capsys):
    """OUT holding the passkey result of run a (1 key set at depth 50), and its bytes."""
    out = tmp_path / "out"
    assert passkey(tiny_runs["a"], out) == 0
    capsys.readouterr()
    return out, {p.name: p.read_bytes() for p in out.iterdir()}


def refusal(path, change: str) -> str:
    return (
        f"contextlab eval: error: {path} holds a passkey result of other settings ({change}); pass "
        "--overwrite to replace it, or give another --out to keep both (nothing was run)\n"
    )


def test_the_same_settings_run_again_replace_the_result(tiny_runs, first, capsys):
    out, before = first
    inode = (out / "passkey.json").stat().st_ino
    assert passkey(tiny_runs["a"], out, "--batch-size", "3") == 0  # batch size is not a setting of the result
    assert capsys.readouterr().out.startswith("passkey: lengths 507 · depths 50 · key sets per cell 1 ·")
    assert (out / "passkey.json").stat().st_ino != inode  # written again
    assert (
        json.loads((out / "passkey.json").read_text())["options"]
        == json.loads(before["passkey.json"])["options"]
    )


@pytest.mark.parametrize(
    ("extra", "change"),
    [
        (["--samples", "2"], "--samples 1 -> 2"),
        (["--depths", "25"], "--depths [50.0] -> [25.0]"),
        (["--scoring", "both"], "--scoring likelihood -> both"),
        (["--dtype", "bf16"], "--dtype fp32 -> bf16"),
        (["--samples", "2", "--scoring", "both"], "--samples 1 -> 2; --scoring likelihood -> both"),  # each
    ],
)
def test_other_options_are_refused_before_anything_runs(tiny_runs, first, extra, change, capsys):
    out, before = first
    assert passkey(tiny_runs["a"], out, *extra) == 2
    captured = capsys.readouterr()
    assert captured.err == refusal(out / "passkey.json", change)
    assert captured.out == ""  # not even the settings line: no evaluation started
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_another_model_is_refused(tiny_runs, first, capsys):
    out, before = first
    assert passkey(tiny_runs["b"], out) == 2
    old = (tiny_runs["a"] / "checkpoints" / "step_000000").resolve()
    new = (tiny_runs["b"] / "checkpoints" / "step_000000").resolve()
    assert capsys.readouterr().err == refusal(out / "passkey.json", f"--model {old} -> {new}")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_overwrite_replaces_a_result_of_other_settings(tiny_runs, first, capsys):
    out, _ = first
    assert passkey(tiny_runs["b"], out, "--samples", "2", "--overwrite") == 0
    doc = json.loads((out / "passkey.json").read_text())
    assert doc["options"]["samples"] == 2 and doc["model"]["id"] == str(tiny_runs["b"])


def test_a_file_that_is_not_a_result_is_never_replaced(tiny_runs, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "passkey.json").write_text('{"my": "notes"}')
    for extra in ([], ["--overwrite"]):
        assert passkey(tiny_runs["a"], out, *extra) == 2
        assert capsys.readouterr().err == (
            f"contextlab eval: error: {out / 'passkey.json'} exists and is not a contextlab evaluation "
            "result; move it away or give another --out (it is left as it is)\n"
        )
    assert [p.name for p in out.iterdir()] == ["passkey.json"]
    assert (out / "passkey.json").read_text() == '{"my": "notes"}'


def ppl(model, data, out, *extra) -> int:
    argv = ["eval", "ppl", "--model", str(model), "--data", str(data), "--out", str(out), "--no-progress"]
    return main([*argv, "--max-docs", "1", *extra])


def test_other_data_is_refused(tiny_runs, stores, tmp_path, capsys):
    out = tmp_path / "out"
    assert ppl(tiny_runs["a"], stores["one"], out) == 0
    before = (out / "ppl.json").read_bytes()
    capsys.readouterr()
    assert ppl(tiny_runs["a"], stores["two"], out) == 2
    assert capsys.readouterr().err == (
        f"contextlab eval: error: {out / 'ppl.json'} holds a ppl result of other settings (--data "
        f"{stores['one']} -> {stores['two']}); pass --overwrite to replace it, or give another --out to keep "
        "both (nothing was run)\n"
    )
    assert (out / "ppl.json").read_bytes() == before


def test_other_content_at_the_same_data_path_is_refused(tiny_runs, stores, tmp_path, capsys):
    from contextlab.data.store import TokenStore

    data, out = tmp_path / "store", tmp_path / "out"
    shutil.copytree(stores["one"], data)
    assert ppl(tiny_runs["a"], data, out) == 0
    capsys.readouterr()
    shutil.rmtree(data)
    shutil.copytree(stores["two"], data)  # the store made again from other text
    assert ppl(tiny_runs["a"], data, out) == 2
    old, new = TokenStore(stores["one"]).hash, TokenStore(stores["two"]).hash
    assert old != new
    assert f"(--data content (hash) {old} -> {new})" in capsys.readouterr().err


def test_several_models_are_checked_before_the_first_runs(tiny_runs, stores, tmp_path, capsys):
    out = tmp_path / "out"
    assert ppl(tiny_runs["b"], stores["one"], out / "b") == 0
    capsys.readouterr()
    argv = ["eval", "ppl", "--model", str(tiny_runs["a"]), "--model", str(tiny_runs["b"]), "--max-docs", "2"]
    assert main([*argv, "--data", str(stores["one"]), "--out", str(out), "--no-progress"]) == 2
    assert "(--max-docs 1 -> 2)" in capsys.readouterr().err
    assert not (out / "a").exists()  # refused before model a was evaluated


def test_two_models_of_one_folder_name_are_refused_before_either_runs(tiny_runs, stores, tmp_path, capsys):
    x, y = tmp_path / "x" / "model", tmp_path / "y" / "model"
    shutil.copytree(tiny_runs["a"], x)
    shutil.copytree(tiny_runs["b"], y)
    out = tmp_path / "out"
    argv = [
        "eval",
        "ppl",
        "--model",
        str(x),
        "--model",
        str(y),
        "--data",
        str(stores["one"]),
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"contextlab eval: error: --model {x} and --model {y} would both write {out / 'model' / 'ppl.json'}; "
        "evaluate them one at a time, each with its own --out\n"
    )
    assert not out.exists()


# ---------------------------------------------------------------------------------------------- generate


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("ROMEO:\nJULIET:\n")
    return path


def generate(model, prompts, out, *extra) -> int:
    argv = ["generate", "--model", str(model), "--prompts", str(prompts), "--out", str(out)]
    return main([*argv, "--max-new-tokens", "3", *extra])


def test_generate_refuses_an_existing_out_before_loading_the_model(prompts, tmp_path, capsys):
    mine = tmp_path / "gen_out.jsonl"
    mine.write_text("my notes\n")
    assert generate(tmp_path / "no-model", prompts, mine) == 2  # the model is not even looked for
    assert capsys.readouterr().err == (
        f"contextlab generate: error: --out {mine} already exists; pass --overwrite to replace it, or choose "
        "another --out\n"
    )
    assert mine.read_text() == "my notes\n"


def test_generate_overwrite_replaces_only_its_own_rows(tiny_runs, prompts, tmp_path, capsys):
    mine = tmp_path / "gen_out.jsonl"
    mine.write_text("my notes\n")
    assert generate(tiny_runs["a"], prompts, mine, "--overwrite") == 2
    assert capsys.readouterr().err == (
        f"contextlab generate: error: --out {mine} is not a file of `contextlab generate` rows; --overwrite "
        "replaces only those: choose another --out (it is left as it is)\n"
    )
    assert mine.read_text() == "my notes\n"
    rows = tmp_path / "rows.jsonl"
    assert generate(tiny_runs["a"], prompts, rows) == 0
    first = rows.read_text()
    assert generate(tiny_runs["a"], prompts, rows, "--max-new-tokens", "1") == 2
    assert generate(tiny_runs["a"], prompts, rows, "--max-new-tokens", "1", "--overwrite") == 0
    assert [json.loads(line)["new_tokens"] for line in rows.read_text().splitlines()] == [1, 1]
    assert [json.loads(line)["new_tokens"] for line in first.splitlines()] == [3, 3]


@pytest.mark.parametrize("target", ["prompts", "folder"])
def test_generate_refuses_its_prompts_file_or_a_folder_as_out(target, tiny_runs, prompts, tmp_path, capsys):
    out = prompts if target == "prompts" else tmp_path
    assert generate(tiny_runs["a"], prompts, out, "--overwrite") == 2
    expected = {
        "prompts": f"--out {prompts} is the --prompts file; choose another --out",
        "folder": f"--out {tmp_path} is a folder; give a file name such as {tmp_path / 'generated.jsonl'}",
    }[target]
    assert capsys.readouterr().err == f"contextlab generate: error: {expected}\n"
    assert prompts.read_text() == "ROMEO:\nJULIET:\n"


# ------------------------------------------------------------------------------------------------ report


def test_report_never_replaces_a_file_it_reads(first, capsys):
    out, before = first
    assert main(["report", str(out), "--out", str(out / "passkey.json")]) == 2
    assert capsys.readouterr().err == (
        f"contextlab report: error: --out {out / 'passkey.json'} is a file in {out}, which the report reads, "
        "and not a report page; choose another --out (it is left as it is)\n"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_report_replaces_only_its_own_pages(first, tmp_path, capsys):
    from contextlab.report.html import GENERATOR

    out, _ = first
    mine = tmp_path / "notes.html"
    mine.write_text("<p>mine</p>")
    assert main(["report", str(out), "--out", str(mine)]) == 2
    assert capsys.readouterr().err == (
        f"contextlab report: error: --out {mine} exists and is not a page of `contextlab report` (the only "
        "files it replaces); choose another --out (it is left as it is)\n"
    )
    assert mine.read_text() == "<p>mine</p>"
    (out / "report.html").write_text("<p>also mine</p>")  # the default --out, made by the user
    assert main(["report", str(out)]) == 2
    assert (out / "report.html").read_text() == "<p>also mine</p>"
    capsys.readouterr()
    page = tmp_path / "page.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    assert GENERATOR in page.read_text()
    page.write_text(page.read_text().replace(GENERATOR, "").replace("</h1>", "</h1><p>old</p>", 1))
    assert main(["report", str(out), "--out", str(page), "--title", "again"]) == 0  # a page from before
    assert "<p>old</p>" not in page.read_text() and "<title>again</title>" in page.read_text()
    assert main(["report", str(out), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith(
        f"error: --out {tmp_path} is a folder; give a file name such as {tmp_path / 'report.html'}\n"
    )


@pytest.mark.parametrize("inside", ["", "sub"])
def test_an_out_inside_the_store_it_reads_is_refused(tiny_runs, stores, inside, capsys):
    """Results written into the token store the evaluation reads would mix with its files (a user's
    trial wrote ppl.json and its arrays into a store): one line, nothing written."""
    store = stores["one"]
    before = sorted(p.name for p in store.iterdir())
    assert ppl(tiny_runs["a"], store, store / inside if inside else store) == 2
    err = capsys.readouterr().err.strip().splitlines()
    said = "a token store: results written there would mix with its files; choose an --out outside it"
    assert len(err) == 1 and said in err[0], err
    assert sorted(p.name for p in store.iterdir()) == before
