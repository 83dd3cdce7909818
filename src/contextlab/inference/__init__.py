"""Opening a trained model for use: one way for a run, a checkpoint, an export and any HF folder.

``open_model(path)`` -> (model, tokenizer, ``ModelInfo``) is what evaluations, analyses,
``generate``, ``export`` and continued training start from; ``read_checkpoint`` is the one
reader of a checkpoint's record and weights (``checkpoint.py``).
"""

from contextlab.inference.checkpoint import Checkpoint, read_checkpoint
from contextlab.inference.open import ModelInfo, kind_of, open_model

__all__ = ["Checkpoint", "ModelInfo", "kind_of", "open_model", "read_checkpoint"]
