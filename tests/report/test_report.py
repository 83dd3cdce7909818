"""The HTML report: built from result files only, and every plot displays in headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from contextlab.errors import UserError
from contextlab.report.html import build_report
from tests.sweep.test_sweep import SWEEP, store  # noqa: F401  (fixture)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError(
        "headless Chromium is needed for this test: apt-get install chromium chromium-driver "
        "(make test does this on Debian)"
    )


def render(page) -> str:
    """The page's DOM after load, as headless Chromium sees it in a window 1,200 px wide (the page's
    own script marks it: ``data-images-ok``, and ``data-overflow`` naming anything wider than that)."""
    with tempfile.TemporaryDirectory() as profile:  # not beside the page: reports read that folder
        res = subprocess.run(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1200,900",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, store):  # noqa: F811
    from contextlab.sweep.compute_optimal import compute_optimal
    from contextlab.sweep.runner import run_sweep

    root = tmp_path_factory.mktemp("sweep")
    f = root / "s.toml"
    f.write_text(
        SWEEP.format(out=root / "out", store=store.path, bad=64).replace(
            '"train.context" = [16, 32, 64]', '"train.context" = [16, 32, 64]\n"model.n_embd" = [32, 64]'
        )
    )
    run_sweep(f, progress=False)
    compute_optimal(root / "out", rank_by_mean_loss=True)  # no contextwise evaluation in this sweep
    return root / "out"


def test_sweep_report_displays_every_plot(sweep_dir):
    page = build_report(sweep_dir)
    text = page.read_text()
    n_imgs = len(re.findall(r"<img ", text))
    assert n_imgs >= 2 + 6  # U-curves, optimal context, one loss curve per run
    assert "Compute-optimal context" in text and "contextlab sweep" in text and "results" in text.lower()
    assert "warning: val_loss averages the loss over positions" in text
    dom = render(page)
    assert f'data-images="{n_imgs}"' in dom and 'data-images-ok="yes"' in dom
    assert 'data-overflow="none"' in dom, re.search(r'data-overflow="[^"]*"', dom).group(0)


def test_a_broken_plot_is_detected(sweep_dir, tmp_path):
    page = build_report(sweep_dir, tmp_path / "r.html")
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text().replace("data:image/png;base64,", "data:image/png;base64,AAAA", 1))
    assert 'data-images-ok="no"' in render(broken)


def test_nothing_to_report(tmp_path):
    with pytest.raises(UserError, match="nothing to report"):
        build_report(tmp_path)


def test_the_report_imports_no_trainer_no_model_and_no_evaluation():
    """report/ reads result files only: the run-directory layout comes from contextlab.rundir."""
    code = "import sys, contextlab.report.html; print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out.replace("'", '"'))
    assert "contextlab.rundir" in loaded
    assert [m for m in loaded if m.split(".")[:2] in (["contextlab", "train"], ["contextlab", "eval"])] == []
    assert [m for m in loaded if m.split(".")[:2] == ["contextlab", "models"] or m == "torch"] == []


def test_a_run_shows_its_left_to_right_loss_when_the_objective_loss_differs(tmp_path):
    from contextlab.report.html import run_section

    def key(rows):
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return run_section(run)[1]

    fim = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5, "val_loss": 2.4, "val_lm_loss": 2.8}]
    assert key(fim) == {
        "steps": 2,
        "train loss": 2.5,
        "validation loss (its objective's)": 2.4,
        "left-to-right validation loss": 2.8,
    }
    # a clm's left-to-right loss is its own: shown too (it was left out, so the column users rank
    # objectives by lacked the baseline); an objective that cannot run left to right has none
    clm = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5, "val_loss": 2.4, "val_lm_loss": 2.4}]
    assert key(clm)["left-to-right validation loss"] == 2.4
    mlm = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5, "val_loss": 2.4}]
    assert "left-to-right validation loss" not in key(mlm)


def _tiny_results(root):
    """Two runs (metrics only), a token store and a packed store with its pack-stats, under root."""
    from contextlab.cli.pack import cmd_pack_stats
    from contextlab.data.ingest import IngestConfig, ingest
    from contextlab.data.packing import PackConfig, pack
    from tests.conftest import shakespeare

    for name in ("runs/a", "runs/b"):
        run = root / name
        run.mkdir(parents=True)
        rows = [{"step": s, "tokens": 256 * s, "loss": 3.0 - 0.1 * s} for s in range(1, 6)]
        rows[-1]["val_loss"] = 2.6
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    src = root / "src"
    src.mkdir()
    for i in range(6):
        (src / f"d{i}.txt").write_text(shakespeare(6000)[i * 1000 : i * 1000 + 400 + 100 * i])
    tokens = ingest(src, root / "store", IngestConfig(tokenizer="byte"), progress=False).store
    pack(tokens, root / "packed", PackConfig(method="ep", context=256), progress=False)
    assert cmd_pack_stats([str(root / "packed")]) == 0


def _snapshot(root) -> dict:
    import hashlib

    files = (p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_the_report_writes_nothing_but_its_page(tmp_path):
    """The report drew each run's loss curve into RUN/loss_curve.png: it must only read result folders."""
    _tiny_results(tmp_path)
    before = _snapshot(tmp_path)
    page = build_report(tmp_path, tmp_path / "all_report.html")
    after = _snapshot(tmp_path)
    assert set(after) - set(before) == {"all_report.html"} and page == tmp_path / "all_report.html"
    assert {k: v for k, v in after.items() if k != "all_report.html"} == before
    text = page.read_text()
    assert text.count('alt="loss curve" src="data:image/png;base64,') == 2  # drawn in memory, embedded
    assert "<th>held out for validation</th>" in text and "1 document (val_fraction 0.02)" in text


def test_the_loss_curve_says_what_it_plots(tmp_path, monkeypatch):
    from contextlab.report import plots

    seen = []
    real = plots.png_bytes

    def spy(fig, **kw):
        ax = fig.axes[0]
        seen.append((ax.get_title(), ax.get_ylabel(), [t.get_text() for t in ax.get_legend().get_texts()]))
        return real(fig, **kw)

    monkeypatch.setattr(plots, "png_bytes", spy)
    _tiny_results(tmp_path)
    build_report(tmp_path / "runs" / "a")
    assert seen == [("training and validation loss: a", "loss (nats/token)", ["train", "validation"])]


def test_a_result_of_an_earlier_checkpoint_says_so_and_commands_are_quoted(tmp_path):
    """A run trained further after its evaluation: the page said "steps 45 ... ppl loss 4.2" with the
    step-30 origin only in the records; the train command of a path with spaces must be copyable."""
    from contextlab.report.html import run_section

    run = tmp_path / "run é 1"
    (run / "checkpoints" / "step_000045").mkdir(parents=True)
    (run / "checkpoints" / "step_000045" / "state.json").write_text(json.dumps({"step": 45}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 3.0}) + "\n" for s in (30, 45)))
    (run / "config.toml").write_text("[train]\ncontext = 64\n")
    (run / "eval").mkdir()
    doc = {
        "format": "contextlab-eval-result",
        "eval": "ppl",
        "model": {"path": str(run / "checkpoints" / "step_000030"), "step": 30},
        "options": {},
        "results": {"summary": {"loss": 4.222}},
    }
    (run / "eval" / "ppl.json").write_text(json.dumps(doc))
    page = run_section(run)[0]
    assert "evaluated at step 30; the run's newest checkpoint is step 45" in page
    assert "contextlab train &#x27;" + str(run / "config.toml") + "&#x27;" in page
    doc["model"]["step"] = 45  # the newest checkpoint's own result: no note
    (run / "eval" / "ppl.json").write_text(json.dumps(doc))
    assert "evaluated at step" not in run_section(run)[0]
    assert "trained on" not in run_section(run)[0]
    doc["data"] = {"store": "st", "hash": "h", "training_store": True}  # read on its own training store
    (run / "eval" / "ppl.json").write_text(json.dumps(doc))
    assert "<b>read on the token store the model trained on</b>" in run_section(run)[0]


def test_the_rerun_command_of_a_moved_run_says_the_model_is_not_where_it_was_evaluated(tmp_path):
    from contextlab.report.evals import reproduce

    doc = {"eval": "ppl", "model": {"path": str(tmp_path / "gone" / "checkpoints" / "step_000030")}}
    cmd, notes = reproduce(doc, tmp_path / "copy" / "eval")
    assert "--model " + str(tmp_path / "gone") in cmd
    assert any(
        "which is not there now (moved or copied since): give --model its new place" in n for n in notes
    )
    (tmp_path / "gone" / "checkpoints" / "step_000030").mkdir(parents=True)
    assert not any("not there now" in n for n in reproduce(doc, tmp_path / "copy" / "eval")[1])


def test_runs_of_several_objectives_say_their_own_losses_do_not_compare(tmp_path):
    """A user's runs table set MTP's loss over all heads, MLM's over masked tokens and span corruption's
    over target spans beside clm's under one header: span looked almost as good as clm."""
    from contextlab.report.html import build_report
    from contextlab.report.runs import OWN_LOSS_NOTE

    for name, objective in (("a", "clm"), ("b", "span")):
        run = tmp_path / name
        run.mkdir()
        (run / "config.toml").write_text(f'[objective]\nname = "{objective}"\n')
        rows = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5, "val_loss": 2.4}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = build_report(tmp_path).read_text()
    assert html.escape(OWN_LOSS_NOTE) in text and "validation loss (its objective&#x27;s)" in text
    (tmp_path / "b" / "config.toml").write_text('[objective]\nname = "clm"\n')
    assert html.escape(OWN_LOSS_NOTE) not in build_report(tmp_path).read_text()  # one objective: no note
