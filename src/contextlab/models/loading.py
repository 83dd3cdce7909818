"""Find and load trained contextlab models for inference (evaluation, analysis, export).

A run directory holds ``checkpoints/step_NNNNNN/`` folders (written by the trainer); this
module reads them without importing the trainer, so evaluations depend on models and
data only. Weights come from safetensors, metadata from JSON: nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from contextlab.errors import UserError

_STEP_DIR = re.compile(r"^step_(\d{6,})$")


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first (a checkpoint is complete once state.json exists)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for d in root.iterdir():
        m = _STEP_DIR.match(d.name)
        if m and (d / "state.json").is_file():
            found.append((int(m.group(1)), d))
    return sorted(found)


def is_checkpoint(path: str | os.PathLike) -> bool:
    path = Path(path)
    return (path / "state.json").is_file() and (path / "model.safetensors").is_file()


def resolve_checkpoint(path: str | os.PathLike, step: int | None = None) -> Path:
    """A run directory (+ optional step) or a checkpoint directory -> the checkpoint directory."""
    path = Path(path)
    if is_checkpoint(path):
        return path
    if not path.exists():
        raise UserError(f"run or checkpoint not found: {path}")
    found = dict(list_checkpoints(path))
    if not found:
        raise UserError(f"{path} has no checkpoints (expected {path}/checkpoints/step_NNNNNN/); train first")
    if step is None:
        return found[max(found)]
    if step not in found:
        raise UserError(
            f"{path} has no checkpoint at step {step}; available: {', '.join(map(str, sorted(found)))}"
        )
    return found[step]


def read_checkpoint_state(ckpt: str | os.PathLike) -> dict:
    try:
        return json.loads((Path(ckpt) / "state.json").read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"checkpoint {ckpt} has no readable state.json ({exc})") from None


def training_stores(run_config: dict) -> list[str]:
    """The token stores a run trained on, from its resolved config: data.store, and the stores that
    data.packed / data.mixture were packed from (read from their meta.json). Paths as written."""
    d = run_config.get("data", {})
    stores = [d["store"]] if d.get("store") else []
    packed = ([d["packed"]] if d.get("packed") else []) + [
        m["packed"] for m in d.get("mixture", []) if m.get("packed")
    ]
    for p in packed:
        try:
            stores.append(json.loads((Path(p) / "meta.json").read_text())["store"]["path"])
        except (OSError, ValueError, KeyError):
            continue  # moved or deleted: callers try the other places they know
    return stores


def load_trained_model(run_or_ckpt: str | os.PathLike, step: int | None = None):
    """(model, state.json, checkpoint dir): the model of a run's checkpoint, in eval mode.

    The model is the architecture the run trained (``state["arch"]``, "gpt" for older
    checkpoints; see ``contextlab.models.archs``): a GPT, or a ContextLM / MTP model whose
    forward gives next-token logits like a GPT; for a continued Hugging Face model ("hf")
    the ``transformers`` model itself. Only the ``model.*`` weights are loaded;
    modules an objective owns for training only are left out.
    """
    from safetensors.torch import load_file

    from contextlab.models.archs import ARCHS, arch_config

    path = resolve_checkpoint(run_or_ckpt, step)
    state = read_checkpoint_state(path)
    try:
        weights = load_file(str(path / "model.safetensors"))
    except (OSError, ValueError, RuntimeError) as exc:
        raise UserError(f"checkpoint {path} cannot be read ({exc})") from None
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
