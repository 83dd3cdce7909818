"""A contextwise result's context gain both ways, from its saved per-piece arrays: the mean over targets
(what `eval contextwise` reports since 2026-11-28, `loss_one_token - loss_full_context`) and the mean of
per-document means (what it reported before), with their 95% intervals over documents. Reads a result
written by any version (the arrays have not changed), so a figure recorded before the correction can be
read again without rerunning the model.

    python scripts/context_gain_by_target.py RESULT_FOLDER [RESULT_FOLDER ...]
    (a folder holding contextwise.json and its arrays, e.g. a profile's models/NAME or RUN/eval)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from contextlab.eval import stats


def both(folder: Path) -> dict:
    doc = json.loads((folder / "contextwise.json").read_text())
    arrays = {k: np.load(folder / f) for k, f in doc["arrays"].items()}
    one, full = arrays["piece_one_token_loss"], arrays["piece_best_loss"]
    docs = arrays["pieces"][:, 0]
    targets, documents = stats.context_gain(one, full, docs), stats.paired_t(one, full, docs)
    return {
        "result": str(folder),
        "recorded": doc["results"]["summary"]["context_gain"],
        "by_target": targets["gain"],
        "by_target_interval95": targets["interval95"],
        "by_document": documents["gain"],
        "by_document_interval95": documents["interval95"],
        "pieces": int(len(one)),
        "documents": int(len(np.unique(docs))),
    }


def main(folders: list[str]) -> None:
    rows = [both(Path(f)) for f in folders]
    for r in rows:
        ci_t, ci_d = r["by_target_interval95"], r["by_document_interval95"]
        print(
            f"{r['result']}: {r['pieces']} pieces of {r['documents']} documents; "
            f"recorded {r['recorded']:.3f}; by target {r['by_target']:.3f} [{ci_t[0]:.3f}, {ci_t[1]:.3f}]; "
            f"by document {r['by_document']:.3f} [{ci_d[0]:.3f}, {ci_d[1]:.3f}]"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
