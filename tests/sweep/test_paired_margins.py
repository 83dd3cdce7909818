"""The compute-optimal analysis says how far each training context is from the optimum, paired over the
documents both runs read, so an optimum its neighbours cannot be told apart from is said to be one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextlab.sweep.compute_optimal import compute_optimal, margins_line

DOCS = 8


def _run(
    root, name: str, doc_loss: np.ndarray, held_out: str = "val_fraction 0.02 of the documents", docs=DOCS
) -> None:
    """A finished run's contextwise result: two pieces per document (of the first ``docs``), their
    best-context losses about ``doc_loss[d]`` (the pieces differ by +-0.05 around it)."""
    folder = root / "runs" / name / "eval"
    folder.mkdir(parents=True)
    pieces = np.array([(d, s) for d in range(docs) for s in (0, 100)], dtype=np.int64)
    losses = np.repeat(doc_loss[:docs], 2) + np.tile([-0.05, 0.05], docs)
    np.save(folder / "contextwise.pieces.npy", pieces)
    np.save(folder / "contextwise.piece_best_loss.npy", losses)
    doc = {
        "data": {"hash": "h", "split": "run", "held_out": held_out},
        "arrays": {"pieces": "contextwise.pieces.npy", "piece_best_loss": "contextwise.piece_best_loss.npy"},
        "results": {"summary": {"best_context_loss": float(losses.mean())}},
    }
    (folder / "contextwise.json").write_text(json.dumps(doc))


def _sweep(root, curves: dict[int, np.ndarray], held_out: dict[int, str] | None = None, docs=None):
    lines = ["run,status,train.max_flops,train.context,model.size,contextwise.best_context_loss"]
    for ctx, loss in curves.items():
        name = f"c{ctx}"
        read = (docs or {}).get(ctx, DOCS)
        _run(root, name, loss, (held_out or {}).get(ctx, "val_fraction 0.02 of the documents"), read)
        lines.append(f"{name},done,1e12,{ctx},m,{loss.mean()}")
    (root / "results.csv").write_text("\n".join(lines) + "\n")
    return compute_optimal(root)


# one run a context: its intervals hold the documents, and a user's one-seed margin read as decisive
ONE_RUN = (
    "(each weighed equally, where the losses ranked weigh pieces, so a margin can differ from the gap of "
    "the two losses; one run per context: the intervals hold the documents read, not training noise, "
    "which a grid over train.seed adds)"
)


def test_margins_pair_documents_and_name_the_contexts_within_noise(tmp_path):
    rng = np.random.default_rng(0)
    base = 5.0 + rng.normal(0, 0.5, DOCS)  # documents differ far more than the runs do
    curves = {
        64: base + 0.10 + rng.normal(0, 0.01, DOCS),  # clearly worse
        128: base,  # the optimum
        256: base + 0.002 + rng.normal(0, 0.01, DOCS),  # not told apart from it
    }
    res = _sweep(tmp_path, curves)
    m = res["paired"]["1000000000000.0"]["m"]
    assert m["optimum"] == 128 and m["documents"] == DOCS and m["within_noise"] == [256]
    far, near = m["others"]["64"], m["others"]["256"]
    assert far["diff"] == pytest.approx(float(np.mean(curves[64] - base)))
    assert far["interval95"][0] > 0.08 and near["interval95"][0] <= 0 <= near["interval95"][1]
    # the unpaired intervals would overlap: a document's own spread (0.5) dwarfs the runs' difference
    line = margins_line(m)
    assert line.startswith(
        f"each context's loss - context 128's, paired over {DOCS} documents {ONE_RUN}: 64 +0.09"
    )
    assert (
        line.endswith("(within noise)")
        and json.loads((tmp_path / "compute_optimal.json").read_text())["paired"]
    )


def test_margins_over_different_documents_say_how_many_each(tmp_path):
    """A user's sweep said "paired over 488 documents" for every context where the margins paired 603,
    581 and 488 (a document shorter than a context's pieces is read only by the shorter contexts), and
    the points ranked averaged different documents with no note."""
    base = 5.0 + np.random.default_rng(3).normal(0, 0.5, DOCS)
    res = _sweep(tmp_path, {64: base, 128: base + 0.1, 256: base + 0.2}, docs={64: 8, 128: 7, 256: 6})
    m = res["paired"]["1000000000000.0"]["m"]
    assert m["documents_read"] == {"64": 8, "128": 7, "256": 6}
    assert [m["others"][c]["n_clusters"] for c in ("128", "256")] == [7, 6]
    line = margins_line(m)
    assert "paired over the documents both runs read (as many as each margin says)" in line
    assert "128 +0.100 [" in line and "(7 documents)" in line and "(6 documents)" in line
    assert "the losses ranked average other documents per context (8 at 64, 7 at 128, 6 at 256" in line


def test_runs_that_read_other_text_are_not_paired(tmp_path):
    curves = {64: np.full(DOCS, 5.1), 128: np.full(DOCS, 5.0)}
    res = _sweep(tmp_path, curves, held_out={64: "val_fraction 0.1 of the documents"})
    m = res["paired"]["1000000000000.0"]["m"]
    assert m["skipped"].startswith("the runs' contextwise results read other text")
    assert margins_line(m).startswith("no paired margins: the runs' contextwise results read other text")


def test_the_report_table_names_the_contexts_not_told_apart(tmp_path):
    from contextlab.report.runs import _margins

    rng = np.random.default_rng(1)
    base = 5.0 + rng.normal(0, 0.5, DOCS)
    res = _sweep(tmp_path, {64: base + 0.2, 128: base, 256: base + rng.normal(0, 0.01, DOCS)})
    cols = _margins(json.loads((tmp_path / "compute_optimal.json").read_text()), "1000000000000.0", "m")
    best = res["optimal"]["1000000000000.0"]["best"]["context"]  # 128 or 256, which noise decides
    other = {128: "256", 256: "128"}[best]
    assert cols["not told apart from it (paired, 95%)"] == other
    assert cols["paired"] == f"paired over {DOCS} documents {ONE_RUN}"
    assert cols[f"each other context - context {best} (95%)"].startswith("64 +0.")  # the margin, shown


def test_replicates_are_paired_seed_by_seed_and_pooled_over_seeds(tmp_path):
    """Three seeds per context: context 64 is 0.05 worse than 128 on every document of seed 0, equal on
    seed 1 and 0.05 better on seed 2. Per document (seeds averaged) it is worse with a narrow interval;
    paired seed by seed and pooled over seeds its interval holds 0: the seeds disagree."""
    rng = np.random.default_rng(2)
    base = 5.0 + rng.normal(0, 0.5, DOCS)
    lines = ["run,status,train.max_flops,train.context,train.seed,model.size,contextwise.best_context_loss"]
    for seed, shift in enumerate((0.05, 0.0, -0.05)):
        for ctx, loss in ((64, base + shift + 0.02), (128, base)):
            name = f"c{ctx}_s{seed}"
            _run(tmp_path, name, loss + rng.normal(0, 0.002, DOCS))
            lines.append(f"{name},done,1e12,{ctx},{seed},m,{loss.mean()}")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "sweep.toml").write_text('[grid]\n"train.context" = [64, 128]\n"train.seed" = [0, 1, 2]\n')
    res = compute_optimal(tmp_path)
    m = res["paired"]["1000000000000.0"]["m"]
    lo, hi = res["replicate_range"]["1000000000000.0"]["m"]["64"]  # what the U-curves draw as a bar
    losses = [float(line.split(",")[-1]) for line in lines[1:] if line.startswith("c64")]
    assert (lo, hi) == (min(losses), max(losses)) and hi - lo == pytest.approx(0.1, abs=0.01)
    by_doc, by_seed = m["others"]["64"], m["others_over_replicates"]["64"]
    assert by_doc["interval95"][0] > 0  # documents alone: 64 looks reliably worse
    assert m["replicates"] == 3 and by_seed["per_pair"] == pytest.approx([0.07, 0.02, -0.03], abs=0.003)
    assert by_seed["interval95"][0] < 0 < by_seed["interval95"][1] and m["within_noise"] == [64]
    assert margins_line(m).startswith(
        "each context's loss - context 128's, paired per replicate over the documents (each weighed "
        "equally, where the losses ranked weigh pieces, so a margin can differ from the gap of the two "
        "losses) and pooled over 3 replicates: 64 "
    )
    (tmp_path / "sweep.toml").unlink()  # no record of the grid: replicates are averaged per document
    m = compute_optimal(tmp_path)["paired"]["1000000000000.0"]["m"]
    assert "others_over_replicates" not in m and m["within_noise"] == []


def test_an_incomplete_grid_is_said_not_averaged_over_other_seeds_silently(tmp_path):
    """Context 64 ran seeds 0 and 1, context 128 seed 0 only: the means are over different runs and
    the margins cannot pool seed by seed; both are said. A budget where one context finished is an
    optimum of one: said too; a pending run is counted."""
    rng = np.random.default_rng(3)
    base = 5.0 + rng.normal(0, 0.5, DOCS)
    lines = ["run,status,train.max_flops,train.context,train.seed,model.size,contextwise.best_context_loss"]
    for ctx, seed, flops in ((64, 0, 1e12), (64, 1, 1e12), (128, 0, 1e12), (64, 0, 2e12)):
        name = f"c{ctx}_s{seed}_f{flops:g}"
        loss = base + (0.01 if ctx == 64 else 0.0) + rng.normal(0, 0.002, DOCS)
        _run(tmp_path, name, loss)
        lines.append(f"{name},done,{flops},{ctx},{seed},m,{loss.mean()}")
    lines.append("c128_s1_f1e+12,pending,1e12,128,1,m,")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "sweep.toml").write_text('[grid]\n"train.context" = [64, 128]\n"train.seed" = [0, 1]\n')
    res = compute_optimal(tmp_path)
    notes = res["notes"]
    assert notes[0] == (
        "4 of 5 runs of the grid are done (1 pending: c128_s1_f1e+12); the analysis reads the done ones"
    )
    assert (
        "train.max_flops 1e12, m: the contexts have unequal numbers of finished replicates (64: 2, 128: 1)"
        in notes[1]
    )
    assert notes[2].startswith("train.max_flops 2e12, m: only context 64 has a finished run, so its optimum")
    m = res["paired"]["1000000000000.0"]["m"]
    assert "others_over_replicates" not in m
    assert m["replicates_unmatched"] == (
        "not pooled over replicates: the contexts did not all run the same ones (64: 2, 128: 1)"
    )
    assert "; not pooled over replicates" in margins_line(m)


def test_a_margin_below_the_optimum_says_why_it_can_be():
    """The optimum is the lowest loss over pieces; the margins weigh documents equally, so one can be
    negative: a user read `128 -0.038` as a context better than the optimum, unexplained."""
    margins = {
        "optimum": 32,
        "documents": 10,
        "others": {"128": {"diff": -0.038, "interval95": [-0.193, 0.117]}},
        "within_noise": [128],
    }
    assert margins_line(margins).endswith(
        "128 -0.038 [-0.193, +0.117] (within noise; below the optimum with documents weighed equally)"
    )


def test_the_u_curves_ring_the_contexts_not_told_apart_from_the_optimum(tmp_path, monkeypatch):
    """The U-curves drew each optimum alone, bare of the paired margins that say which neighbours tie it,
    with the raw column name for a y label and a legend entry 'model' (a user's reading)."""
    from contextlab.sweep import compute_optimal as co

    figs = []
    real = co.save_png
    monkeypatch.setattr(co, "save_png", lambda fig, path: figs.append(fig) or real(fig, path))
    rng = np.random.default_rng(0)
    base = 5.0 + rng.normal(0, 0.5, DOCS)
    curves = {64: base + 0.10 + rng.normal(0, 0.01, DOCS), 128: base}
    res = _sweep(tmp_path, {**curves, 256: base + 0.002 + rng.normal(0, 0.01, DOCS)})
    assert res["paired"]["1000000000000.0"]["m"]["within_noise"] == [256]
    ax = figs[0].axes[0]
    rings = [ln for ln in ax.get_lines() if ln.get_label() == "_m tied"]
    assert (
        len(rings) == 1 and list(rings[0].get_xdata()) == [256] and rings[0].get_markerfacecolor() == "none"
    )
    assert ax.get_ylabel() == "best_context_loss (nats/token)"
    assert "○ not told apart from it (paired, 95%)" in next(t.get_text() for t in figs[0].texts)
