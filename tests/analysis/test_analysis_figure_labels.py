"""What the figures of `analyze attention` and `analyze entropy` say about their numbers: the unit of
the distance axis, what a colour means, what a legend's number counts."""

from __future__ import annotations

import numpy as np
import pytest

from contextlab import figures
from contextlab.analysis import attention_plots, entropy_plots


@pytest.fixture
def captured(monkeypatch):
    """The figures the two modules save, kept open for inspection."""
    figs = []
    for module in (attention_plots, entropy_plots):
        monkeypatch.setattr(module, "save_png", lambda fig, out: figs.append(fig) or out)
    yield figs
    for fig in figs:
        figures.pyplot().close(fig)


def test_the_distance_heatmap_names_its_unit_and_its_colour(captured):
    """attention_distance.png: 'distance i - j' had no unit and the colour bar no label."""
    mass = [[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]]  # (layers, buckets)
    model = {"id": "runs/r1", "architecture": "GPT", "blocks": {"mass_by_distance": mass}}
    results = {
        "buckets": [{"from": 0, "to": 0}, {"from": 1, "to": 1}, {"from": 2, "to": 3}],
        "models": {"a": model, "b": model},
        "comparison": {},
    }
    attention_plots.distance_png(results, "unused.png")
    a, b, diff, hidden, bar_a, bar_b, bar_diff = captured[0].axes  # panels (2 x 2), then colour bars
    assert a.get_xlabel() == b.get_xlabel() == diff.get_xlabel() == "distance i - j (tokens)"
    assert bar_a.get_ylabel() == bar_b.get_ylabel() == "share of each query's attention"
    assert bar_diff.get_ylabel() == "A - B (share of each query's attention)"
    # a user's A and B maps had scales 0-0.22 and 0-0.24, and four panels in a row 2,200 px wide
    assert not hidden.get_visible() and captured[0].get_figwidth() <= 11
    assert a.images[0].get_clim() == b.images[0].get_clim() == (0.0, 0.5)


def test_the_entropy_legends_say_what_their_numbers_count(captured):
    """entropy.png's legend read '10 (r=+0.430)' without saying that 10 is the number of components."""
    results = {
        "contexts": [
            {"context": c, "ce": 2.0 - 0.1 * i, "ce_stderr": 0.05} for i, c in enumerate((8, 16, 32))
        ],
        "fits_vs_ce": {"entropy@10": {"r": 0.43}, "dimension@0.01": {"r": None}, "twonn": {"r": -0.2}},
    }
    series = {"entropy@10": [1.0, 2.0, 3.5], "dimension@0.01": [4, 4, 4], "twonn": [3.0, 2.0, 2.5]}
    spectra = np.array([[1.0, 0.1, 0.01], [1.0, 0.2, 0.02], [1.0, 0.3, 0.03]])  # (contexts, components)
    entropy_plots.entropy_png(results, series, spectra, [0.01], "unused.png", title="runs/r1")
    axes = captured[0].axes
    legend = lambda ax: [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend(axes[3]) == ["first 10 components (r=+0.430)"]
    assert legend(axes[4]) == ["threshold 0.01 (constant)"]
    assert legend(axes[5]) == ["twonn (r=-0.200)"]
    # points are joined in context order, not by the measure: a zigzag read as noise; the label says so
    assert axes[3].get_xlabel().endswith("joined in order of l; square = the shortest l")
    fig = captured[0]
    fig.canvas.draw()  # the bottom row's three labels ran into each other
    boxes = [ax.xaxis.label.get_window_extent(fig.canvas.get_renderer()) for ax in axes[3:6]]
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), [(b.x0, b.x1) for b in boxes]
    first = [ln for ln in axes[5].lines if ln.get_marker() == "s"]
    assert len(first) == 1 and list(first[0].get_ydata()) == [results["contexts"][0]["ce"]]


def test_the_entropy_loss_bars_are_95_percent_intervals_and_say_so(captured):
    """The loss-vs-context panel drew ±1 standard error and said nothing of what its bars were."""
    results = {
        "contexts": [
            {"context": c, "ce": 2.0 - 0.1 * i, "ce_stderr": 0.05} for i, c in enumerate((8, 16, 32))
        ],
        "fits_vs_ce": {"entropy@10": {"r": 0.43}},
    }
    spectra = np.array([[1.0, 0.1], [1.0, 0.2], [1.0, 0.3]])
    entropy_plots.entropy_png(results, {"entropy@10": [1.0, 2.0, 3.5]}, spectra, [0.01], "u.png", title="r")
    ax = captured[0].axes[2]
    assert ax.get_legend().get_texts()[0].get_text() == "model (95% interval over the samples)"
    (bars,) = [c for c in ax.collections if c.get_segments()]
    lo, hi = bars.get_segments()[0][:, 1]
    assert hi - lo == pytest.approx(2 * 1.96 * 0.05)
