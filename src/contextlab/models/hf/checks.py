"""Whether a Hugging Face folder holds a model contextlab can read: a left-to-right language model.

``AutoModelForCausalLM`` loads more than causal LMs: a BERT saved as ``BertForMaskedLM`` comes back
as ``BertLMHeadModel``, attending both ways, with one warning in the log and no error. Scored as a
causal LM it would see the very tokens it is scored on, so every loss and retrieval score of it
would be wrong without a sign. ``check_left_to_right`` runs two forward passes of 8 tokens that
differ only in the last and refuses the model when an earlier prediction changes: a test of the
behaviour, not a list of architectures, so it holds for model types contextlab has never seen, at
the cost of two tiny forwards per load. ``load_error`` says what a folder transformers has no
causal LM for (T5, an encoder-decoder) is, instead of transformers' list of classes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import PreTrainedModel
from transformers.utils import CONFIG_NAME

from contextlab.errors import UserError


def load_error(path: str | os.PathLike, exc: Exception) -> str:
    """The line for a folder ``AutoModelForCausalLM`` cannot load: for a model type it has no causal LM
    for (T5, an encoder-decoder), what contextlab reads instead of transformers' class list."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "Unrecognized configuration class" in first:
        try:
            cfg = json.loads((Path(path) / CONFIG_NAME).read_text())
        except (OSError, ValueError):
            cfg = {}
        kind = ", ".join(cfg.get("architectures") or []) or cfg.get("model_type", "this model type")
        return (
            f"cannot load a causal LM from {path}: transformers has no left-to-right language model for "
            f"{kind}; contextlab measures decoder-only causal LMs (GPT, Llama, Mistral and the like)"
        )
    return f"cannot load a causal LM from {path}: {first}"


def check_left_to_right(hf: PreTrainedModel, where: str | os.PathLike) -> None:
    """One line when ``hf``'s prediction at a position changes with a later token: a bidirectional
    model (BERT saved as ``BertForMaskedLM`` loads as ``BertLMHeadModel`` without complaint) would see
    the tokens it is scored on, and every loss and retrieval score of it would be wrong. Two forward
    passes of 8 tokens that differ only in the last; the outputs before it must agree."""
    was = hf.training
    hf.eval()
    V = int(hf.config.vocab_size)
    device = next(hf.parameters()).device
    ids = (torch.arange(1, 9, device=device) * 7919 % V)[None]  # (1, 8), fixed and spread over the vocab
    later = ids.clone()
    later[0, -1] = (later[0, -1] + 1) % V
    try:
        with torch.no_grad():
            a = hf(input_ids=ids).logits[0, :-1].float()  # (7, V)
            b = hf(input_ids=later).logits[0, :-1].float()
    finally:
        hf.train(was)
    if not torch.allclose(a, b, rtol=1e-3, atol=1e-4):
        kind = ", ".join(getattr(hf.config, "architectures", None) or []) or hf.config.model_type
        raise UserError(
            f"{where}: the {kind} model's prediction at a position changes with a later token (it "
            "attends both ways), so it would see the tokens it is scored on; contextlab measures "
            "left-to-right language models (a BERT-style model trained as one is saved with is_decoder=true)"
        )
