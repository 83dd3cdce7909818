"""scripts/context_gain_by_target.py reads a saved contextwise result's context gain both ways (by
target, as reported now; by document, as reported before 2026-11-28) from its per-piece arrays."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from contextlab.eval.results import write_result
from tests.conftest import REPO


def test_both_weightings_from_the_saved_arrays(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    script = importlib.import_module("context_gain_by_target")
    docs = np.array([0, 0, 0, 1])  # document 0 has three pieces, document 1 one
    one, full = np.array([3.0, 3.0, 3.0, 5.0]), np.array([2.0, 2.0, 2.0, 2.0])  # gains 1, 1, 1, 3
    write_result(
        tmp_path,
        "contextwise",
        results={"summary": {"context_gain": 2.0}},
        options={},
        model={},
        data={},
        seconds=0.0,
        arrays={
            "pieces": np.stack([docs, np.zeros(4, int)], 1),
            "piece_one_token_loss": one,
            "piece_best_loss": full,
        },
    )
    script.main([str(tmp_path)])
    row = json.loads(capsys.readouterr().out.splitlines()[-1])[0]
    assert row["by_target"] == pytest.approx(1.5) and row["by_document"] == pytest.approx(
        2.0
    )  # (1+1+1+3)/4, (1+3)/2
    assert row["recorded"] == 2.0 and row["pieces"] == 4 and row["documents"] == 2
