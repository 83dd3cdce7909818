"""The pack-stats figure: documents per sequence are counted on whole-number ticks, both panels
name their y axis, and the two Zipf estimators are drawn as shares of their own sequences."""

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
    assert zipf.get_ylabel() == "share of each estimator's sequences"
    # a user's MLE of 24 sequences was drawn as counts beside 1,987 and could not be seen: shares now
    heights = [sum(p.get_height() for p in c) for c in zipf.containers]
    assert heights == [1.0, 1.0] or all(abs(h - 1) < 1e-9 for h in heights)
    labels = [t.get_text() for t in zipf.get_legend().get_texts()]
    assert labels == ["least squares: mean 1.150 (3 sequences)", "MLE: mean 1.150 (2 sequences)"]
    assert docs.get_title() == "ep: mean 1.33 docs/sequence"  # a store without a context record
    figures.pyplot().close(figs[0])
    # the title names the retriever and the context (a dense and a BM25 SPLICE figure looked alike)
    stats.plot_pack_stats({**s, "method": "splice", "retriever": "dense", "context": 1024}, "unused.png")
    assert figs[1].axes[0].get_title() == "splice, dense, context 1,024: mean 1.33 docs/sequence"
    figures.pyplot().close(figs[1])
