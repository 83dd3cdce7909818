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
    # a needle shorter than the pool's longest leaves its prompt short: the axis says "at most"
    assert captured[-1].axes[0].get_xlabel() == "prompt length (tokens, at most)"
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
    assert ax.get_title() == (
        "needle in a haystack: tiny\ncorrect: true answer is the most likely candidate\n"
        "chance 0.20; 5 prompts a cell"
    )
    assert bar.get_ylabel() == "accuracy (fraction of prompts correct)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "50", "100"]
    fig.tight_layout()  # as save_png lays it out: the whole title lies inside the figure
    fig.canvas.draw()
    box = ax.title.get_window_extent()
    assert fig.get_figwidth() >= plots.HEATMAP_MIN_WIDTH and box.x0 >= 0 and box.x1 <= fig.bbox.width


def test_a_heatmap_centres_its_colours_on_chance_and_marks_it(captured):
    """A user read a niah cell of 0.20 as "bad" (red) where 0.20 was chance, stated nowhere on the plot."""
    plots.heatmap_png(
        [[0.2, 1.0], [0.0, 0.6]], [0, 100], [64, 128], "h.png", row_label="", col_label="", title="t",
        chance=0.2, per_cell=10,
    )  # fmt: skip
    ax, bar = captured[-1].axes
    assert ax.get_title() == "t\nchance 0.20; 10 prompts a cell"
    (image,) = ax.images
    assert image.norm.vcenter == 0.2  # chance is the scale's middle colour (yellow)
    assert [line.get_ydata()[0] for line in bar.lines] == [0.2]
    # chance is one of the colour bar's ticks, named; the 0.2 tick it would overprint is not drawn twice
    labels = {round(float(t), 6): lab.get_text() for t, lab in zip(bar.get_yticks(), bar.get_yticklabels())}
    assert labels[0.2] == "chance 0.20" and list(labels.values()).count("chance 0.20") == 1
    assert all(abs(float(image.norm(t)) - 0.5) >= 0.07 for t in labels if t != 0.2)
    plots.heatmap_png([[0.5]], [0], [64], "g.png", row_label="", col_label="", title="t")
    assert captured[-1].axes[0].get_title() == "t"  # no chance given: nothing claimed


def test_kv_plot_names_its_measure_band_chance_and_a_prompt_past_the_context(tmp_path, captured):
    """kv's y axis was the raw key `likelihood_correct`, its x ticks 0.0, 0.2, ... for two positions, its
    band unnamed, and nothing said the prompts ran past the training context."""
    adapter = byte_adapter(tiny_gpt(3, context=256), batch_size=8)
    options = kv.Options(n_examples=2, n_pairs=3, positions=[0, 2], scoring="likelihood")
    with pytest.warns(Warning):
        res = kv.run(adapter, options, KV_75)
    res.plot(tmp_path / "kv.png")
    ax = captured[-1].axes[0]
    assert (
        ax.get_ylabel().replace("\n", " ") == "accuracy (correct: true answer is the most likely candidate)"
    )
    fig = captured[-1]
    fig.tight_layout()
    fig.canvas.draw()
    box = ax.yaxis.label.get_window_extent()
    assert box.y0 >= 0 and box.y1 <= fig.bbox.height  # the label fits the figure (it ran off it)
    assert all(float(t).is_integer() for t in ax.get_xticks())
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["tiny", "tiny: 95% interval (Wilson)", "chance (0.33)"]
    assert "run past the model's 256-token context" in ax.get_title()


def test_bayes_fit_plot_says_its_bars_and_a_fit_the_points_do_not_pin_down(captured):
    fit = {"C0": 4.8, "C0_err": 0.1, "C": 0.5, "C_err": 0.2, "gamma": 0.8, "gamma_err": 2.3, "r2": 0.94}
    plots.bayes_fit_png([1, 2, 4], [5.3, 5.0, 4.9], [0.1, 0.1, 0.1], {**fit, "loose": ["gamma"]}, "b.png")
    legend = [t.get_text() for t in captured[-1].axes[0].get_legend().get_texts()]
    assert legend == [
        "C0 + C/l^γ: C0=4.800 ± 0.1, C=0.500 ± 0.2, γ=0.800 ± 2.3, R²=0.9400\n"
        "not pinned down by these points: gamma",
        "measured: mean ± 1 standard error",
    ]


def test_compare_bayes_fit_title_gives_each_fit_difference_its_interval_or_says_it_has_none(
    captured, monkeypatch, tmp_path
):
    from contextlab.compare import plots as compare_plots

    monkeypatch.setattr(compare_plots, "save_png", plots.save_png)  # the fixture's: kept for reading

    by_length = [{"length": 1, "diff": 0.1, "interval95": [0.0, 0.2]}]
    fit = {
        "C0": {"diff": 0.108, "interval95": [0.01, 0.2]},
        "gamma": {"diff": 0.066, "interval95": None, "no_interval": "a fit is degenerate, not bootstrapped"},
    }
    doc = {"a": {"label": "a"}, "b": {"label": "b"}, "results": {"by_length": by_length, "fit": fit}}
    compare_plots.bayes_fit_png(doc, tmp_path / "c.png")
    fig = captured[-1]
    assert (
        fig.axes[0]
        .get_title()
        .endswith(
            "fit A - B:\nC0 +0.108 [+0.010, +0.200]\n"
            "gamma +0.066 (no interval: a fit is degenerate, not bootstrapped)"
        )
    )
    fig.tight_layout()  # as the PNG was laid out: the whole title inside it (a user's was cut at both sides)
    fig.canvas.draw()
    box = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
