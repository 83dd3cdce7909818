"""contextwise on a corpus of one long document: the default fills --max-docs with its pieces, and
no claim is made where the intervals over documents cannot exist.

A user's trial scored one piece of a one-file corpus (tinyshakespeare, wikitext: ``pieces 1 ·
documents 1``) and read ``"falls_with_position": false`` with no interval behind it."""

from __future__ import annotations

import numpy as np
import pytest

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.eval import contextwise
from tests.conftest import shakespeare
from tests.eval.conftest import byte_adapter, tiny_gpt

ONE_DOC_LINE = (
    "falls_with_position and the 95% intervals are null: they are over documents (pieces of one "
    "document share its text) and {scored} from one document; give a store of two or more documents "
    "of at least 65 tokens"
)


@pytest.fixture(scope="module")
def one_doc_store(tmp_path_factory):
    """One document of 5,000 bytes (Tiny Shakespeare's first): 76 pieces of 65 tokens."""
    src = tmp_path_factory.mktemp("one")
    (src / "input.txt").write_text(shakespeare(5000))
    return ingest(
        src, tmp_path_factory.mktemp("st") / "one", IngestConfig(tokenizer="byte"), progress=False
    ).store


def test_one_long_document_gives_max_docs_pieces_by_default(one_doc_store, capsys):
    assert one_doc_store.n_docs == 1 and int(one_doc_store.lengths()[0]) == 5000
    adapter = byte_adapter(tiny_gpt(2))  # context 64: pieces of 65 tokens
    out = contextwise.run(adapter, contextwise.Options(), str(one_doc_store.path))
    r = out.results
    assert out.arrays["pieces"].tolist() == [[0, 65 * k] for k in range(64)]  # consecutive, from the start
    assert r["n_sequences"] == 64 and r["n_documents"] == 1
    doc = np.asarray(one_doc_store.doc(0), dtype=np.int64)
    tokens = np.stack([doc[65 * k : 65 * k + 65] for k in range(64)])  # (64, 65)
    want = -adapter.token_logprobs(tokens).double().numpy().mean(0)  # (64,) the curve over 64 pieces
    np.testing.assert_allclose(r["loss"], want, rtol=1e-6, atol=1e-6)
    # what the pieces read of the text is said (the line named only the store's tokens)
    said = "contextwise: length 65 · pieces 64 · reads 4,160 of its 5,000 tokens (83%; --max-docs 0 "
    assert said in capsys.readouterr().out
    s = r["summary"]
    assert s["falls_with_position"] is None  # no interval over one document: no claim, not "false"
    assert s["context_gain_interval95"] is None and s["first_to_last_bucket_drop_interval95"] is None
    assert r["text"] == [ONE_DOC_LINE.format(scored="all 64 pieces scored come")]


def test_one_piece_makes_no_claim(one_doc_store):
    adapter = byte_adapter(tiny_gpt(2))
    for options in (contextwise.Options(max_docs=1), contextwise.Options(pieces_per_doc=1)):
        r = contextwise.run(adapter, options, str(one_doc_store.path)).results
        assert r["n_sequences"] == 1 and r["summary"]["falls_with_position"] is None
        assert r["text"] == [ONE_DOC_LINE.format(scored="the one piece scored comes")]


def test_many_documents_keep_one_piece_each_and_their_claim(byte_store):
    """byte_store: 6 documents of 40, 130, 300, 90, 260 and 500 tokens."""
    adapter = byte_adapter(tiny_gpt(2))
    short = contextwise.Options(length=33, max_docs=4)  # all 6 qualify: the first piece of 4
    default = contextwise.run(adapter, short, str(byte_store.path))
    explicit = contextwise.run(
        adapter, contextwise.Options(length=33, max_docs=4, pieces_per_doc=1), str(byte_store.path)
    )
    assert (
        default.arrays["pieces"].tolist()
        == explicit.arrays["pieces"].tolist()
        == [[0, 0], [1, 0], [2, 0], [3, 0]]
    )
    assert default.results["loss"] == explicit.results["loss"]
    every = contextwise.run(adapter, contextwise.Options(max_docs=0), str(byte_store.path)).results
    assert (
        every["n_sequences"] == every["n_documents"] == 5
    )  # --max-docs 0: one piece per document, as before
    # fewer documents than --max-docs: round-robin pieces (130, 300, 90, 260, 500 tokens -> 2+4+1+4+7)
    r = contextwise.run(adapter, contextwise.Options(), str(byte_store.path)).results
    assert r["n_sequences"] == 18 and r["n_documents"] == 5
    interval = r["summary"]["first_to_last_bucket_drop_interval95"]
    assert r["summary"]["falls_with_position"] is (interval[0] > 0) and "text" not in r


def test_the_smoothed_plot_is_centred_names_its_smoothing_and_shows_each_position(monkeypatch):
    """With few documents the plot averaged 9 positions in a trailing window (the curve shifted right
    by 4 positions), said so nowhere, hid the single-position minimum of the JSON and left the
    training-context line out of the legend."""
    from contextlab import figures
    from contextlab import result_plots as plots

    figs = []
    monkeypatch.setattr(plots, "save_png", lambda fig, out: figs.append(fig) or out)
    x = np.arange(1, 200)
    y = np.where(x < 100, 3.0, 2.0)  # a step at position 100
    y[149] = 1.0  # the lowest single position: 150
    minimum = contextwise.curve_minimum(y, np.zeros_like(y), train_context=128, width=13)
    curve = {"context": x.tolist(), "loss": y.tolist(), "train_context": 128, "minimum": minimum}
    plots.contextwise_png({"m": curve}, "unused.png", smooth=9)
    ax = figs[0].axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    want = ["m (moving mean, 9 positions wide)", "each position", "training context (128 tokens)"]
    assert legend[:3] == want
    assert "lowest single position" in legend
    lines = {line.get_label(): line for line in ax.get_lines()}
    smooth = lines["m (moving mean, 9 positions wide)"]
    at = dict(zip(np.round(smooth.get_xdata(), 9), smooth.get_ydata()))
    assert at[100] == pytest.approx((4 * 3.0 + 5 * 2.0) / 9)  # positions 96..104: centred, not 92..100
    assert min(at) == 5 and max(at) == 195  # only where the whole window fits
    (raw,) = [line for line in ax.get_lines() if (line.get_alpha() or 1) < 1]
    assert raw.get_ydata().tolist() == y.tolist()  # faint, every position
    cross = [line for line in ax.get_lines() if line.get_marker() == "x"]
    assert [(c.get_xdata()[0], c.get_ydata()[0]) for c in cross] == [(150, 1.0)]  # the JSON's min_loss
    figures.pyplot().close(figs[0])


def test_the_plot_draws_each_positions_interval_and_the_headline_window_with_shared_marks_in_black(
    monkeypatch,
):
    """A user read bumps of 0.3 nats as real where each position's stderr was 0.26 (no band), the
    headline best-context loss was not marked (only the lowest window, which its legend called the
    best-context width), and with two models the shared marks were listed in the first one's colour."""
    from matplotlib.colors import to_rgba

    from contextlab import figures
    from contextlab import result_plots as plots

    figs = []
    monkeypatch.setattr(plots, "save_png", lambda fig, out: figs.append(fig) or out)
    x = np.arange(1, 129)
    curves = {}
    for label, shift in (("a", 0.0), ("b", 0.2)):
        y = 3.0 - 0.5 * np.log2(x) / 7 + shift
        sem = np.full_like(y, 0.1)
        curves[label] = {
            "context": x.tolist(),
            "loss": y.tolist(),
            "stderr": sem.tolist(),
            "train_context": 128,
            "minimum": contextwise.curve_minimum(y, sem, train_context=128, width=13),
            "best_context": contextwise.best_context_loss(y, 128, 0.1),
        }
    plots.contextwise_png(curves, "unused.png", smooth=1)
    ax = figs[0].axes[0]
    legend = ax.get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts[:2] == ["a", "b"]
    assert "best-context loss (the headline): mean of positions 116-128" in texts
    assert "lowest mean over 13 positions anywhere" in texts
    assert "95% interval of each position (over the pieces)" in texts
    for handle, text in zip(legend.legend_handles, texts):
        if text in ("lowest single position", "training context (128 tokens)"):
            assert to_rgba(handle.get_color())[:3] == (0.0, 0.0, 0.0)  # shared: black, not a model's colour
    bands = [c for c in ax.collections if c.get_paths() and len(c.get_paths()[0].vertices) > 200]
    assert len(bands) == 2  # one 95% band a model
    top = bands[0].get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(max(curves["a"]["loss"]) + 1.96 * 0.1)
    squares = [line for line in ax.get_lines() if line.get_marker() == "s"]
    best = curves["a"]["best_context"]
    assert (squares[0].get_xdata()[0], squares[0].get_ydata()[0]) == (128, pytest.approx(best["loss"]))
    figures.pyplot().close(figs[0])
