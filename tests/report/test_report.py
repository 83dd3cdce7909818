"""The HTML report: built from result files only, and every plot displays in headless Chromium."""

from __future__ import annotations

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
        "validation loss": 2.4,
        "left-to-right validation loss": 2.8,
    }
    clm = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5, "val_loss": 2.4, "val_lm_loss": 2.4}]
    assert "left-to-right validation loss" not in key(clm)
