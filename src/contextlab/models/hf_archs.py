"""What each training architecture exports to Hugging Face format, on top of ``models/hf.py``.

- GPT: itself, as a ``contextlab-gpt`` folder.
- MTP: the next-token model (trunk + head 1 + final norm + unembedding) *is* a GPT, so it
  is exported as an ordinary ``contextlab-gpt`` folder; the extra heads are training-only
  (the folder records ``arch = "mtp"`` and the number of trained heads).
- ContextLM: the predictor feeds every prediction, so the whole model is exported, as a
  ``contextlab-contextlm`` folder (``models/hf.py`` registers both types with
  ``transformers``).

Trade-off: the export keeps only what inference uses, so an MTP export cannot resume
multi-token training; the training checkpoint is the place for that.
"""

from __future__ import annotations

import os
from pathlib import Path

from contextlab.models.contextlm import ContextLM
from contextlab.models.hf import export_to_hf
from contextlab.models.mtp import MTPModel


def export_arch_to_hf(
    model,
    out_dir: str | os.PathLike,
    *,
    tokenizer_dir: str | os.PathLike | None = None,
    extra_config: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Export a GPT, an MTPModel (as its next-token GPT) or a ContextLM as a HF folder."""
    model = getattr(model, "_orig_mod", model)  # a torch.compile'd model shares the parameters
    extra = dict(extra_config or {})
    if isinstance(model, MTPModel):
        extra.update(arch="mtp", trained_heads=model.config.n_future)
        model = model.to_gpt()
    elif isinstance(model, ContextLM):
        extra["arch"] = "contextlm"
    return export_to_hf(model, out_dir, tokenizer_dir=tokenizer_dir, extra_config=extra, overwrite=overwrite)
