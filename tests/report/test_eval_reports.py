"""Reports of evaluation folders, model folders, several models and profiles, built from real result
files of tiny models; the reproduce line of a page is run and writes the same evaluation; every new
page displays its plots and fits a 1,200 px window in headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil

import numpy as np
import pytest

from contextlab.cli import main
from contextlab.errors import UserError
from contextlab.report.evals import read_results
from contextlab.report.html import build_report, write_report
from tests.conftest import shakespeare
from tests.report.test_report import render

EVALS = {
    "contextwise": ["--length", "65", "--max-docs", "8", "--pieces-per-doc", "2"],
    "niah": ["--lengths", "256", "--depths", "0,100", "--samples", "1", "--scoring", "likelihood"],
    "passkey": ["--lengths", "256", "--depths", "0,100", "--samples", "2", "--scoring", "likelihood"],
}
LONG_FLOAT = re.compile(r"\d\.\d{9,}")  # a number printed with all its digits


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two tiny trained runs (a, b), each exported as a model folder and evaluated with contextwise,
    niah and passkey into PROFILE/models/<label>; their comparison in PROFILE/compare; run a's own
    contextwise in runs/a/eval; model b's own contextwise in hf_b/eval; a profile.json over them."""
    from contextlab.config import from_dict
    from contextlab.data.ingest import IngestConfig, ingest
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    root = tmp_path_factory.mktemp("tiny")
    text = shakespeare(40_000)
    (root / "src").mkdir()
    for i in range(4):
        (root / "src" / f"part{i}.txt").write_text(text[i * 10_000 : (i + 1) * 10_000])
    store = ingest(root / "src", root / "store", IngestConfig(tokenizer="byte"), progress=False).store
    prof = root / "profile"
    for seed, label in enumerate("ab"):
        run = root / "runs" / label
        cfg = {
            "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
            "data": {"store": str(store.path), "val_split": "tail", "val_fraction": 0.1},
            "optim": {"lr": 3e-3, "warmup_steps": 1},
            "train": {
                **{"out_dir": str(run), "context": 32, "tokens_per_step": 256, "max_steps": 2 + 2 * seed},
                **{"val_every": 0, "ckpt_every": 0, "threads": 1, "peak_flops": 1e12, "progress": False},
                **{"dtype": "fp32", "seed": seed},
            },
        }
        train(from_dict(RunConfig, cfg))
        assert main(["export", str(run), "--out", str(root / f"hf_{label}")]) == 0
        for name, options in EVALS.items():
            data = ["--data", str(store.path)] if name == "contextwise" else []
            model = ["--model", str(root / f"hf_{label}")]
            assert main(["eval", name, *model, *data, "--out", str(prof / "models" / label), *options]) == 0
    contextwise = ["eval", "contextwise", "--data", str(store.path), *EVALS["contextwise"]]
    assert main([*contextwise, "--model", str(root / "runs" / "a")]) == 0  # into runs/a/eval
    assert main([*contextwise, "--model", str(root / "hf_b")]) == 0  # into hf_b/eval
    assert (
        main(
            [
                "compare",
                str(prof / "models" / "a"),
                str(prof / "models" / "b"),
                "--out",
                str(prof / "compare"),
            ]
        )
        == 0
    )
    write_profile(prof, root, store.path)
    return root


def write_profile(prof, root, data, labels=("a", "b"), compare="compare", steps=None) -> None:
    """A profile.json as `contextlab profile` writes it (contextlab.profile.runner), over the results
    in PROF: headline rows read back from them, every step done but attention (skipped)."""
    steps = steps or [
        *(
            {"name": n, "model": m, "status": "done", "seconds": 1.5, "result": f"models/{m}/{n}.json"}
            for m in labels
            for n in EVALS
        ),
        {
            "name": "attention",
            "model": "+".join(labels),
            "status": "skipped",
            "seconds": None,
            "result": None,
            "error": "attention is recomputed for contextlab models only",
        },
    ]
    docs = {m: read_results(prof / "models" / m) for m in labels}
    best = {m: d["contextwise"]["results"]["summary"]["best_context_loss"] for m, d in docs.items()}
    niah = {m: d["niah"]["results"]["summary"] for m, d in docs.items()}
    headline = [
        {
            "measure": "best-context loss",
            "unit": "nats/token",
            "better": "lower",
            "eval": "contextwise",
            "values": best,
            "intervals": {m: None for m in labels},
        },
        {
            "measure": "needle accuracy",
            "unit": "fraction",
            "better": "higher",
            "eval": "niah",
            "values": {m: s["likelihood_accuracy"] for m, s in niah.items()},
            "intervals": {m: s["likelihood_accuracy_ci95"] for m, s in niah.items()},
            "chance": 0.2,
            "note": "a long note " * 12,
        },
        {
            "measure": "attention mean distance",
            "unit": "tokens",
            "better": "neither",
            "eval": "attention",
            "values": {},
            "intervals": {},
            "note": "skipped",
        },
    ]
    if len(labels) == 2:
        headline[0].update(diff=best["b"] - best["a"], ci95=[-0.2482910604182465, 1.1085065432683265])
        headline[1].update(diff=0.0, ci95=[0.0, 0.0])
    doc = {
        "format": "contextlab-profile",
        "version": 1,
        "models": [{"label": m, "path": str(root / f"hf_{m}"), "results": f"models/{m}"} for m in labels],
        "data": str(data),
        "budget": "quick",
        "context": 32,
        "steps": steps,
        "command": f"contextlab profile --model {root / 'hf_a'} --data {data} --budget quick --out {prof}",
        "compare": compare,
        **({"compare_notes": {"bayes-fit": "not run"}} if compare else {}),
        "headline": headline,
        "created": "2026-01-01T00:00:00+0000",
        "seconds": 250.0,
        "report": "report.html",
    }
    (prof / "profile.json").write_text(json.dumps(doc, indent=2))


def page_text(page) -> str:
    """The page without its embedded images."""
    return re.sub(r"base64,[A-Za-z0-9+/=]+", "base64,", page.read_text())


def reproduce_lines(text: str) -> dict[str, list[str]]:
    """evaluation name -> its reproduce command, split into arguments."""
    lines = re.findall(r"<p>reproduce:</p><pre>(.*?)</pre>", text, flags=re.S)
    return {shlex.split(html.unescape(s))[2]: shlex.split(html.unescape(s)) for s in lines}


def assert_displays_and_fits(page) -> None:
    n_imgs = len(re.findall(r"<img ", page.read_text()))
    dom = render(page)
    assert f'data-images="{n_imgs}"' in dom and 'data-images-ok="yes"' in dom
    assert 'data-overflow="none"' in dom, re.search(r'data-overflow="[^"]*"', dom).group(0)


def test_an_eval_folder_shows_every_evaluation_rounded_and_fits_the_page(tiny):
    folder = tiny / "profile" / "models" / "a"
    page = build_report(folder)
    text = page_text(page)
    for name in EVALS:
        assert f"Evaluation: {name}" in text and f'alt="{name} plot"' in text
    assert "best_context_loss" in text and "likelihood_accuracy" in text and "pieces_per_doc" in text
    assert "byte (" in text and str(tiny / "store") in text  # the model's tokenizer, the data record
    assert not LONG_FLOAT.search(text), LONG_FLOAT.search(text).group(0)
    assert re.search(r"likelihood_accuracy</th><td[^>]*>0\.20+ \[0\.0?\d{1,3}, 0\.\d{1,3}\]", text)
    assert_displays_and_fits(page)


def test_the_reproduce_line_of_a_page_writes_the_same_evaluation(tiny, tmp_path):
    folder = tiny / "profile" / "models" / "a"
    lines = reproduce_lines(page_text(build_report(folder, tmp_path / "r.html")))
    assert set(lines) == set(EVALS)
    cw = lines["contextwise"]
    assert cw[:4] == ["contextlab", "eval", "contextwise", "--model"] and "--data" in cw and "--out" in cw
    for name in ("contextwise", "niah"):
        assert main([*lines[name][1:], "--out", str(tmp_path / "again")]) == 0  # the last --out wins
        old, new = (json.loads((d / f"{name}.json").read_text()) for d in (folder, tmp_path / "again"))
        for key in ("options", "data", "results", "arrays"):
            assert new[key] == old[key], (name, key)
        assert new["model"]["path"] == old["model"]["path"] and new["model"]["step"] == old["model"]["step"]
        for f in old["arrays"].values():
            assert np.array_equal(np.load(folder / f), np.load(tmp_path / "again" / f))


def test_a_run_reports_its_evaluations_with_a_complete_reproduce_line(tiny):
    run = tiny / "runs" / "a"
    text = page_text(build_report(run))
    line = reproduce_lines(text)["contextwise"]
    # the run and its step, so the rerun's result names the model as the first did (a user's rerun of a
    # checkpoint's path gave its id, and its plots' legends, that path)
    assert line[line.index("--model") + 1] == str(run) and line[line.index("--step") + 1] == "2"
    assert line[line.index("--data") + 1] == str(tiny / "store") and "--out" not in line  # the run's eval/
    assert "Run a" in text and "loss curve" in text


def test_a_model_folder_reports_its_eval_folder_or_says_how_to_make_one(tiny):
    assert main(["report", str(tiny / "hf_b")]) == 0
    text = page_text(tiny / "hf_b" / "report.html")
    assert "Model hf_b" in text and "Evaluation: contextwise" in text
    with pytest.raises(UserError, match=r"no evaluation results in .*hf_a/eval: run `contextlab eval NAME"):
        build_report(tiny / "hf_a")


def test_a_folder_of_two_models_shows_both_a_table_of_them_and_their_comparison(tiny, tmp_path):
    for part in ("models/a", "models/b", "compare"):
        shutil.copytree(tiny / "profile" / part, tmp_path / "two" / part.split("/")[-1])
    page = build_report(tmp_path / "two")
    text = page_text(page)
    assert "<h2>Results a</h2>" in text and "<h2>Results b</h2>" in text and "<h2>Models</h2>" in text
    assert text.count("Evaluation: niah") == 2 and "Comparison a - b" in text
    models = text[text.index("<h2>Models</h2>") : text.index("<h2>Results a</h2>")]
    assert "best_context_loss" in models and "likelihood_accuracy" in models
    assert not LONG_FLOAT.search(text)


def test_a_profile_of_two_models_has_its_headline_steps_models_and_comparisons(tiny):
    prof = tiny / "profile"
    page = write_report(prof)
    text = page_text(page)
    assert "<h1>contextlab profile: a vs b</h1>" in text
    assert "budget <b>quick</b>" in text and "context <b>32</b>" in text
    head = text[text.index("<h2>Headline</h2>") : text.index("<h2>Steps</h2>")]
    assert "b − a" in head and "[-0.248, 1.11]" in head and "no clear difference (lower is better)" in head
    assert "nats/token" in head and "chance 0.2" in head
    assert re.search(r"<td[^>]*>0\.200 \[0\.0\d+, 0\.\d+\]", head)  # a value with its own interval
    assert "Missing:</b> attention of a+b (skipped)" in text and "contextlab models only" in text
    assert "Not compared" in text and "bayes-fit: not run" in text
    assert "Model a: " in text and "Model b: " in text and text.count("Evaluation: passkey") == 2
    assert "Comparison a - b" in text and not LONG_FLOAT.search(text)
    assert "did not finish" not in text
    assert_displays_and_fits(page)


def test_a_profile_killed_while_pairing_says_it_did_not_finish(tiny, tmp_path):
    """A pair profile killed after its steps, while its models were being compared: every step "done",
    some comparisons absent, no headline, and nothing on the page said the profile was unfinished."""
    prof = shutil.copytree(tiny / "profile", tmp_path / "killed")
    doc = json.loads((prof / "profile.json").read_text())
    for key in ("headline", "created", "seconds", "report", "compare_notes"):
        doc.pop(key, None)
    (prof / "profile.json").write_text(json.dumps(doc))
    text = page_text(build_report(prof))
    said = "This profile did not finish: it lacks the pairing of the two models (contextlab compare of "
    assert said + "each evaluation) and its headline. Run its command again (below)" in text
    doc["steps"][0]["status"] = "pending"  # killed before its last steps: they are counted
    (prof / "profile.json").write_text(json.dumps(doc))
    text = page_text(build_report(prof))
    assert f"it lacks 1 of its {len(doc['steps'])} steps, the pairing of the two models" in text


def test_a_profile_inside_a_larger_folder_keeps_its_headline_and_is_not_shown_twice(tiny, tmp_path):
    """A user's `report` of a folder holding a `profile --compare` folder lost its headline and steps,
    showed its model folders as loose results, its compare folder as an empty models-table column and
    two sections both headed "Comparison ..."; the profile is now shown as its own page shows it."""
    shutil.copytree(tiny / "profile", tmp_path / "all" / "prof")
    for part in ("models/a", "compare"):
        shutil.copytree(tiny / "profile" / part, tmp_path / "all" / "loose" / part.split("/")[-1])
    text = page_text(build_report(tmp_path / "all"))
    assert "<h2>Profile prof: contextlab profile: a vs b</h2>" in text
    head = text[text.index("<h3>Headline</h3>") : text.index("<h3>Steps</h3>")]
    assert "b − a" in head and "[-0.248, 1.11]" in head
    assert "Results prof/" not in text and "<h2>Results loose/a</h2>" in text
    assert text.count("<h2>Comparison a - b</h2>") == 1 and text.count("<h3>Comparison a - b</h3>") == 1
    assert "<h2>Models</h2>" not in text  # one model folder outside the profile: no table of one


def test_two_comparisons_of_the_same_labels_are_told_apart_by_their_folders(tiny, tmp_path):
    for where in ("one", "two"):
        shutil.copytree(tiny / "profile" / "compare", tmp_path / "both" / where)
    text = page_text(build_report(tmp_path / "both"))
    assert "<h2>Comparison a - b (one)</h2>" in text and "<h2>Comparison a - b (two)</h2>" in text


def test_a_profile_of_one_model_with_failed_and_pending_steps(tiny, tmp_path):
    prof = tmp_path / "one"
    shutil.copytree(tiny / "profile" / "models" / "a", prof / "models" / "a")
    steps = [
        {
            "name": "contextwise",
            "model": "a",
            "status": "done",
            "seconds": 2.0,
            "result": "models/a/contextwise.json",
        },
        {
            "name": "kv",
            "model": "a",
            "status": "failed",
            "seconds": 0.5,
            "result": None,
            "error": "no --data",
        },
        {"name": "icl", "model": "a", "status": "pending", "seconds": None, "result": None, "error": None},
    ]
    write_profile(prof, tiny, tiny / "store", labels=("a",), compare=None, steps=steps)
    text = page_text(build_report(prof))
    assert "<h1>contextlab profile: a</h1>" in text and "Comparison" not in text and " − " not in text
    assert "Missing:</b> kv of a (failed), icl of a (pending)" in text and "no --data" in text


def test_report_help_says_what_it_accepts(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for what in (
        "training run",
        "Hugging Face",
        "evaluation results",
        "profile",
        "contextlab compare",
        "sweep",
    ):
        assert what in out


def test_an_element_wider_than_the_window_is_detected(tiny, tmp_path):
    page = build_report(tiny / "profile" / "models" / "a", tmp_path / "r.html")
    wide = tmp_path / "wide.html"
    cell = '<td style="white-space:nowrap">' + "x" * 600 + "</td>"
    wide.write_text(
        page.read_text().replace(
            "<h2>", f"<details><summary>s</summary><table><tr>{cell}</tr></table></details><h2>", 1
        )
    )
    assert re.search(r'data-overflow="(table|td|tbody|tr)[^"]*px', render(wide))


def test_numbers_are_rounded_for_reading_and_intervals_fold_into_their_value():
    from contextlab.report.blocks import plain, with_intervals

    assert plain([0.2482910604182465, 1.1085065432683265]) == "[0.248, 1.11]"
    assert plain(5.732849216461181) == "5.733" and plain(0.001044857501983687) == "0.001045"
    assert (
        plain(12) == "12" and plain(1_234_567) == "1,234,567" and plain(None) == "—" and plain(True) == "yes"
    )
    assert plain("0.30000000000000004") == "0.3" and plain("tiny-4x256") == "tiny-4x256"  # CSV cells
    summary = {"gain": 0.06433470547199249, "gain_interval95": [-0.016616955814060586, 0.1452863667580]}
    assert with_intervals(summary) == {"gain": "0.064 [-0.017, 0.145]"}
    # the decimals follow the interval's width: its ends never round to one number ([10.8, 10.8])
    narrow = {"loss": 10.838, "loss_interval95": [10.82700001, 10.85000002]}
    assert with_intervals(narrow) == {"loss": "10.8380 [10.8270, 10.8500]"}


def test_the_reproduce_line_writes_every_kind_of_option_the_command_line_reads(tmp_path):
    from contextlab.report.evals import reproduce

    (tmp_path / "m").mkdir()  # the model is where it was evaluated (else a note says it moved)
    doc = {
        "eval": "niah",
        "model": {"path": str(tmp_path / "m"), "dtype": "bf16", "batch_size": 4},
        "data": {"haystack": "/data/essays", "hash": "h"},
        "options": {
            "lengths": [],
            "depths": [0.0, 50.0],
            "samples": 2,
            "scoring": "both",
            "flag": False,
            "limit": None,
            "answers": ["x, y", "z"],
        },
    }
    line, notes = reproduce(doc, tmp_path)
    assert shlex.split(line) == [
        *("contextlab", "eval", "niah", "--model", str(tmp_path / "m"), "--data", "/data/essays"),
        *("--dtype", "bf16", "--batch-size", "4", "--lengths", "", "--depths", "0.0,50.0", "--samples", "2"),
        *("--scoring", "both", "--flag", "false", "--limit", "none", "--answers", "x, y,z"),
        *("--out", str(tmp_path.resolve())),
    ]
    assert notes == ["option answers has a value with a comma, which --answers splits: not exact"]
    assert reproduce({**doc, "model": {"path": "-"}}, tmp_path)[0] is None  # a model built in memory
    line, notes = reproduce({**doc, "model": {"path": "m"}, "data": {"store": "s"}}, tmp_path)
    assert "--data s" in line and any("relative paths" in n for n in notes)  # older results: no cwd
    ran_in = {**doc, "cwd": str(tmp_path), "model": {"path": "m"}, "data": {"store": "stores/s"}}
    line, notes = reproduce(ran_in, tmp_path)  # relative paths as given, resolved where they were given
    assert f"--model {tmp_path / 'm'} " in line and f"--data {tmp_path / 'stores' / 's'} " in line
    assert not any("relative paths" in n for n in notes)
    # infill's --files picks a folder's files: said for a folder, not for a store (it meant nothing there)
    infill = {**doc, "eval": "infill", "options": {"files": "*.py", "samples": 4}}
    assert "--files" not in reproduce({**infill, "data": {"store": "/s"}}, tmp_path)[0]
    assert "--files '*.py'" in reproduce({**infill, "data": {"folder": "/code", "glob": "*.py"}}, tmp_path)[0]


def test_an_entropy_analysis_shows_its_rows_per_context_and_every_correlation(tmp_path):
    """The report showed the entropy analysis's summary only: no row of CE, Bayes risk, entropy or
    dimension per context, no Pearson r; a measure with no value at a context is an empty cell."""
    from contextlab.eval.results import write_result

    rows = [
        {"context": 0, "ce": 0.7435, "ce_stderr": 0.007, "bayes_risk": 0.6931, "excess": 0.0504,
         "entropy": {"10": -47.8, "128": None}, "dimension": {"0.01": 3}, "mle": None},
        {"context": 9, "ce": 0.2588, "ce_stderr": 0.01, "bayes_risk": 0.1916, "excess": 0.0731,
         "entropy": {"10": -51.0, "128": -2134.28}, "dimension": {"0.01": 3}, "mle": 1.39},
    ]  # fmt: skip
    fits = {"entropy@10": {"r": -0.319}, "entropy@128": {"r": -0.695}, "mle": {"r": -0.666}}
    write_result(
        tmp_path / "ent",
        "entropy",
        results={"summary": {"best_measure": "entropy@128"}, "contexts": rows, "fits_vs_ce": fits},
        options={},
        model={"path": str(tmp_path / "m")},
        data={"store": "s"},
        seconds=0.0,
    )
    text = re.sub(r"<[^>]+>", " ", build_report(tmp_path / "ent").read_text())
    assert "per visible context" in text and "-2134" in text and "0.7435" in text and "0.1916" in text
    assert "Pearson r of each measure" in text and "-0.695" in text and "-0.666" in text


def test_an_optimal_context_folder_is_reported(tmp_path):
    """`report` refused an optimal-context folder ('nothing to report'); it shows the grid, the Bayes
    rows, the optimum per size (or that nothing was learned), the notes and a command that resumes it."""
    from contextlab.sweep import optimal_context as oc

    cfg = oc.OptimalContextConfig(
        n_bits=12, n_tasks=4, min_far_bit=3, data_sizes=[512], contexts=[2, 7, 12], val_samples=500,
        hidden=32, batch_size=64, eval_every=20, max_steps=40, measure_features=False,
        out_dir=str(tmp_path / "oc"),
    )  # fmt: skip
    res = oc.run_optimal_context(cfg, progress=False)
    oc.optimal_context_png(res, tmp_path / "oc" / "optimal_context.png")
    page = build_report(tmp_path / "oc").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    assert "Optimal context vs training-set size" in text and "Bayes, validation set" in text
    best = res["cells"]["512/7"]["best_val_loss"]
    assert f"{best:.4g}" in text and "optimal context plot" in page
    cmd = next(m for m in re.findall(r"<pre>(.*?)</pre>", page, re.S) if "optimal-context" in m)
    args = shlex.split(html.unescape(cmd))
    assert args[:2] == ["contextlab", "optimal-context"] and f"out_dir={tmp_path / 'oc'}" in args
    assert "contexts=[2,7,12]" in args and "measure_features=false" in args


def test_a_nested_summary_is_shown_and_heads_the_models_table():
    """A user's report of `analyze attention --compare` showed one number, the seconds: the summary's
    numbers sit in groups (a, b, a_vs_b), and now each appears, with its interval, and the models
    table takes the mean distance."""
    from contextlab.report.blocks import with_intervals
    from contextlab.report.evals import eval_scalars, headline

    summary = {
        "a": {"mean_distance": 50.85, "entropy": 3.92},
        "b": {"mean_distance": 44.64},
        "a_vs_b": {"mean_distance_diff": 6.21, "mean_distance_diff_interval95": [5.74, 6.68]},
    }
    doc = {"seconds": 1.3, "results": {"summary": summary}}
    shown = with_intervals(eval_scalars(doc))
    assert shown["a.mean_distance"] == 50.85 and shown["b.mean_distance"] == 44.64
    assert shown["a_vs_b.mean_distance_diff"] == "6.210 [5.740, 6.680]" and shown["seconds"] == 1.3
    assert headline("attention", doc) == ("a.mean_distance", 50.85)


def test_results_of_several_commits_or_of_uncommitted_code_are_flagged(tmp_path, monkeypatch):
    """A report mixing results of several versions of the code, or of a checkout with uncommitted
    changes, said nothing: each result recorded its commit only, and no dirty tree at all."""
    from contextlab.eval import results as res

    version = res.code_version()
    assert version["git_commit"] is not None and isinstance(version["git_dirty"], bool)  # this checkout
    made = iter(
        [
            {**version, "git_commit": "a" * 40, "git_dirty": False},
            {**version, "git_commit": "a" * 40, "git_dirty": False},
            {**version, "git_commit": "b" * 40, "git_dirty": True},
            {**version, "git_commit": "b" * 40, "git_dirty": True, "code_digest": "0" * 16},
        ]
    )
    monkeypatch.setattr(res, "code_version", lambda: next(made))

    def write(folder, name):
        res.write_result(
            tmp_path / folder, name, results={"summary": {"loss": 1.0}}, options={},
            model={"path": str(tmp_path / folder)}, data={"store": "s"}, seconds=0.0,
        )  # fmt: skip

    write("m1", "ppl")
    write("m1", "niah")
    text = html.unescape(re.sub(r"<[^>]+>", " ", build_report(tmp_path).read_text()))
    assert "commits of contextlab" not in text and "uncommitted" not in text  # one commit, clean
    write("m2", "ppl")
    text = html.unescape(
        re.sub(r"<[^>]+>", " ", build_report(tmp_path, out=tmp_path / "r2.html").read_text())
    )
    assert (
        "the 3 evaluation results here come from 2 commits of contextlab: aaaaaaaaaa (2), bbbbbbbbbb (1)"
        in text
    )
    assert "1 of the 3 were computed by a checkout with uncommitted changes (git_dirty)" in text
    assert "versions of that code" not in text
    # one commit, two different edits on top of it (a resumed profile kept a result of code edited since)
    assert len(version["code_digest"]) == 16 and version["code_digest"] != "0" * 16
    write("m2", "niah")
    text = html.unescape(
        re.sub(r"<[^>]+>", " ", build_report(tmp_path, out=tmp_path / "r3.html").read_text())
    )
    assert (
        "2 of the 4 were computed by a checkout with uncommitted changes (git_dirty), which no commit "
        in text
    )
    assert "reproduces, and by 2 different versions of that code (code_digest)" in text


def test_the_models_table_names_each_model_and_marks_a_row_read_on_other_data_or_tokenizers(tmp_path):
    """A user's models table set a WikiText loss under GPT-2's tokenizer beside State of the Union losses
    under a 2,048-id BPE, and two results of one model read at other contexts, all unmarked; its
    infill rows took the FIM model's PSM and the causal model's l2r, never in one row."""
    from contextlab.eval.results import write_result
    from contextlab.report.evals import models_table

    bpe = {"name": "bpe-2048", "hash": "1" * 64}
    gpt2 = {"name": "gpt2", "hash": "2" * 64}

    def write(folder, name, summary, tok, data, options=None):
        write_result(
            tmp_path / folder, name, results={"summary": summary}, options=options or {},
            model={"path": str(tmp_path / "runs" / folder), "tokenizer": tok, "context": 128},
            data=data, seconds=0.0,
        )  # fmt: skip

    su = {"store": str(tmp_path / "su"), "hash": "a" * 64}
    write("clm", "ppl", {"loss": 4.78}, bpe, su)
    write("wt", "ppl", {"loss": 6.74}, gpt2, {"store": str(tmp_path / "wt"), "hash": "b" * 64})
    write("clm", "infill", {"single_l2r_exact_match": 0.1}, bpe, su)
    write("fim", "infill", {"single_psm_exact_match": 0.3, "single_l2r_exact_match": 0.2}, bpe, su)
    write("fim", "ppl", {"loss": 4.74}, bpe, su, {"context": 1024})
    text = html.unescape(
        re.sub(r"<[^>]+>", " ", models_table({m: tmp_path / m for m in ("clm", "wt", "fim")}))
    )
    assert re.search(r"measure\s+clm\s+wt\s+fim\s+model\s+clm\s+wt\s+fim\s+tokenizer", text)  # its model row
    assert "bpe-2048 (11111111)" in text and "gpt2 (22222222)" in text
    assert "4.78 (on su aaaaaaaa, tokenizer bpe-2048 (11111111))" in text
    assert "6.74 (on wt bbbbbbbb, tokenizer gpt2 (22222222))" in text
    assert "4.74 (on su aaaaaaaa, tokenizer bpe-2048 (11111111), context 1,024)" in text
    assert "their numbers are not comparable" in text
    infill = re.search(r"infill\s+single_l2r_exact_match\s+([\d.]+)\s+([\d.]+)", text)
    assert infill and infill.groups() == ("0.1", "0.2")  # both models' l2r in one row, unmarked: same data


def test_two_models_evaluated_together_show_their_joint_plot_and_their_runs_names(tmp_path):
    """`eval contextwise --model A --model B --out DIR` wrote DIR/contextwise_models.png, which `report DIR`
    left out, and its models table named the models "step_000053" and "step_000059"."""
    from contextlab.eval.results import write_result
    from contextlab.report.evals import models_table
    from contextlab.report.html import build_report

    for name, step in (("gpt", 59), ("clm2", 53)):
        write_result(
            tmp_path / name, "ppl", results={"summary": {"loss": 6.0}}, options={},
            model={"path": str(tmp_path / "runs" / name / "checkpoints" / f"step_{step:06d}"), "step": step},
            data={"store": "s", "hash": "a" * 64}, seconds=0.0,
        )  # fmt: skip
    text = html.unescape(re.sub(r"<[^>]+>", " ", models_table({m: tmp_path / m for m in ("gpt", "clm2")})))
    assert re.search(r"model\s+gpt \(step_000059\)\s+clm2 \(step_000053\)", text)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    fig.savefig(tmp_path / "contextwise_models.png")
    plt.close(fig)
    page = build_report(tmp_path).read_text()
    assert 'alt="contextwise loss of the models"' in page


def test_a_float_that_only_rounds_to_a_whole_number_keeps_its_zeros():
    """'train loss 6' beside '6.034': 5.99996 read as a whole number; and 29659 beside 142,825."""
    from contextlab.report.blocks import plain

    assert plain(5.99996) == "6.000" and plain(6.034) == "6.034" and plain(2.0) == "2"
    assert plain(29659) == "29,659" and plain(142825) == "142,825" and plain(9999) == "9999"


def test_a_profile_headline_value_keeps_its_interval_apart():
    """A user's profile page read "10.84 [10.8, 10.8]" for a best-context loss of [10.823, 10.849]."""
    from contextlab.report.profile import with_interval

    shown = with_interval(10.849084, [10.823, 10.849])
    low, high = shown.split("[")[1].rstrip("]").split(", ")
    assert low != high and shown == "10.8491 [10.8230, 10.8490]"
    assert with_interval(0.2, [0.0567, 0.51]) == "0.200 [0.057, 0.510]"
    assert with_interval(None, [1.0, 2.0]) is None and with_interval(3.5, None) == 3.5


def test_one_measure_of_two_models_is_shown_to_the_same_decimals():
    """A profile's headline row set niah's 1.0000 [0.9630, 1.0000] beside 0.200 [0.133, 0.289]: two
    precisions where one measure of two models is read side by side."""
    from contextlab.report.profile import headline_section

    doc = {
        "models": [{"label": "written"}, {"label": "blind"}],
        "headline": [
            {
                "measure": "niah accuracy",
                "values": {"written": 1.0, "blind": 0.2},
                "intervals": {"written": [0.963, 1.0], "blind": [0.133, 0.289]},
                "better": "higher",
            }
        ],
    }
    page = headline_section(doc)
    assert "1.0000 [0.9630, 1.0000]" in page and "0.2000 [0.1330, 0.2890]" in page
    assert "0.200 [0.133, 0.289]" not in page


def test_an_infill_column_is_shown_to_one_precision():
    from contextlab.report.details import infill_tables

    def mode(acc, ci):
        return {"exact_match": {"accuracy": acc, "ci95": ci}, "generation_check": {}}

    doc = {
        "results": {
            "kinds": {
                "single": {
                    "n": 200,
                    "modes": {"psm": mode(1.0, [0.981, 1.0]), "spm": mode(0.2, [0.15, 0.26])},
                }
            }
        }
    }
    page = infill_tables(doc)
    assert "1.0000 [0.9810, 1.0000]" in page and "0.2000 [0.1500, 0.2600]" in page
