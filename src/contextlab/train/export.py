"""Load a trained checkpoint as a plain model, and export it to Hugging Face format."""

from __future__ import annotations

from pathlib import Path

from contextlab.errors import UserError
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.train import checkpoint as ckpt


def load_trained_model(run_or_ckpt: str | Path, step: int | None = None) -> tuple[GPT, dict, Path]:
    """(model, state.json, checkpoint dir) of a run's checkpoint; objective modules are left out."""
    path = ckpt.resolve_checkpoint(run_or_ckpt, step)
    model_state, _, _, state = ckpt.load_checkpoint(path)
    model = GPT(GPTConfig(**state["model_config"]))
    prefix = "model."
    weights = {k[len(prefix):]: v for k, v in model_state.items() if k.startswith(prefix)}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embedding
    if missing or unexpected:
        raise UserError(f"checkpoint {path} does not match its model config (missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]})")
    model.eval()
    return model, state, path


def export_checkpoint(run_or_ckpt: str | Path, out: str | Path, *, step: int | None = None,
                      overwrite: bool = False) -> Path:
    from contextlab.models.hf import export_to_hf

    model, state, path = load_trained_model(run_or_ckpt, step)
    run_dir = path.parent.parent
    tokenizer_dir = None
    from contextlab.config import read_toml

    store = read_toml(path / "config.toml").get("data", {}).get("store")
    if store and (Path(store) / "tokenizer").is_dir():
        tokenizer_dir = Path(store) / "tokenizer"
    extra = {"contextlab_tokenizer": state.get("tokenizer"), "contextlab_step": state["step"],
             "contextlab_objective": state.get("objective"), "contextlab_run": str(run_dir)}
    export_to_hf(model, out, tokenizer_dir=tokenizer_dir, extra_config=extra, overwrite=overwrite)
    return Path(out)
