"""Validation losses: a mean over the fixed validation rows, summed across processes.

``mean_over_rows`` runs a loss function over the rows in micro-batches and weights each batch by
the tokens it scored (objectives whose rows score unequal numbers of targets count them: prefix LM,
span corruption, UL2, FIM, MLM, recall) or else by its rows, so the mean is that over every scored
token and does not depend on how the rows split into batches or processes;
``eval_mode`` puts a module in eval mode for a block and back into training mode after it. The
trainer uses them for the objective's own loss and for the left-to-right loss every objective
that can be run so shares (``Objective.lm_loss``). Trade-off: the losses are read back to the
host once per micro-batch (a sync per batch), which is nothing next to a validation pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

from contextlab.train import distributed as D

FEW_DOCUMENTS = 5  # validation rows from fewer documents than this are said to be few


def few_documents_note(documents: int, rows: int, context: int, fix: str = "") -> str | None:
    """One line when the validation rows read fewer than ``FEW_DOCUMENTS`` documents: their loss is
    then that of one or two texts (2% of 49 essays is one), and a difference between runs may be the
    document's, not the model's. ``fix``: how to validate on more (``TrainingData.more_validation``)."""
    if documents >= FEW_DOCUMENTS:
        return None
    them = "them" if documents != 1 else "it"
    return (
        f"note: the validation loss is read on {rows:,} row{'s' * (rows != 1)} of {context:,} tokens from "
        f"{documents} document{'s' * (documents != 1)}, so it says more about {them} than about the "
        f"model's loss on other text; {fix or 'raise data.val_fraction'}, or give a data.val_store of more "
        "documents"
    )


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode (no dropout, fixed objective randomness) for the block."""
    module.eval()
    try:
        yield
    finally:
        module.train()


def mean_over_rows(rows: np.ndarray, micro: int, info: D.DistInfo, loss: Callable) -> float:
    """The mean of ``loss(batch)`` over ``rows`` in batches of ``micro``, over all processes: weighted by
    the scored tokens where ``loss`` returns them, ``(loss, {"loss_tokens": n, ...})`` (the mean over every
    scored token, for any micro-batch size or number of processes), else by rows (``loss`` a tensor)."""
    total, count = 0.0, 0.0
    for i in range(0, len(rows), max(1, micro)):
        batch = torch.from_numpy(rows[i : i + micro]).to(info.device)
        out = loss(batch)
        value, extra = out if isinstance(out, tuple) else (out, {})
        weight = float(extra["loss_tokens"]) if "loss_tokens" in extra else float(len(batch))
        total += float(value) * weight
        count += weight
    total, count = D.all_reduce_sum([total, count], info)
    return total / max(count, 1.0)
