"""A checkpoint read back: its record (``state.json``), its weights, and the model it holds.

The trainer writes a checkpoint (``train/checkpoint.py``; the folder names are
``contextlab.rundir``'s) as the weights of one module holding the network under ``model.`` and
the objective's training-only modules under ``objective.``, and a JSON record of the run's
state. This is the one place that reads them back: weights from safetensors and the record
from JSON, so nothing is unpickled. ``Checkpoint.build`` rebuilds the architecture the record
names (``models/archs.py``; a continued Hugging Face model through ``transformers``), in eval
mode. Trade-off: the whole weights file is read once into memory, so the objective's modules
(a few MB at most) come along even when only the network is used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError
from torch import Tensor, nn

from contextlab.errors import UserError
from contextlab.rundir import WEIGHTS, check_checkpoint_files, read_checkpoint_state, resolve_checkpoint
from contextlab.weights import read_safetensors

MODEL_PREFIX = "model."  # the network's weights in a checkpoint
OBJECTIVE_PREFIX = "objective."  # the objective's own modules (training only)

# Objectives whose runs predate the record: the non-causal ones are refused (UL2 needs its [S]
# token id, which old checkpoints do not store); every other objective ran left to right.
_LEGACY_NOT_LM = {
    "mlm": "it attends in both directions and predicts the token at the same position",
    "span": "it learned to write sentinel-marked spans, never to continue plain text",
    "ul2": "it runs left to right only after its [S] mode token, whose id runs from before this "
    "version do not record; train it again",
}


def read_weights(ckpt: str | os.PathLike) -> dict[str, Tensor]:
    """Every tensor of a checkpoint's weights file, by name (``read_safetensors``)."""
    return read_safetensors(Path(ckpt) / WEIGHTS)


def with_prefix(weights: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """The tensors under ``prefix``, with the prefix taken off their names."""
    return {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}


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


@dataclass
class Checkpoint:
    """One checkpoint: its folder, its record and all its weights (see the module docstring)."""

    dir: Path
    state: dict
    weights: dict[str, Tensor]

    @property
    def arch(self) -> str:
        return self.state.get("arch", "gpt")  # checkpoints before the record were GPTs

    @property
    def step(self) -> int | None:
        return self.state.get("step")

    @property
    def objective(self) -> str:
        return self.state.get("objective") or "clm"

    @property
    def tokenizer(self) -> dict:
        """The spec (name, kind, hash, ...) of the tokenizer the run trained with."""
        return self.state.get("tokenizer") or {}

    def model_weights(self) -> dict[str, Tensor]:
        return with_prefix(self.weights, MODEL_PREFIX)

    def objective_weights(self) -> dict[str, Tensor]:
        return with_prefix(self.weights, OBJECTIVE_PREFIX)

    def left_to_right(self) -> tuple[list[int] | None, str]:
        return left_to_right(self.state)

    def build(self) -> nn.Module:
        """The trained network in eval mode: the architecture the record names, with its weights."""
        from contextlab.models.archs import HF_ARCH, build_from_fields

        if self.arch == HF_ARCH:  # a continued Hugging Face model: rebuilt by transformers
            from contextlab.models.hf.causal import from_checkpoint

            return from_checkpoint(self.state["model_config"], self.model_weights())
        model = build_from_fields(self.arch, self.state["model_config"])  # a clear error for an unknown arch
        missing, unexpected = model.load_state_dict(self.model_weights(), strict=False)
        missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embedding
        if missing or unexpected:
            raise UserError(
                f"checkpoint {self.dir} does not match its model config (missing {missing[:3]}, "
                f"unexpected {unexpected[:3]})"
            )
        return model.eval()


def read_checkpoint(run_or_ckpt: str | os.PathLike, step: int | None = None) -> Checkpoint:
    """The checkpoint of a run (its newest, or ``step``) or a checkpoint folder, read whole."""
    path = resolve_checkpoint(run_or_ckpt, step)
    state = read_checkpoint_state(path)
    try:
        weights = read_weights(path)  # a truncated file: safetensors' own error, first
        check_checkpoint_files(path, state, names=(WEIGHTS,))  # damaged weights load as other numbers
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        raise UserError(
            f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc}); pass --step of an earlier "
            "checkpoint of the run (its checkpoints/ folder lists them)"
        ) from None
    return Checkpoint(path, state, weights)
