"""Find and load trained contextlab models for inference (evaluation, analysis, export).

A run directory holds ``checkpoints/step_NNNNNN/`` folders (written by the trainer; their
layout is ``contextlab.rundir``'s); this module builds the model of one without importing the
trainer, so evaluations depend on models and data only. Weights come from safetensors,
metadata from JSON: nothing is unpickled. ``left_to_right`` says whether (and after which
tokens) the model of a checkpoint runs as a causal LM, as its training objective recorded it.
"""

from __future__ import annotations

import os

from contextlab.errors import UserError
from contextlab.rundir import read_checkpoint_state, resolve_checkpoint

# Objectives whose runs predate the record: the non-causal ones are refused (UL2 needs its [S]
# token id, which old checkpoints do not store); every other objective ran left to right.
_LEGACY_NOT_LM = {
    "mlm": "it attends in both directions and predicts the token at the same position",
    "span": "it learned to write sentinel-marked spans, never to continue plain text",
    "ul2": "it runs left to right only after its [S] mode token, whose id runs from before this "
    "version do not record; train it again",
}


def left_to_right(state: dict) -> tuple[list[int] | None, str]:
    """(token ids to put before plain text, "") when the checkpoint's model runs as a causal LM,
    else (None, why not) — from the record its objective wrote (``Objective.lm_prefix``)."""
    record = state.get("left_to_right")
    objective = state.get("objective") or "clm"
    if record is None:
        why = _LEGACY_NOT_LM.get(objective)
        return (None, f"objective {objective}: {why}") if why else ([], "")
    if record.get("prefix_ids") is None:
        return None, f"objective {objective}: {record.get('why', 'not a left-to-right model')}"
    return [int(i) for i in record["prefix_ids"]], ""


def load_trained_model(run_or_ckpt: str | os.PathLike, step: int | None = None):
    """(model, state.json, checkpoint dir): the model of a run's checkpoint, in eval mode.

    The model is the architecture the run trained (``state["arch"]``, "gpt" for older
    checkpoints; see ``contextlab.models.archs``): a GPT, or a ContextLM / MTP model whose
    forward gives next-token logits like a GPT; for a continued Hugging Face model ("hf")
    the ``transformers`` model itself. Only the ``model.*`` weights are loaded;
    modules an objective owns for training only are left out.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from contextlab.models.archs import ARCHS, arch_config

    path = resolve_checkpoint(run_or_ckpt, step)
    state = read_checkpoint_state(path)
    try:
        weights = load_file(str(path / "model.safetensors"))
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        raise UserError(
            f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc}); pass --step of an earlier "
            "checkpoint of the run (its checkpoints/ folder lists them)"
        ) from None
    arch = state.get("arch", "gpt")
    if arch == "hf":  # a continued Hugging Face model: rebuilt by transformers from the stored config
        from contextlab.models.hf_causal import from_checkpoint

        model = from_checkpoint(
            state["model_config"], {k[6:]: v for k, v in weights.items() if k.startswith("model.")}
        )
        return model, state, path
    config = arch_config(arch, state["model_config"])  # a clear error for an unknown arch
    model = ARCHS[arch][1](config)
    prefix = "model."
    weights = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embedding
    if missing or unexpected:
        raise UserError(
            f"checkpoint {path} does not match its model config (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})"
        )
    model.eval()
    return model, state, path
