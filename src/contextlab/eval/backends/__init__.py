"""Model backends for evaluations: one interface (``base.ModelBackend``), one per kind of model.

``BACKENDS`` maps ``ModelInfo.kind`` to the class that runs such a model: ``contextlab``
(runs, checkpoints and ``contextlab-gpt`` exports, as the plain GPT) and ``hf`` (any local
Hugging Face causal LM, and runs that continued one). ``ModelAdapter`` picks one once, when
the model is opened (``contextlab.inference``); evaluations only ever call the adapter.
"""

from __future__ import annotations

from contextlab.eval.backends.base import ModelBackend
from contextlab.eval.backends.contextlab import ContextlabBackend
from contextlab.eval.backends.hf import HFBackend

BACKENDS: dict[str, type] = {"contextlab": ContextlabBackend, "hf": HFBackend}

__all__ = ["BACKENDS", "ModelBackend"]
