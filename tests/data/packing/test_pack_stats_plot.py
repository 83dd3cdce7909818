"""The pack-stats figure: documents per sequence are counted on whole-number ticks and both panels
name their y axis."""

from __future__ import annotations

from contextlab import figures
from contextlab.data.packing import stats


def test_documents_per_sequence_have_whole_ticks_and_the_zipf_panel_a_y_label(monkeypatch):
    """Sequences of 1 or 2 documents were drawn on ticks 0.5, 0.75, 1.0 ...; the Zipf panel had no y label."""
    figs = []
    monkeypatch.setattr(stats, "save_png", lambda fig, out: figs.append(fig) or out)
    s = {
        "method": "ep",
        "docs_per_sequence_all": [1, 1, 1, 2, 1, 2],
        "docs_per_sequence": {"mean": 8 / 6},
        "zipf_per_sequence": [1.1, 1.2, 1.15],
        "zipf_mle_per_sequence": [1.0, 1.3],
    }
    stats.plot_pack_stats(s, "unused.png")
    docs, zipf = figs[0].axes
    assert docs.get_xlabel() == "documents per sequence" and docs.get_ylabel() == "sequences"
    assert all(float(t).is_integer() for t in docs.get_xticks()) and 1 in docs.get_xticks()
    assert all(float(t).is_integer() for t in docs.get_yticks())
    assert zipf.get_ylabel() == "sequences"
    figures.pyplot().close(figs[0])
