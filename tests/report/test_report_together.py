"""A folder of several runs draws their curves together, and only curves that measure the same thing:
validation losses of runs that validate on the same rows (the left-to-right loss, runs of MLM or span
corruption named and left out), contextwise curves of runs read on the same text."""

from __future__ import annotations

import json
import subprocess
import sys

from contextlab.report.evals import RESULT_FORMAT
from contextlab.report.html import build_report
from contextlab.report.together import together_section


def _run(
    root, name, objective="clm", context=64, val=(3.0, 2.5), lm=None, cw_hash=None, split="run", data=""
):
    run = root / "runs" / name
    run.mkdir(parents=True)
    rows = []
    for i, v in enumerate(val, 1):
        row = {"step": 10 * i, "loss": v + 0.1, "tokens": 1000 * i, "val_loss": v}
        if lm is not None:
            row["val_lm_loss"] = lm[i - 1]
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "config.toml").write_text(
        f'[data]\nstore = "s"\nval_fraction = 0.1\n{data}[train]\ncontext = {context}\nval_tokens = 4096\n'
        f'[objective]\nname = "{objective}"\n'
    )
    if cw_hash:
        (run / "eval").mkdir()
        loss = [4.0 - 0.01 * i for i in range(1, context)]
        doc = {
            "format": RESULT_FORMAT,
            "eval": "contextwise",
            "model": {"id": name},
            "data": {"store": "/x/s", "hash": cw_hash, "split": split, "held_out": "val_fraction 0.1"},
            "options": {},
            "results": {
                "summary": {"best_context_loss": loss[-1]},
                "context": list(range(1, context)),
                "loss": loss,
                "train_context": context,
                "n_documents": 6,
            },
        }
        (run / "eval" / "contextwise.json").write_text(json.dumps(doc))
    return run


def _section(root, runs):
    return together_section(runs, {r: r.name for r in runs})


def test_runs_on_the_same_rows_and_text_are_drawn_together(tmp_path):
    runs = [
        _run(tmp_path, "clm", cw_hash="h"),
        _run(tmp_path, "mtp", objective="mtp", val=(3.5, 3.0), lm=(3.1, 2.6), cw_hash="h"),
        _run(tmp_path, "span", objective="span", val=(2.0, 1.5)),
    ]
    html = _section(tmp_path, runs)
    assert html.startswith("<h2>Runs together</h2>")
    assert html.count("<img ") == 2  # the validation losses of clm and mtp, and their contextwise curves
    assert 'alt="validation loss of the runs"' in html and 'alt="contextwise loss of the runs"' in html
    assert "not drawn: span (span): the objective&#x27;s own validation loss is another quantity" in html


def test_the_left_to_right_loss_is_the_one_drawn(tmp_path, monkeypatch):
    from contextlab.report import plots

    drawn = {}
    real = plots.curves_figure
    monkeypatch.setattr(
        plots, "curves_figure", lambda curves, **kw: drawn.update(curves) or real(curves, **kw)
    )
    runs = [_run(tmp_path, "clm"), _run(tmp_path, "mtp", objective="mtp", val=(3.5, 3.0), lm=(3.1, 2.6))]
    _section(tmp_path, runs)
    assert drawn == {"clm": [(1000, 3.0), (2000, 2.5)], "mtp": [(1000, 3.1), (2000, 2.6)]}


def test_runs_of_other_flops_per_token_are_drawn_against_flops(tmp_path, monkeypatch):
    """MTP's extra heads cost FLOPs: at equal tokens its curve would be flattered, so such runs share
    the axis their budgets are compared on."""
    from contextlab.report import plots

    drawn = []
    real = plots.curves_figure
    monkeypatch.setattr(
        plots, "curves_figure", lambda curves, **kw: drawn.append((curves, kw)) or real(curves, **kw)
    )
    runs = [_run(tmp_path, "clm"), _run(tmp_path, "mtp", objective="mtp", val=(3.5, 3.0), lm=(3.1, 2.6))]
    for run, per_token in zip(runs, (6.0, 18.0)):
        ckpt = run / "checkpoints" / "step_000020"
        ckpt.mkdir(parents=True)
        (ckpt / "state.json").write_text(json.dumps({"step": 20, "tokens": 2000, "flops": 2000 * per_token}))
    _section(tmp_path, runs)
    ((curves, kw),) = drawn
    assert curves == {"clm": [(6000, 3.0), (12000, 2.5)], "mtp": [(18000, 3.1), (36000, 2.6)]}
    assert kw["xlabel"].startswith("training FLOPs")
    (runs[1] / "checkpoints" / "step_000020" / "state.json").write_text(
        json.dumps({"tokens": 2000, "flops": 12100})
    )
    drawn.clear()
    _section(tmp_path, runs)  # within 5%: tokens, as the budgets are alike
    assert drawn[0][1]["xlabel"] == "training tokens" and drawn[0][0]["clm"] == [(1000, 3.0), (2000, 2.5)]


def test_runs_on_other_rows_or_other_text_are_not_drawn_over_each_other(tmp_path):
    runs = [_run(tmp_path, "c64", context=64, cw_hash="h"), _run(tmp_path, "c128", context=128, cw_hash="g")]
    html = _section(tmp_path, runs)
    assert "<img " not in html
    assert "validation losses are not drawn together: each run validates on other rows" in html
    assert (
        "contextwise curves are not drawn together: each run&#x27;s contextwise.json read other text" in html
    )
    # one text read at each run's own length: the classic figure of a context sweep is drawn
    other = tmp_path / "b"
    runs = [_run(other, "c64", context=64, cw_hash="h"), _run(other, "c128", context=128, cw_hash="h")]
    html = _section(other, runs)
    assert html.count("<img ") == 1 and "contextwise loss of the runs" in html


def test_one_run_has_no_section_and_the_page_has_it_after_the_runs_table(tmp_path):
    assert _section(tmp_path, [_run(tmp_path, "one", cw_hash="h")]) == ""
    _run(tmp_path, "two", cw_hash="h")
    text = build_report(tmp_path).read_text()
    assert text.index("<h2>Runs</h2>") < text.index("<h2>Runs together</h2>") < text.index("<h2>Run runs/one")


def test_drawing_them_loads_no_evaluation_and_no_torch(tmp_path):
    _run(tmp_path, "a", cw_hash="h")
    _run(tmp_path, "b", cw_hash="h")
    code = (
        "import sys; from contextlab.report.html import build_report; "
        f"build_report({str(tmp_path)!r}); print(sorted(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out.replace("'", '"'))
    assert "contextlab.result_plots" in loaded
    assert [m for m in loaded if m.startswith("contextlab.eval") or m == "torch"] == []


def test_runs_of_other_data_that_validate_on_one_val_store_are_drawn_together(tmp_path):
    """SPLICE and EP packings of one corpus, each run validating on the same data.val_store: the same
    rows, so one figure (they were said to validate on other rows); without the val_store they differ."""
    both = 'val_store = "val"\n'
    runs = [
        _run(tmp_path, "ep", data='packed = "ep"\n' + both),
        _run(tmp_path, "splice", val=(3.1, 2.4), data='packed = "splice"\n' + both),
    ]
    html = _section(tmp_path, runs)
    assert html.count("<img ") == 1 and 'alt="validation loss of the runs"' in html
    other = tmp_path / "b"
    runs = [_run(other, "ep", data='packed = "ep"\n'), _run(other, "splice", data='packed = "splice"\n')]
    assert "each run validates on other rows" in _section(other, runs)
    runs = [_run(tmp_path / "c", "a", data=both), _run(tmp_path / "c", "b", data='val_store = "other"\n')]
    assert "each run validates on other rows" in _section(tmp_path / "c", runs)


def test_runs_read_with_other_settings_are_not_drawn_together_and_the_table_says_so(tmp_path):
    """A user's two runs: one contextwise of 16 pieces, one of 64, on one text: the page drew them as one
    figure and put their best-context losses side by side without a word."""
    runs = [_run(tmp_path, "gpt", cw_hash="h"), _run(tmp_path, "clm2", cw_hash="h")]
    for run, max_docs in zip(runs, (16, 64)):
        f = run / "eval" / "contextwise.json"
        doc = json.loads(f.read_text())
        doc["options"] = {"max_docs": max_docs, "length": 0}
        f.write_text(json.dumps(doc))
    html = _section(tmp_path, runs)
    assert "contextwise loss of the runs" not in html
    assert "read other text (another store or held-out part) or with other settings (pieces)" in html
    text = build_report(tmp_path).read_text()
    assert (
        "contextwise: the runs&#x27; results are not measured alike, against runs/clm2&#x27;s: runs/gpt "
        "(--max-docs 64 -&gt; 16); their contextwise numbers here do not compare" in text
    )
    # a context sweep's runs, each read at its own length: drawn together, nothing said
    for run, length in zip(runs, (65, 129)):
        f = run / "eval" / "contextwise.json"
        doc = json.loads(f.read_text())
        doc["options"] = {"max_docs": 64, "length": length}
        f.write_text(json.dumps(doc))
    assert "contextwise loss of the runs" in _section(tmp_path, runs)
    assert "not measured alike" not in build_report(tmp_path).read_text()
