"""Retrieval plots show their 95% intervals: per-cell Wilson intervals reach the heatmaps and lines."""

from __future__ import annotations

import pytest

from contextlab import figures
from contextlab import result_plots as plots
from contextlab.eval import kv, needle, stats, tasks
from tests.conftest import KV_75
from tests.eval.conftest import byte_adapter, tiny_gpt

HAY = " ".join(f"Sentence number {i} says something about item {i * 7}." for i in range(200))


def _rows(cells: dict[tuple, list[bool]]) -> list[dict]:
    return [
        {"cell": list(c), "likelihood_correct": ok, "prompt_tokens": 10}
        for c, outcomes in cells.items()
        for ok in outcomes
    ]


def test_interval_table_holds_each_cells_wilson_interval():
    cells = {(0, 100): [True, False, False, False], (50, 100): [True] * 3, (0, 200): [False] * 5}
    by_cell = tasks.summarize(_rows(cells), 5)["by_cell"]
    table = tasks.interval_table(by_cell, "likelihood_correct", [0, 50], [100, 200])
    assert table[0][0] == list(stats.wilson(1, 4)) and table[1][0] == list(stats.wilson(3, 3))
    assert table[0][1] == list(stats.wilson(0, 5)) and table[1][1] is None  # a cell never asked


@pytest.fixture
def captured(monkeypatch):
    """The matplotlib figures the plot functions save, kept open for inspection."""
    figs = []
    monkeypatch.setattr(plots, "save_png", lambda fig, out: figs.append(fig) or out)
    yield figs
    for fig in figs:
        figures.pyplot().close(fig)


def test_lines_draw_a_band_per_series_given_one(captured):
    plots.lines_png(
        {"a": ([1, 2], [0.5, 0.6]), "b": ([1, 2], [0.4, 0.4])},
        "x.png",
        xlabel="",
        ylabel="",
        title="",
        bands={"a": [(0.3, 0.7), (0.4, 0.8)]},
    )
    plots.lines_png({"a": ([1, 2], [0.5, 0.6])}, "y.png", xlabel="", ylabel="", title="")
    banded, plain = (fig.axes[0] for fig in captured)
    assert len(banded.collections) == 1 and len(plain.collections) == 0
    (band,) = banded.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(0.3) and max(ys) == pytest.approx(0.8)


def test_needle_and_kv_results_and_plots_carry_the_intervals(tmp_path, captured):
    adapter = byte_adapter(tiny_gpt(3, context=512), batch_size=8)
    hay = tmp_path / "hay.txt"
    hay.write_text(HAY)
    out = needle.run(adapter, needle.Options(lengths=[300], depths=[0, 100], scoring="likelihood"), str(hay))
    heat = out.results["heatmap"]
    key = tasks.interval_key(heat["metric"])
    by_cell = {tuple(c["cell"]): c[key] for c in out.results["by_cell"]}
    assert heat["ci95"] == [[by_cell[(d, 300)]] for d in (0, 100)]
    out.plot(tmp_path / "needle.png")
    texts = [t.get_text() for t in captured[-1].axes[0].texts]
    lo, hi = heat["ci95"][0][0]
    assert f"[{lo:.2f}, {hi:.2f}]" in texts[0]
    res = kv.run(adapter, kv.Options(n_examples=2, n_pairs=3, positions=[0, 2], scoring="likelihood"), KV_75)
    pos = res.results["by_position"]
    assert len(pos["ci95"]) == 2 and all(lo <= a <= hi for a, (lo, hi) in zip(pos["accuracy"], pos["ci95"]))
    res.plot(tmp_path / "kv.png")
    assert len(captured[-1].axes[0].collections) == 1


def test_a_heatmap_of_one_length_keeps_its_title_and_names_its_scoring_and_values(tmp_path, captured):
    """`eval niah --samples 1` at one length drew a 230 px figure titled 'e in a haystack
    (likelihood_correc' (cut at both ends, a raw key) with an unlabelled colour bar."""
    adapter = byte_adapter(tiny_gpt(3, context=512), batch_size=8)
    hay = tmp_path / "hay.txt"
    hay.write_text(HAY)
    options = needle.Options(lengths=[300], depths=[0, 50, 100], samples=1, scoring="likelihood")
    needle.run(adapter, options, str(hay)).plot(tmp_path / "needle.png")
    fig = captured[-1]
    ax, bar = fig.axes
    assert ax.get_title() == "needle in a haystack: tiny\ncorrect: true answer is the most likely candidate"
    assert bar.get_ylabel() == "accuracy (fraction of prompts correct)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "50", "100"]
    fig.tight_layout()  # as save_png lays it out: the whole title lies inside the figure
    fig.canvas.draw()
    box = ax.title.get_window_extent()
    assert fig.get_figwidth() >= plots.HEATMAP_MIN_WIDTH and box.x0 >= 0 and box.x1 <= fig.bbox.width
